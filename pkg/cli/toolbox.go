package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// toolboxTarget is the image and daemon a toolbox command works on: config
// runs.image and dockerHost, or their defaults when there is no
// configuration file (a development machine); an unreadable or invalid
// file is an error, never silently replaced by defaults.
func toolboxTarget(g *globals, tag string) (image, dockerHost string, runsEnabled bool, err error) {
	cfg, err := config.Load(g.config)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		image, runsEnabled = layout.DefaultToolboxImage, true
	case errors.Is(err, fs.ErrPermission):
		return "", "", false, fmt.Errorf("cannot read %s as this user (root:_sandbox 0640): run it with sudo", g.config)
	case err != nil:
		return "", "", false, fmt.Errorf("%s: %w", g.config, err)
	default:
		image, dockerHost, runsEnabled = cfg.Runs.Image, cfg.DockerHost, cfg.Runs.Enabled
	}
	if tag != "" {
		image = tag
	}
	return image, dockerHost, runsEnabled, nil
}

func toolboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "toolbox",
		Short: "Build and check the code-execution image (runs.image): build, status",
	}
	cmd.AddCommand(toolboxBuildCmd(g), toolboxStatusCmd(g))
	return cmd
}

type toolboxBuildFlags struct {
	small, dryRun, noImport bool
	tag, baseTar, keepBase  string
	worker, workDir, suite  string
	mirrors                 []string
	timeout                 time.Duration
}

func toolboxBuildCmd(g *globals) *cobra.Command {
	var f toolboxBuildFlags
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the toolbox image from this machine's Debian packages (root)",
		Long: "build runs mmdebstrap (from this machine's apt sources, release " + "of /etc/os-release) into a base tar in a private directory under --workdir,\n" +
			"then imports it into Docker with sandbox-worker appended at " + layout.ToolboxWorker + ", tagged runs.image.\n" +
			"Packages: " + strings.Join(toolbox.Packages, " ") + " (--small: " + strings.Join(toolbox.SmallPackages, " ") + ", the test toolbox).\n" +
			"--base-tar imports an existing base (no mmdebstrap); --keep-base keeps the built base for that; --dry-run prints the mmdebstrap command.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runToolboxBuild(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.small, "small", false, "build the small test toolbox ("+strings.Join(toolbox.SmallPackages, ", ")+")")
	fl.StringVar(&f.tag, "tag", "", "image tag (default: runs.image, "+layout.DefaultToolboxImage+")")
	fl.StringVar(&f.baseTar, "base-tar", "", "import this base tar instead of running mmdebstrap")
	fl.StringVar(&f.keepBase, "keep-base", "", "keep the built base tar at this path (for a later --base-tar)")
	fl.BoolVar(&f.noImport, "no-import", false, "stop after the base tar (needs --keep-base; no Docker)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the mmdebstrap command and stop")
	fl.StringVar(&f.worker, "worker", toolbox.HostWorker, "the static sandbox-worker binary to put in the image")
	fl.StringVar(&f.workDir, "workdir", toolbox.DefaultWorkDir, "where the build's private temporary directory goes")
	fl.StringVar(&f.suite, "suite", "", "Debian release codename (default: this machine's)")
	fl.StringArrayVar(&f.mirrors, "mirror", nil, "mmdebstrap mirror (\"deb [opts] URI SUITE COMPONENTS\" or a URI), repeatable; default: this machine's apt sources")
	fl.DurationVar(&f.timeout, "build-timeout", toolbox.DefaultTimeout, "give up on the whole build after this long")
	return cmd
}

func runToolboxBuild(cmd *cobra.Command, g *globals, f toolboxBuildFlags) error {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	// With --json the one document goes to stdout; progress to stderr.
	say := out
	if g.json {
		say = errw
	}
	pkgs := toolbox.Packages
	if f.small {
		pkgs = toolbox.SmallPackages
	}
	switch {
	case f.baseTar != "" && (f.keepBase != "" || f.noImport || f.dryRun || f.suite != "" || len(f.mirrors) > 0):
		return errors.New("toolbox build: --base-tar imports an existing base; it takes none of --keep-base, --no-import, --dry-run, --suite, --mirror")
	case f.noImport && f.keepBase == "":
		return errors.New("toolbox build: --no-import needs --keep-base FILE (otherwise the base would be built and thrown away)")
	case f.timeout <= 0:
		return errors.New("toolbox build: --build-timeout must be positive")
	}
	var plan toolbox.Plan
	if f.baseTar == "" {
		var err error
		plan, err = toolbox.NewPlan(toolbox.BaseOptions{Packages: pkgs, Suite: f.suite, Mirrors: f.mirrors})
		if err != nil {
			return err
		}
		if f.dryRun {
			fmt.Fprintln(out, plan.String())
			return nil
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("toolbox build needs root (mmdebstrap and the Docker socket): run `sudo sandbox-host toolbox build`")
	}
	var (
		image, dockerHost string
		worker            toolbox.Worker
	)
	if !f.noImport {
		var err error
		if image, dockerHost, _, err = toolboxTarget(g, f.tag); err != nil {
			return err
		}
		// Checked before the slow part: a missing worker fails in a second.
		if worker, err = toolbox.ReadWorker(f.worker); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	start := time.Now()

	baseTar := f.baseTar
	if baseTar == "" {
		for _, s := range plan.Skipped {
			fmt.Fprintf(say, "toolbox: not using apt source %s %s from %s (not release %s)\n", s.URI, s.Suite, s.File, plan.Suite)
		}
		fmt.Fprintf(say, "toolbox: building the base of %s (%s, variant %s) with mmdebstrap from:\n", strings.Join(plan.Packages, " "), plan.Suite, plan.Variant)
		for _, m := range plan.Mirrors {
			fmt.Fprintf(say, "  %s\n", m)
		}
		base, err := plan.Build(ctx, f.workDir, errw)
		if err != nil {
			return err
		}
		defer func() {
			if err := base.Remove(); err != nil {
				fmt.Fprintln(errw, prefix+err.Error())
			}
		}()
		fmt.Fprintf(say, "toolbox: base built in %s\n", time.Since(start).Round(100*time.Millisecond))
		baseTar = base.Path
		if f.keepBase != "" {
			if err := base.Keep(f.keepBase); err != nil {
				return err
			}
			baseTar = f.keepBase
			fmt.Fprintf(say, "toolbox: base kept at %s\n", f.keepBase)
		}
		if f.noImport {
			if g.json {
				return printJSON(cmd, map[string]any{"ok": true, "baseTar": f.keepBase, "seconds": time.Since(start).Seconds()})
			}
			return nil
		}
	}

	dockerCli, err := toolbox.Connect(dockerHost)
	if err != nil {
		return err
	}
	defer dockerCli.Close()
	t0 := time.Now()
	fmt.Fprintf(say, "toolbox: importing %s with %s (sha256 %s) as %s\n", baseTar, worker.Path, shortHash(worker.SHA256), image)
	img, err := toolbox.Import(ctx, dockerCli, toolbox.ImportOptions{BaseTar: baseTar, Worker: worker, Tag: image})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (the build ran out of --build-timeout %s)", err, f.timeout)
		}
		return err
	}
	fmt.Fprintf(say, "toolbox: imported in %s\n", time.Since(t0).Round(100*time.Millisecond))
	if g.json {
		return printJSON(cmd, map[string]any{"ok": true, "image": img, "seconds": time.Since(start).Seconds()})
	}
	fmt.Fprintf(out, "%s %s, %.1f MB, built in %s\n", img.Tag, img.ID, float64(img.Size)/1e6, time.Since(start).Round(time.Second))
	return nil
}

// toolboxState is what doctor and `toolbox status` report of the image.
type toolboxState struct {
	Image       string        `json:"image"`
	Present     bool          `json:"present"`
	Current     bool          `json:"current"`
	RunsEnabled bool          `json:"runsEnabled"`
	Detail      toolbox.Image `json:"detail,omitempty"`
	Status      string        `json:"status"`
	Message     string        `json:"message"`
	Remedy      string        `json:"remedy,omitempty"`
}

// toolboxInspector asks Docker about an image (doctor's window).
type toolboxInspector func(ctx context.Context, dockerHost, image string) (toolbox.Image, error)

func realToolboxInspector(ctx context.Context, dockerHost, image string) (toolbox.Image, error) {
	cli, err := toolbox.Connect(dockerHost)
	if err != nil {
		return toolbox.Image{}, err
	}
	defer cli.Close()
	return toolbox.Inspect(ctx, cli, image)
}

const toolboxRemedy = "code execution needs the toolbox image: run `sudo sandbox-host toolbox build`"

// checkToolbox classifies the toolbox image: absent, not built by toolbox
// build, stale (its worker differs from the host's, as after an upgrade)
// or current. A finding is a warning only when runs are enabled.
func checkToolbox(ctx context.Context, inspect toolboxInspector, fileSHA func(string) (string, error), dockerHost, image string, runsEnabled bool) toolboxState {
	st := toolboxState{Image: image, RunsEnabled: runsEnabled}
	finding := StatusWarn
	if !runsEnabled {
		finding = StatusSkip
	}
	img, err := inspect(ctx, dockerHost, image)
	switch {
	case errors.Is(err, toolbox.ErrAbsent):
		st.Status, st.Message, st.Remedy = finding, image+" is not present", toolboxRemedy
	case err != nil:
		st.Status, st.Message, st.Remedy = finding, "cannot inspect "+image+": "+err.Error(), "check that Docker answers docker info"
	default:
		st.Present, st.Detail = true, img
		host, herr := fileSHA(toolbox.HostWorker)
		switch {
		case img.WorkerSHA256 == "":
			st.Status, st.Message, st.Remedy = finding, image+" has no "+toolbox.LabelWorkerSHA256+" label: it was not built by `sandbox-host toolbox build`", "run `sudo sandbox-host toolbox build`"
		case herr != nil:
			st.Status, st.Message, st.Remedy = finding, "cannot read the host's "+toolbox.HostWorker+": "+herr.Error(), "reinstall the roundtable-sandbox package"
		case host != img.WorkerSHA256:
			st.Status, st.Message, st.Remedy = finding, image+" is stale: its sandbox-worker differs from "+toolbox.HostWorker+" (the package was upgraded since it was built)", "run `sudo sandbox-host toolbox build` (with --base-tar FILE from an earlier --keep-base it takes seconds)"
		default:
			st.Current = true
			st.Status, st.Message = StatusOK, fmt.Sprintf("%s present and current (%.0f MB, worker %s)", image, float64(img.Size)/1e6, shortHash(img.WorkerSHA256))
		}
	}
	if !runsEnabled && st.Status != StatusOK {
		st.Message += " (runs.enabled is false)"
	}
	return st
}

func toolboxStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Report whether the toolbox image (runs.image) is present and current; exits 1 when it is not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			image, dockerHost, enabled, err := toolboxTarget(g, "")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 20*time.Second)
			defer cancel()
			st := checkToolbox(ctx, realToolboxInspector, toolbox.FileSHA256, dockerHost, image, enabled)
			if g.json {
				printJSON(cmd, st)
			} else {
				printToolboxState(cmd.OutOrStdout(), st)
			}
			if !st.Current {
				return errSilent
			}
			return nil
		},
	}
}

func printToolboxState(w io.Writer, st toolboxState) {
	fmt.Fprintf(w, "%-4s  %s\n", strings.ToUpper(st.Status), st.Message)
	if st.Present {
		fmt.Fprintf(w, "      id %s, workdir %s, cmd %s\n", st.Detail.ID, st.Detail.WorkDir, strings.Join(st.Detail.Cmd, " "))
		if st.Detail.Packages != "" {
			fmt.Fprintf(w, "      packages %s\n", strings.ReplaceAll(st.Detail.Packages, ",", " "))
		}
	}
	if st.Remedy != "" {
		fmt.Fprintf(w, "      remedy: %s\n", st.Remedy)
	}
}

// shortHash is a hash's first 12 characters (a label may be shorter).
func shortHash(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// doctorToolbox is doctor's toolbox line (after Docker answered).
func doctorToolbox(ctx context.Context, cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) {
	if d.toolbox == nil {
		return
	}
	st := checkToolbox(ctx, d.toolbox, d.fileSHA256, cfg.DockerHost, cfg.Runs.Image, cfg.Runs.Enabled)
	add("toolbox", st.Status, st.Message, st.Remedy)
}
