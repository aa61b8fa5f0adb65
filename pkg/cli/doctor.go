package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// Check statuses.
const (
	StatusOK   = kind.CheckOK
	StatusFail = kind.CheckFail
	StatusWarn = kind.CheckWarn
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
	Runtimes(ctx context.Context) (map[string][]string, error)
	// List is the installation's containers (doctorleftovers.go).
	List(ctx context.Context, installation string) ([]container.Info, error)
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
	// unitState asks systemd for a unit's state; an error means systemd
	// cannot be asked (no systemd, no systemctl).
	unitState   func(ctx context.Context, unit string) (unitState, error)
	toolbox     toolboxInspector                  // toolbox.go
	fileSHA256  func(path string) (string, error) // the host's sandbox-worker, for the toolbox check
	readFile    func(path string) ([]byte, error)
	fleetHealth func(ctx context.Context, f config.Fleet) []fleetnats.Finding // doctorfleet.go
	// unitProperty asks systemd for one property of a unit (doctorfleet.go).
	unitProperty func(ctx context.Context, unit, prop string) (string, error)
	resolvConf   string // the resolver configuration brokers read (doctorresolver.go)
	credDir      string
	// credOwner is the uid that must own the credential files (root; the
	// tests' own uid).
	credOwner   int
	unitDirs    []string
	polkitRules []string
	// polkitVersion prints polkit's version as `pkaction --version` does
	// (doctorpolkit.go); nil skips the check.
	polkitVersion func(ctx context.Context) (string, error)
	// machine is what a derived queue.globalConcurrency comes from.
	machine func() config.Machine
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
		unitState:     systemctlShow,
		toolbox:       realToolboxInspector,
		fileSHA256:    toolbox.FileSHA256,
		readFile:      os.ReadFile,
		fleetHealth:   realFleetHealth,
		unitProperty:  systemctlProperty,
		resolvConf:    "/etc/resolv.conf",
		credDir:       layout.CredentialsDir,
		credOwner:     0,
		unitDirs:      []string{"/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"},
		polkitRules:   []string{"/usr/share/polkit-1/rules.d/60-roundtable-sandbox.rules", "/etc/polkit-1/rules.d/60-roundtable-sandbox.rules"},
		machine:       config.ReadMachine,
		polkitVersion: pkactionVersion,
	}
}

func doctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run turns; print each failure with its remedy",
		Long: "doctor checks the configuration, the service user's directories, Docker and the worker image, the installed units and polkit rule,\n" +
			"the fleet when fleet.enabled (this box's sandbox-nats, the connection over TLS, JetStream, the family's streams and buckets with their replicas and leaders, this box's permissions; \"fleet: off\" otherwise),\n" +
			"that the brokers' resolver is not a link-local address their unit denies, " +
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
	warned := false
	for _, c := range rep.Checks {
		warned = warned || c.Status == StatusWarn
	}
	switch {
	case rep.OK && warned:
		fmt.Fprintln(w, "no check failed; read the warnings above")
	case rep.OK:
		fmt.Fprintln(w, "all checks passed")
	default:
		fmt.Fprintln(w, "some checks failed")
	}
}

func runDoctor(ctx context.Context, path string, d doctorDeps) Report {
	var rep Report
	add := func(name, status, detail, remedy string) {
		rep.Checks = append(rep.Checks, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
	}
	cfg, err := config.Load(path)
	switch {
	case errors.Is(err, fs.ErrPermission):
		add("config", StatusFail, "cannot read "+path+" as this user (root:_sandbox 0640); nothing that needs it was checked", "run `sudo sandbox-host doctor`")
	case errors.Is(err, fs.ErrNotExist):
		add("config", StatusFail, path+" does not exist", "reinstall the roundtable-sandbox package (it ships "+layout.ConfigFile+"), or pass --config")
	case err != nil:
		add("config", StatusFail, strings.ReplaceAll(err.Error(), "\n", "; "), "fix the named key in "+path+"; the host does not start until then")
	default:
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
		doctorAdmission(cfg, d, add)
		doctorSessions(cfg, d, add)
	}

	for _, u := range []string{"sandbox-host.socket", "sandbox-host.service", "sandbox-broker@.socket", "sandbox-broker@.service", "sandbox-credset@.service", "sandbox-reaper.service", "sandbox-reaper.timer", NATSUnit} {
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
	doctorUnitStates(ctx, d, add)
	doctorResolver(d, add)
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
	doctorPolkitVersion(ctx, d, add)

	if cfg != nil {
		host.DoctorChecks(cfg, kind.DoctorEnv{Stat: d.stat}, add) // a code run's projects, a rich session's skills, ...
		creds := doctorCredentials(cfg, d, add)
		doctorMCP(ctx, cfg, d, creds, add)
		doctorFleet(ctx, cfg, d, add)
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
	doctorToolbox(ctx, cfg, d, add)
	doctorRuntime(ctx, cfg.Runtime, probe, add)
	doctorLeftovers(ctx, cfg, probe, time.Now(), add)
}

// RunscArgs are the runtimeArgs runsc needs in /etc/docker/daemon.json:
// turn containers have no network, and runsc refuses Docker's "none"
// network in the root network namespace unless it makes none itself; the
// worker connects to the broker's Unix socket on a bind mount, which gVisor
// refuses unless host sockets may be opened (open: connect only, never
// create).
var RunscArgs = []string{"--network=none", "--host-uds=open"}

// runscDaemonJSON is the registration doctor prints when runsc is missing
// or misregistered.
const runscDaemonJSON = `{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none","--host-uds=open"]}}}`

// doctorRuntime checks that the configured runtime is registered with
// Docker (a turn would otherwise fail at ContainerCreate) and, for runsc,
// that it is registered with the arguments turns need.
func doctorRuntime(ctx context.Context, name string, probe dockerProbe, add func(name, status, detail, remedy string)) {
	if name == "" {
		add("runtime", StatusOK, "Docker's default runtime", "")
		return
	}
	runtimes, err := probe.Runtimes(ctx)
	if err != nil {
		add("runtime", StatusFail, err.Error(), "check that Docker answers docker info")
		return
	}
	remedy := "register it in /etc/docker/daemon.json (\"runtimes\") and restart Docker"
	if name == "runsc" {
		remedy = "put " + runscDaemonJSON + " in /etc/docker/daemon.json (merged with what it holds) and systemctl restart docker"
	}
	args, ok := runtimes[name]
	if !ok {
		add("runtime", StatusFail, "runtime "+name+" is not registered with Docker", remedy)
		return
	}
	if name == "runsc" {
		for _, want := range RunscArgs {
			if !hasRuntimeArg(args, want) {
				add("runtime", StatusFail, "runsc is registered without "+want+" (runtimeArgs "+fmt.Sprint(args)+")", remedy)
				return
			}
		}
	}
	add("runtime", StatusOK, name+" registered", "")
}

// hasRuntimeArg reports whether args hold want ("--flag=value"), also
// written with one dash or as two arguments ("--flag", "value").
func hasRuntimeArg(args []string, want string) bool {
	flag, value, _ := strings.Cut(strings.TrimLeft(want, "-"), "=")
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == flag+"="+value || (a == flag && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
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
	for _, e := range cfg.Egress.Credentials {
		addName(e.Credential)
	}
	return out
}

// credDirState is what doctor could make of the credentials directory.
type credDirState int

const (
	credDirReadable   credDirState = iota
	credDirUnreadable              // exists, but this user may not read it
	credDirMissing
	credDirBroken // another error, reported on the credentials line
)

// doctorCredentials checks that each named credential has a non-empty file
// the copier (sandbox-credset@, group _sandbox-credset) may read and nobody
// else: the directory root:_sandbox-credset 0750, each file
// root:_sandbox-credset with group read only and no bits for others
// (docs/operating.md, "Credentials"). It reports what it made of the
// directory.
func doctorCredentials(cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) credDirState {
	mkdir := "install -d -m 0750 -o root -g " + layout.CredsetUser + " " + d.credDir
	if _, err := d.readDir(d.credDir); err != nil {
		switch {
		case errors.Is(err, fs.ErrPermission):
			add("credentials", StatusSkip, "cannot read "+d.credDir+" as this user (root and the credential copier's group only)", "run `sudo sandbox-host doctor` to check credential files")
			return credDirUnreadable
		case errors.Is(err, fs.ErrNotExist):
			add("credentials", StatusFail, "the credentials directory "+d.credDir+" does not exist", mkdir+", then write each credential file into it")
			return credDirMissing
		}
		add("credentials", StatusFail, d.credDir+": "+err.Error(), mkdir)
		return credDirBroken
	}
	gid, gerr := d.lookupGroup(layout.CredsetUser)
	if gerr != nil {
		add("credentials", StatusFail, "group "+layout.CredsetUser+" does not exist: the credential copier cannot read the credentials", "reinstall the package (systemd-sysusers makes it), then run this again")
	} else if st, err := d.stat(d.credDir); err == nil {
		if msg := credModeProblem(st, d.credOwner, gid, true); msg != "" {
			add("credentials", StatusFail, "the credentials directory "+d.credDir+" "+msg, "chown root:"+layout.CredsetUser+" "+d.credDir+" && chmod 0750 "+d.credDir)
		}
	}
	for _, name := range credentialNames(cfg) {
		p := filepath.Join(d.credDir, name)
		write := "write it with: install -m 0640 -o root -g " + layout.CredsetUser + " /dev/stdin " + p
		st, err := d.stat(p)
		switch {
		case err != nil:
			add("credentials", StatusFail, "credential "+name+" has no file", write)
		case !st.Mode().IsRegular() || st.Size() == 0:
			add("credentials", StatusFail, "credential "+name+" is empty or not a regular file", write)
		case gerr == nil && credModeProblem(st, d.credOwner, gid, false) != "":
			add("credentials", StatusFail, "credential "+name+" "+credModeProblem(st, d.credOwner, gid, false), "chmod go= "+p+" && chown root:"+layout.CredsetUser+" "+p+" && chmod g=r "+p)
		default:
			add("credentials", StatusOK, "credential "+name+" present", "")
		}
	}
	return credDirReadable
}

// credModeProblem says what is wrong with the owner and mode of the
// credentials directory (dir) or of a credential file for the copier, whose
// group is gid: it must be owner's (root), group gid with read (and for the
// directory search) and never write, nothing for others. "" when right.
func credModeProblem(st fs.FileInfo, owner, gid int, dir bool) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	perm := st.Mode().Perm()
	wantGroup := fs.FileMode(0o040)
	if dir {
		wantGroup = 0o050
	}
	switch {
	case perm&0o007 != 0 || perm&0o020 != 0 || int(sys.Uid) != owner:
		return fmt.Sprintf("is %s with mode %04o: others than root and the copier's group %s could read or write it", ownerText(sys), perm, layout.CredsetUser)
	case int(sys.Gid) != gid || perm&wantGroup != wantGroup:
		return fmt.Sprintf("is %s with mode %04o: the credential copier (group %s) cannot read it, so a broker gets no credential from it", ownerText(sys), perm, layout.CredsetUser)
	}
	return ""
}

func ownerText(sys *syscall.Stat_t) string { return fmt.Sprintf("uid %d gid %d", sys.Uid, sys.Gid) }

// doctorMCP lists each server's tools and compares them with the declared ones.
func doctorMCP(ctx context.Context, cfg *config.Config, d doctorDeps, creds credDirState, add func(name, status, detail, remedy string)) {
	for _, s := range cfg.MCP {
		name := "mcp " + s.Name
		cred := ""
		if s.Credential != "" {
			switch creds {
			case credDirUnreadable:
				add(name, StatusSkip, "needs credential "+s.Credential+", which this user cannot read", "run `sudo sandbox-host doctor`")
				continue
			case credDirMissing:
				add(name, StatusFail, "needs credential "+s.Credential+", but the credentials directory "+d.credDir+" does not exist", "see the credentials line")
				continue
			case credDirBroken:
				add(name, StatusFail, "needs credential "+s.Credential+", but the credentials directory cannot be read", "see the credentials line")
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
		if s.Discover {
			doctorDiscover(ctx, s, offered, add)
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

// doctorDiscover checks a discover: true server as the host's startup does:
// the declared entries are names to take from the server (all tools when
// none), and their descriptions and schemas come from the server, so there
// is nothing to compare, only what startup would refuse.
func doctorDiscover(ctx context.Context, s config.MCP, offered []mcp.Tool, add func(name, status, detail, remedy string)) {
	list := func(context.Context, config.MCP) ([]protocol.ToolSpec, error) {
		out := make([]protocol.ToolSpec, 0, len(offered))
		for _, t := range offered {
			out = append(out, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
		}
		return out, nil
	}
	specs, err := toolset.Discovered(ctx, s, list)
	if err != nil {
		add("mcp "+s.Name, StatusFail, "discovery would fail at startup: "+err.Error(), "under mcp."+s.Name+".tools list only tools the server offers (as it spells them) and the host accepts, or declare them with discover: false")
		return
	}
	names := make([]string, 0, len(specs))
	for _, t := range specs {
		names = append(names, t.Name)
	}
	add("mcp "+s.Name, StatusOK, "discover: takes "+strings.Join(names, ", ")+" from the server", "")
}

// unitState is what systemd says of a unit.
type unitState struct {
	Load, Active, Sub, Result string
}

// systemctlShow asks systemd through systemctl (no D-Bus library: doctor
// runs as any user, and systemctl answers everyone).
func systemctlShow(ctx context.Context, unit string) (unitState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "--property=LoadState,ActiveState,SubState,Result", "--", unit).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(bytes.TrimSpace(ee.Stderr)) > 0 {
			line, _, _ := strings.Cut(strings.TrimSpace(string(ee.Stderr)), "\n")
			return unitState{}, fmt.Errorf("systemctl: %s", line)
		}
		return unitState{}, fmt.Errorf("systemctl: %w", err)
	}
	var st unitState
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "LoadState":
			st.Load = v
		case "ActiveState":
			st.Active = v
		case "SubState":
			st.Sub = v
		case "Result":
			st.Result = v
		}
	}
	if st.Active == "" {
		return unitState{}, fmt.Errorf("systemctl show %s: no state", unit)
	}
	return st, nil
}

// recoverHost is the remedy for a host unit that failed or hit its start limit.
const recoverHost = "journalctl -u sandbox-host.service -n 20 shows why; after the fix: systemctl reset-failed sandbox-host.socket sandbox-host.service && systemctl start sandbox-host.socket sandbox-host.service"

// doctorUnitStates reports the running state of the host socket and service
// and of the reaper: an installed unit that failed or does not run is a
// finding, not "all checks passed".
func doctorUnitStates(ctx context.Context, d doctorDeps, add func(name, status, detail, remedy string)) {
	type want struct {
		unit     string
		inactive string // status when inactive (not failed): the unit should run
		why      string // what being inactive means
		enable   string
		failed   string // status when failed
		recover  string
	}
	reaper := "journalctl -u sandbox-reaper.service -n 20 shows what it could not remove"
	for _, w := range []want{
		{"sandbox-host.socket", StatusFail, "the API socket is closed; clients cannot connect", "systemctl enable --now sandbox-host.socket", StatusFail, recoverHost},
		{"sandbox-host.service", StatusWarn, "not running; the socket starts it on the first call", "systemctl start sandbox-host.service", StatusFail, recoverHost},
		{"sandbox-reaper.timer", StatusFail, "orphaned containers and broker units are only removed when the host starts", "systemctl enable --now sandbox-reaper.timer", StatusFail,
			"journalctl -u sandbox-reaper.timer; then systemctl reset-failed sandbox-reaper.timer && systemctl start sandbox-reaper.timer"},
		// A oneshot: inactive between passes is its normal state.
		{"sandbox-reaper.service", StatusOK, "waiting for its timer", "", StatusWarn, reaper},
	} {
		st, err := d.unitState(ctx, w.unit)
		if err != nil {
			// Without systemd no unit can be asked about: one line says so.
			add("unit-state", StatusSkip, "cannot ask systemd about the units: "+err.Error(), "run doctor on the installed machine, where systemd runs the units")
			return
		}
		desc := fmt.Sprintf("%s is %s (%s)", w.unit, st.Active, st.Sub)
		if st.Result != "" && st.Result != "success" {
			desc += ", result " + st.Result
		}
		switch {
		case st.Load != "loaded":
			add("unit-state", StatusFail, w.unit+" is "+st.Load+" for systemd", "systemctl daemon-reload; reinstall the package if it stays")
		case st.Active == "failed":
			detail := desc
			if strings.HasSuffix(st.Result, "start-limit-hit") {
				detail += ": it failed too often in a row and systemd stopped trying"
			}
			add("unit-state", w.failed, detail, w.recover)
		case st.Active == "activating" && st.Sub == "auto-restart":
			add("unit-state", StatusFail, desc+": restarting after a failure", w.recover)
		case st.Active == "inactive" || st.Active == "deactivating":
			add("unit-state", w.inactive, desc+": "+w.why, w.enable)
		default:
			add("unit-state", StatusOK, desc, "")
		}
	}
}
