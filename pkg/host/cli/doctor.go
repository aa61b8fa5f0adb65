package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Check statuses.
const (
	StatusOK   = "ok"
	StatusFail = "fail"
	StatusWarn = "warn"
	StatusSkip = "skip"
)

// Check is one line of the doctor's report.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Remedy string `json:"remedy,omitempty"`
}

// Report is the doctor's whole answer.
type Report struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// dockerProbe is what doctor asks of Docker.
type dockerProbe interface {
	Ping(ctx context.Context) error
	ImagePresent(ctx context.Context, ref string) (bool, error)
	Close() error
}

// doctorDeps are the doctor's windows on the machine (replaced in tests).
type doctorDeps struct {
	lookupUser  func(name string) (uid, gid int, err error)
	lookupGroup func(name string) (int, error)
	docker      func(host string) (dockerProbe, error)
	stat        func(path string) (fs.FileInfo, error)
	readDir     func(path string) ([]fs.DirEntry, error)
	readCred    func(path string) (string, error)
	listTools   func(ctx context.Context, s policy.MCPServer, credential string) ([]mcp.Tool, error)
	credDir     string
	unitDirs    []string
	polkitRules []string
}

func realDoctorDeps() doctorDeps {
	return doctorDeps{
		lookupUser: func(name string) (int, int, error) {
			u, err := user.Lookup(name)
			if err != nil {
				return 0, 0, err
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			return uid, gid, nil
		},
		lookupGroup: config.ProcessEnv().LookupGroup,
		docker:      func(h string) (dockerProbe, error) { return container.New(h) },
		stat:        os.Stat,
		readDir:     os.ReadDir,
		readCred: func(p string) (string, error) {
			data, err := os.ReadFile(p)
			return strings.TrimSuffix(string(data), "\n"), err
		},
		listTools: func(ctx context.Context, s policy.MCPServer, cred string) ([]mcp.Tool, error) {
			return mcp.ListTools(ctx, s, cred, mcp.Options{Timeout: 15 * time.Second})
		},
		credDir:     layout.CredentialsDir,
		unitDirs:    []string{"/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"},
		polkitRules: []string{"/usr/share/polkit-1/rules.d/60-roundtable-sandbox.rules", "/etc/polkit-1/rules.d/60-roundtable-sandbox.rules"},
	}
}

func doctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run turns; print each failure with its remedy",
		Long: "doctor checks the configuration, the service user's directories, Docker and the worker image, the installed units and polkit rule,\n" +
			"that every configured credential NAME has a file (values are never printed; reading them needs root), and that MCP servers answer with the declared tools.\n" +
			"It exits non-zero when any check fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := runDoctor(cmd.Context(), g.config, realDoctorDeps())
			if g.json {
				printJSON(cmd, rep)
			} else {
				printReport(cmd, rep)
			}
			if !rep.OK {
				return errSilent
			}
			return nil
		},
	}
}

func printReport(cmd *cobra.Command, rep Report) {
	w := cmd.OutOrStdout()
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%-4s  %-12s  %s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
		if c.Remedy != "" && c.Status != StatusOK {
			fmt.Fprintf(w, "      %-12s  remedy: %s\n", "", c.Remedy)
		}
	}
	if rep.OK {
		fmt.Fprintln(w, "all checks passed")
	} else {
		fmt.Fprintln(w, "some checks failed")
	}
}

func runDoctor(ctx context.Context, path string, d doctorDeps) Report {
	var rep Report
	add := func(name, status, detail, remedy string) {
		rep.Checks = append(rep.Checks, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
	}
	cfg, err := config.Load(path)
	if err != nil {
		add("config", StatusFail, strings.ReplaceAll(err.Error(), "\n", "; "), "fix the named key in "+path)
	} else {
		add("config", StatusOK, path+" loads and validates", "")
	}

	if cfg != nil {
		uid, gid, err := d.lookupUser(layout.HostUser)
		if err != nil {
			add("directories", StatusFail, "service user "+layout.HostUser+" not found", "reinstall the roundtable-sandbox package (sysusers.d creates it)")
		} else {
			env := config.Env{UID: uid, GID: gid, GOOS: runtime.GOOS, LookupGroup: d.lookupGroup}
			if err := cfg.CheckHost(env); err != nil {
				add("directories", StatusFail, strings.ReplaceAll(err.Error(), "\n", "; "), "systemd-tmpfiles --create roundtable-sandbox.conf, or fix owner and mode as named")
			} else {
				add("directories", StatusOK, fmt.Sprintf("roots, policy and state directories belong to %s (uid %d) without group/other access", layout.HostUser, uid), "")
			}
		}
		if bgid, err := d.lookupGroup(layout.BrokerUser); err != nil {
			add("policy-group", StatusFail, "group "+layout.BrokerUser+" not found; brokers could not read their policies", "reinstall the roundtable-sandbox package (sysusers.d creates it)")
		} else if err := host.CheckPolicyGroup(cfg.PolicyDir, bgid); err != nil {
			add("policy-group", StatusFail, err.Error(), "systemd-tmpfiles --create roundtable-sandbox.conf")
		} else {
			add("policy-group", StatusOK, cfg.PolicyDir+" belongs to group "+layout.BrokerUser, "")
		}
		n := config.BrokerSocketLen(cfg.RunRoot)
		if n > layout.MaxSocketPath {
			add("socket-path", StatusFail, fmt.Sprintf("broker socket path is %d characters, over %d", n, layout.MaxSocketPath), "choose a shorter runRoot")
		} else {
			add("socket-path", StatusOK, fmt.Sprintf("broker socket path is %d characters (limit %d)", n, layout.MaxSocketPath), "")
		}
		doctorDocker(ctx, cfg, d, add)
	}

	for _, u := range []string{"sandbox-host.socket", "sandbox-host.service", "sandbox-broker@.socket", "sandbox-broker@.service", "sandbox-reaper.service", "sandbox-reaper.timer"} {
		found := ""
		for _, dir := range d.unitDirs {
			if _, err := d.stat(filepath.Join(dir, u)); err == nil {
				found = filepath.Join(dir, u)
				break
			}
		}
		if found == "" {
			add("units", StatusFail, u+" is not installed", "reinstall the roundtable-sandbox package, then systemctl daemon-reload")
		} else {
			add("units", StatusOK, found, "")
		}
	}
	polkit := ""
	for _, p := range d.polkitRules {
		if _, err := d.stat(p); err == nil {
			polkit = p
			break
		}
	}
	if polkit == "" {
		add("polkit", StatusFail, "rule 60-roundtable-sandbox.rules not found; the host cannot start broker units", "reinstall the package (it ships /usr/share/polkit-1/rules.d/60-roundtable-sandbox.rules)")
	} else {
		add("polkit", StatusOK, polkit, "")
	}

	if cfg != nil {
		creds := doctorCredentials(cfg, d, add)
		doctorMCP(ctx, cfg, d, creds, add)
	}
	rep.OK = true
	for _, c := range rep.Checks {
		if c.Status == StatusFail {
			rep.OK = false
		}
	}
	return rep
}

func doctorDocker(ctx context.Context, cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	remedy := "start Docker (systemctl start docker) and make sure _sandbox is in group docker"
	probe, err := d.docker(cfg.DockerHost)
	if err != nil {
		add("docker", StatusFail, err.Error(), remedy)
		return
	}
	defer probe.Close()
	if err := probe.Ping(ctx); err != nil {
		add("docker", StatusFail, "not reachable: "+err.Error(), remedy)
		return
	}
	add("docker", StatusOK, "reachable", "")
	ok, err := probe.ImagePresent(ctx, cfg.Image)
	switch {
	case err != nil:
		add("image", StatusFail, err.Error(), "docker load -i "+cfg.ImageArchive)
	case !ok:
		add("image", StatusFail, cfg.Image+" is not present (it is never pulled)", "docker load -i "+cfg.ImageArchive)
	default:
		add("image", StatusOK, cfg.Image+" present", "")
	}
}

// credentialNames lists every credential name the configuration uses.
func credentialNames(cfg *config.Config) []string {
	seen := map[string]bool{}
	var out []string
	addName := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	addName(cfg.Credentials.Default)
	for _, r := range cfg.Credentials.Rules {
		addName(r.Credential)
	}
	for _, t := range cfg.Tools {
		addName(t.Credential)
	}
	for _, s := range cfg.MCP {
		addName(s.Credential)
	}
	return out
}

// doctorCredentials checks that each named credential has a non-empty file.
// It reports whether the directory was readable.
func doctorCredentials(cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) bool {
	if _, err := d.readDir(d.credDir); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			add("credentials", StatusSkip, "cannot read "+d.credDir+" as this user (it is root-only)", "run `sudo sandbox-host doctor` to check credential files")
		} else {
			add("credentials", StatusFail, d.credDir+": "+err.Error(), "install -d -m 0700 -o root -g root "+d.credDir)
		}
		return false
	}
	for _, name := range credentialNames(cfg) {
		p := filepath.Join(d.credDir, name)
		st, err := d.stat(p)
		switch {
		case err != nil:
			add("credentials", StatusFail, "credential "+name+" has no file", "write it with: install -m 0600 -o root -g root /dev/stdin "+p)
		case !st.Mode().IsRegular() || st.Size() == 0:
			add("credentials", StatusFail, "credential "+name+" is empty or not a regular file", "write it with: install -m 0600 -o root -g root /dev/stdin "+p)
		default:
			add("credentials", StatusOK, "credential "+name+" present", "")
		}
	}
	return true
}

// doctorMCP lists each server's tools and compares them with the declared ones.
func doctorMCP(ctx context.Context, cfg *config.Config, d doctorDeps, credsReadable bool, add func(name, status, detail, remedy string)) {
	for _, s := range cfg.MCP {
		name := "mcp " + s.Name
		cred := ""
		if s.Credential != "" {
			if !credsReadable {
				add(name, StatusSkip, "needs credential "+s.Credential+", which this user cannot read", "run `sudo sandbox-host doctor`")
				continue
			}
			v, err := d.readCred(filepath.Join(d.credDir, s.Credential))
			if err != nil || v == "" {
				add(name, StatusFail, "credential "+s.Credential+" cannot be read", "see the credentials line")
				continue
			}
			cred = v
		}
		offered, err := d.listTools(ctx, mcpServer(s), cred)
		if err != nil {
			add(name, StatusFail, "tools/list failed: "+err.Error(), "check mcp url, credential and that the server speaks Streamable HTTP")
			continue
		}
		var declared []protocol.ToolSpec
		for _, t := range s.Tools {
			declared = append(declared, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(t.Parameters)})
		}
		names := make([]string, 0, len(offered))
		for _, t := range offered {
			names = append(names, t.Name)
		}
		status, notes := StatusOK, []string{"offers " + strings.Join(names, ", ")}
		for _, f := range mcp.CompareTools(declared, offered) {
			if s.Discover && f.Kind == mcp.FindingUndeclared {
				continue
			}
			switch f.Kind {
			case mcp.FindingMissing, mcp.FindingSchema:
				status = StatusFail
			case mcp.FindingSchemaUnknown:
				if status == StatusOK {
					status = StatusWarn
				}
			}
			notes = append(notes, fmt.Sprintf("%s %s: %s", f.Kind, f.Tool, f.Detail))
		}
		remedy := ""
		if status != StatusOK {
			remedy = "update mcp." + s.Name + ".tools to what the server offers (or set discover: true)"
		}
		add(name, status, strings.Join(notes, "; "), remedy)
	}
}
