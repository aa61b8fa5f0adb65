package container

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// ErrInvalidSpec is the category of every refused Spec: nothing is sent to
// the daemon for a spec that fails validation.
var ErrInvalidSpec = errors.New("invalid container spec")

// Bounds of a Spec. They are wide on purpose (the config package holds the
// operator-facing bounds); their job is to refuse zero, negative and absurd
// values, because Docker reads 0 as "unlimited".
const (
	MinMemoryMB = 16
	MaxMemoryMB = 64 << 10
	MinCPUs     = 0.01
	MaxCPUs     = 256
	MaxPids     = 32768
	MaxTmpfsMB  = 4096
	maxLabels   = 16
	maxLabelKey = 128
	maxLabelVal = 256
	maxImageRef = 255
)

// Fixed parts of the container (DESIGN.md section 4).
const (
	TmpPath = "/tmp"
	// LogDriver: none. Docker's journald driver logs every container as
	// docker.service, so one flooding guest would spend the rate limit of
	// every channel (and of dockerd); the host forwards stderr instead,
	// bounded (pkg/workerlog), from the attach stream.
	LogDriver     = "none"
	logTagPrefix  = "sandbox/"
	noNewPrivOpt  = "no-new-privileges"
	networkNone   = "none"
	capabilityAll = "ALL"
	// MaxOpenFiles is the container's RLIMIT_NOFILE.
	MaxOpenFiles = 1024
)

var noInit = false

var (
	nameRe    = regexp.MustCompile(`^` + regexp.QuoteMeta(ids.ContainerPrefix) + `[0-9a-f]{16}-[0-9a-f]{8}$`)
	imageRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)
	runtimeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// Spec is one turn's container. Every field is required except Runtime.
type Spec struct {
	// Name is ids.ContainerName(channel, turn).
	Name  string
	Image string
	// UID and GID are the channel's guest ids: never root and never the
	// ids of the process creating the container (the host), so a guest
	// shares no per-user kernel budget and no API or polkit identity with it.
	UID, GID int
	// WorkspaceDir is bound read-write at /workspace, TurnDir read-only at
	// /run/broker. Both must be absolute, clean, symlink-free directories.
	WorkspaceDir, TurnDir string
	MemoryMB              int
	CPUs                  float64
	Pids                  int64
	TmpfsMB               int
	// Runtime is an optional OCI runtime name (for example "runsc").
	Runtime string
	// LogTag is ids.LogTag(channel): "sandbox/<channel tag>", the journal
	// identifier the host forwards the worker's stderr under.
	LogTag string
	// Labels must carry layout.LabelInstallation, LabelTurn, LabelChannel and
	// LabelDeadline with valid values; the reaper depends on them.
	Labels map[string]string
	// Run, when set, makes this a code run's container (DESIGN.md section
	// 12) instead of a turn's: WorkspaceDir is the project, bound read-only;
	// TurnDir is optional (only a run granted the proxy route has a broker).
	Run *RunOptions
	// Precheck makes this a precheck script's container (DESIGN.md section
	// 14): a turn's confinement with WorkspaceDir (an empty directory)
	// bound read-only and the worker image's entrypoint given the argument
	// PrecheckCommand.
	Precheck bool
	// Rich makes this a rich channel's long-lived container (DESIGN.md
	// section 13): a turn's confinement and mounts, the worker image's
	// entrypoint given the argument RichCommand.
	Rich bool
	// SkillsDir, only for a Rich container, is the operator's skills tree,
	// bound read-only at richproto.SkillsPath ("" none).
	SkillsDir string
	// Session, when set, makes this a session's long-lived toolbox
	// container (DESIGN.md section 18, SessionOptions).
	Session *SessionOptions
}

// SessionOptions are what a session's container has that a turn's has
// not. Its PID 1 is the session supervisor (Command), which starts as
// root with SetupCapabilities and no more: it needs SETUID, SETGID and
// SETPCAP to start execs as the guest with no capability (and a root
// exec with exactly a run's setup command's), DAC_OVERRIDE and the file
// capabilities only for the root execs' sake (its own file operations
// run with the guest's filesystem uid). It is not given CAP_KILL: it ends
// a guest exec's process group as the guest (runs/supervisor's KillAs),
// so the kernel's rule that only an owner signals a process still holds
// for everything the guest runs. The root filesystem is read-only;
// WorkspaceDir (the project) is bound read-only at /workspace; the
// writable places are tmpfs: WorkPath (WorkMB, the guest's, 0700),
// /output (OutputMB, the guest's) and /tmp (Spec.TmpfsMB). A session
// created with network also has its turn directory (Spec.TurnDir, the
// broker's socket) read-only at /run/broker; the container's network is
// still none, the broker is its only way out.
type SessionOptions struct {
	WorkMB, OutputMB int
	Command          []string
}

// WorkPath is a session's writable work directory (sessionsup's default).
const WorkPath = "/work"

// RichCommand is the worker's argument that runs the rich channel worker.
const RichCommand = "rich"

// PrecheckCommand is the worker's argument that runs a precheck script.
const PrecheckCommand = "precheck"

// RunOptions are what a code run's container has that a turn's has not.
type RunOptions struct {
	// Setup: the run has setup commands, so the container starts as root
	// with SetupCapabilities and a writable root filesystem (package
	// installation writes /usr and /var; the layer dies with the
	// container); the supervisor drops to UID:GID with no capabilities for
	// the main command. Without setup the container runs as UID:GID with
	// no capabilities and a read-only root.
	Setup bool
	// GateDir, with Setup only, is the host directory bound read-only at
	// wire.SetupGatePath with the project at wire.SetupProjectPath inside
	// it instead of at /workspace (see there): the guest's uid:gid, mode
	// 0700, holding an empty directory "workspace" as the project's mount
	// point.
	GateDir string
	// OutputMB sizes the /output tmpfs (owned by UID:GID).
	OutputMB int
	// Command is the container's argv (the toolbox's supervisor).
	Command []string
}

// SetupCapabilities are the container's (so the supervisor's, PID 1) in a
// run with setup: what package installation needs (dpkg's chown, chmod
// and setuid bits: CHOWN, FOWNER, FSETID), what the supervisor needs to
// start setup commands with fewer and the main command as the guest
// (SETUID, SETGID, SETPCAP, with which it empties the bounding set), and
// DAC_OVERRIDE for reading the main command's artifacts whatever their
// mode. Setup commands get only CHOWN, FOWNER and FSETID
// (supervisor.SetupCommandCapabilities): nothing that reads past a file's
// mode or switches users, so they cannot pass the project's gate
// (wire.SetupGatePath). Everything else Docker grants by default stays
// dropped, as the seed drops it: SYS_ADMIN, SYS_PTRACE, NET_ADMIN,
// NET_RAW, MKNOD, SYS_CHROOT, SETFCAP, AUDIT_WRITE, NET_BIND_SERVICE,
// KILL; DAC_READ_SEARCH is never granted.
var SetupCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "SETPCAP"}

// OutputPath is where a run's exported files are written.
const OutputPath = "/output"

// processIDs are the creating process's uid and gid (tests replace it).
var processIDs = func() (int, int) { return os.Getuid(), os.Getgid() }

func invalid(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrInvalidSpec)
}

// Validate checks every field of s. dockerSockets are host paths that must
// never become visible inside a bind mount.
func (s *Spec) Validate(dockerSockets ...string) error {
	if !nameRe.MatchString(s.Name) {
		return invalid("name must match %s", nameRe)
	}
	if len(s.Image) == 0 || len(s.Image) > maxImageRef || !imageRe.MatchString(s.Image) {
		return invalid("image reference must be 1 to %d characters of [A-Za-z0-9._/:@+-]", maxImageRef)
	}
	if s.UID <= 0 || s.GID <= 0 {
		return invalid("uid and gid must be positive (root is refused)")
	}
	if uid, gid := processIDs(); s.UID == uid || s.GID == gid {
		return invalid("uid and gid must not be this process's own (a guest never shares the host's ids)")
	}
	if s.MemoryMB < MinMemoryMB || s.MemoryMB > MaxMemoryMB {
		return invalid("memory must be %d to %d MiB", MinMemoryMB, MaxMemoryMB)
	}
	if !(s.CPUs >= MinCPUs && s.CPUs <= MaxCPUs) { // also refuses NaN
		return invalid("cpus must be %.2f to %d", MinCPUs, MaxCPUs)
	}
	if s.Pids < 1 || s.Pids > MaxPids {
		return invalid("pids must be 1 to %d", MaxPids)
	}
	if s.TmpfsMB < 1 || s.TmpfsMB > MaxTmpfsMB {
		return invalid("tmpfs must be 1 to %d MiB", MaxTmpfsMB)
	}
	if s.Runtime != "" && !runtimeRe.MatchString(s.Runtime) {
		return invalid("runtime must match %s", runtimeRe)
	}
	tag, ok := strings.CutPrefix(s.LogTag, logTagPrefix)
	if !ok || ids.ValidChannelTag(tag) != nil {
		return invalid("log tag must be %s<channel tag>", logTagPrefix)
	}
	if err := s.validateLabels(); err != nil {
		return err
	}
	if s.Precheck && s.Run != nil {
		return invalid("a container is a run's or a precheck's, not both")
	}
	if s.Rich && (s.Run != nil || s.Precheck) {
		return invalid("a rich channel's container is neither a run's nor a precheck's")
	}
	if x := s.Session; x != nil {
		if s.Run != nil || s.Precheck || s.Rich || s.SkillsDir != "" {
			return invalid("a session's container is nothing else's")
		}
		if x.WorkMB < 1 || x.WorkMB > MaxTmpfsMB || x.OutputMB < 1 || x.OutputMB > MaxTmpfsMB {
			return invalid("a session's work and output tmpfs must be 1 to %d MiB", MaxTmpfsMB)
		}
		if len(x.Command) == 0 || len(x.Command) > 8 || !filepath.IsAbs(x.Command[0]) {
			return invalid("a session's command must be 1 to 8 words starting with an absolute path")
		}
		if s.TurnDir != "" { // a network session's broker (docs/sessions.md)
			return validateMounts([]source{{"workspace", s.WorkspaceDir}, {"turn dir", s.TurnDir}}, dockerSockets)
		}
		return validateMounts([]source{{"workspace", s.WorkspaceDir}}, dockerSockets)
	}
	if s.SkillsDir != "" {
		if !s.Rich {
			return invalid("only a rich channel's container has a skills dir")
		}
		return validateMounts([]source{{"workspace", s.WorkspaceDir}, {"turn dir", s.TurnDir}, {"skills dir", s.SkillsDir}}, dockerSockets)
	}
	srcs := []source{{"workspace", s.WorkspaceDir}, {"turn dir", s.TurnDir}}
	if r := s.Run; r != nil {
		if r.OutputMB < 1 || r.OutputMB > MaxTmpfsMB {
			return invalid("output tmpfs must be 1 to %d MiB", MaxTmpfsMB)
		}
		if len(r.Command) == 0 || len(r.Command) > 8 || !filepath.IsAbs(r.Command[0]) {
			return invalid("a run's command must be 1 to 8 words starting with an absolute path")
		}
		if s.TurnDir == "" {
			srcs = srcs[:1]
		}
		switch {
		case r.Setup && r.GateDir == "":
			// Without the gate, root's setup would read the project.
			return invalid("a run with setup needs a gate dir")
		case !r.Setup && r.GateDir != "":
			return invalid("only a run with setup has a gate dir")
		case r.Setup:
			srcs = append(srcs, source{"gate dir", r.GateDir})
			if err := validateMounts(srcs, dockerSockets); err != nil {
				return err
			}
			// The project's mount point: inside a read-only bind the
			// runtime could not create it.
			// The gate is the guest's, 0700: a host without
			// CAP_DAC_OVERRIDE (the packaged one) cannot look inside,
			// and the check is only for a clearer error (Docker fails
			// the create without the mount point anyway).
			fi, err := os.Lstat(filepath.Join(r.GateDir, gateMountPoint))
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			if err != nil || !fi.IsDir() {
				return invalid("the gate dir must hold the directory %s", gateMountPoint)
			}
			return nil
		}
	}
	return validateMounts(srcs, dockerSockets)
}

// gateMountPoint is the project's mount point inside a gate dir.
var gateMountPoint = path.Base(wire.SetupProjectPath)

// source is a bind mount's host directory and what it is, for errors.
type source struct{ what, path string }

func (s *Spec) validateLabels() error {
	if len(s.Labels) > maxLabels {
		return invalid("at most %d labels", maxLabels)
	}
	for k, v := range s.Labels {
		if k == "" || len(k) > maxLabelKey || len(v) > maxLabelVal || !printable(k) || !printable(v) {
			return invalid("label keys must be 1 to %d and values at most %d printable characters", maxLabelKey, maxLabelVal)
		}
	}
	if err := ids.ValidInstallation(s.Labels[layout.LabelInstallation]); err != nil {
		return invalid("label %s: %v", layout.LabelInstallation, err)
	}
	turn := s.Labels[layout.LabelTurn]
	if err := ids.ValidTurnID(turn); err != nil {
		return invalid("label %s: %v", layout.LabelTurn, err)
	}
	// The name's last 8 characters are the turn id's first 8 (ids.ContainerName).
	if !strings.HasSuffix(s.Name, "-"+turn[:8]) {
		return invalid("name does not belong to the turn label")
	}
	if err := ids.ValidChannelTag(s.Labels[layout.LabelChannel]); err != nil {
		return invalid("label %s: %v", layout.LabelChannel, err)
	}
	if d, err := strconv.ParseInt(s.Labels[layout.LabelDeadline], 10, 64); err != nil || d <= 0 {
		return invalid("label %s must be positive unix seconds", layout.LabelDeadline)
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// validateMounts refuses bind sources that are not what the host made: a
// relative, unclean or symlinked path (the daemon would resolve the link), a
// non-directory, the two sources nested in each other, or a source that
// contains the Docker socket.
func validateMounts(dirs []source, dockerSockets []string) error {
	for _, p := range dirs {
		if !filepath.IsAbs(p.path) || filepath.Clean(p.path) != p.path || p.path == "/" {
			return invalid("%s must be an absolute clean path other than /", p.what)
		}
		resolved, err := filepath.EvalSymlinks(p.path)
		if err != nil || resolved != p.path {
			return invalid("%s must exist and contain no symlink", p.what)
		}
		fi, err := os.Lstat(p.path)
		if err != nil || !fi.IsDir() {
			return invalid("%s must be a directory", p.what)
		}
		for _, sock := range dockerSockets {
			if sock != "" && within(sock, p.path) {
				return invalid("%s must not contain the Docker socket", p.what)
			}
		}
	}
	for i := range dirs {
		for j := i + 1; j < len(dirs); j++ {
			if within(dirs[i].path, dirs[j].path) || within(dirs[j].path, dirs[i].path) {
				return invalid("%s and %s must be separate", dirs[i].what, dirs[j].what)
			}
		}
	}
	return nil
}

// within reports whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// configs builds the Engine API create request for a validated spec. It is
// the single place that states the container's confinement.
// logDriver is LogDriver except in integration tests on a daemon without
// journald (see Driver.logDriver).
func (s *Spec) configs(logDriver string) (*container.Config, *container.HostConfig) {
	labels := make(map[string]string, len(s.Labels))
	for k, v := range s.Labels {
		labels[k] = v
	}
	memory := int64(s.MemoryMB) << 20
	pids := s.Pids
	cfg := &container.Config{
		User:         strconv.Itoa(s.UID) + ":" + strconv.Itoa(s.GID),
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		StdinOnce:    true,
		Tty:          false,
		Env: []string{
			protocol.EnvBrokerSocket + "=" + protocol.BrokerSocketPath,
			protocol.EnvAPIKey + "=" + protocol.DummyAPIKey,
		},
		Image:      s.Image,
		WorkingDir: protocol.WorkspacePath,
		Labels:     labels,
	}
	host := &container.HostConfig{
		NetworkMode:    networkNone,
		ReadonlyRootfs: true,
		CapDrop:        []string{capabilityAll},
		SecurityOpt:    []string{noNewPrivOpt},
		AutoRemove:     false,
		Privileged:     false,
		LogConfig:      container.LogConfig{Type: LogDriver},
		Runtime:        s.Runtime,
		Tmpfs: map[string]string{
			TmpPath: TmpfsOptions(s.TmpfsMB),
		},
		Mounts: []mount.Mount{
			{
				Type:        mount.TypeBind,
				Source:      s.WorkspaceDir,
				Target:      protocol.WorkspacePath,
				ReadOnly:    false,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			},
			{
				Type:        mount.TypeBind,
				Source:      s.TurnDir,
				Target:      protocol.BrokerDir,
				ReadOnly:    true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			},
		},
		// No /dev/shm and an IPC namespace of its own: the worker uses
		// neither, and a shm tmpfs would be one more writable place
		// (Docker's default is 64 MiB).
		IpcMode: container.IPCModeNone,
		// No init process: the worker starts no processes, so it has no
		// children to reap; a compromised worker's zombies count against its
		// own pids limit and die with the container at turn end. docker-init
		// would be one more host binary mounted into every container.
		Init: &noInit,
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memory, // no swap beyond memory
			NanoCPUs:   int64(s.CPUs*1e9 + 0.5),
			PidsLimit:  &pids,
			// nproc counts every process of the guest's uid (its own), so
			// it matches the pids limit; nofile is far above the worker's
			// handful of descriptors and far below Docker's default.
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: MaxOpenFiles, Hard: MaxOpenFiles},
				{Name: "nproc", Soft: pids, Hard: pids},
			},
		},
	}
	if logDriver != "" && logDriver != LogDriver {
		host.LogConfig = container.LogConfig{Type: logDriver}
	}
	if s.Run != nil {
		s.runConfigs(cfg, host)
	}
	if s.Session != nil {
		s.sessionConfigs(cfg, host)
	}
	if s.Precheck {
		cfg.Cmd = []string{PrecheckCommand}
		host.Mounts[0].ReadOnly = true
	}
	if s.Rich {
		// Its stdin is empty and closed at start: the rich worker pulls
		// its turns from its broker.
		cfg.Cmd = []string{RichCommand}
		if s.SkillsDir != "" {
			host.Mounts = append(host.Mounts, mount.Mount{
				Type:        mount.TypeBind,
				Source:      s.SkillsDir,
				Target:      richproto.SkillsPath,
				ReadOnly:    true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			})
		}
	}
	return cfg, host
}

// runConfigs turns a turn's confinement into a code run's: the same flags,
// except what DESIGN.md section 12 changes (see RunOptions).
func (s *Spec) runConfigs(cfg *container.Config, host *container.HostConfig) {
	r := s.Run
	cfg.Env = []string{"LANG=C.UTF-8"}
	cfg.Entrypoint = append([]string{}, r.Command[:1]...)
	cfg.Cmd = append([]string{}, r.Command[1:]...)
	if r.Setup {
		cfg.User = "0:0"
		host.CapAdd = append([]string{}, SetupCapabilities...)
		host.ReadonlyRootfs = false
	}
	// Code runs compile and execute in /tmp and /output: exec stays
	// allowed there (the turn's /tmp is noexec), suid and devices not.
	host.Tmpfs = map[string]string{
		TmpPath:    "size=" + strconv.Itoa(s.TmpfsMB) + "m,mode=1777,nosuid,nodev",
		OutputPath: "size=" + strconv.Itoa(r.OutputMB) + "m,mode=0755,nosuid,nodev,uid=" + strconv.Itoa(s.UID) + ",gid=" + strconv.Itoa(s.GID),
	}
	mounts := []mount.Mount{{
		Type:        mount.TypeBind,
		Source:      s.WorkspaceDir,
		Target:      protocol.WorkspacePath,
		ReadOnly:    true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}}
	if r.Setup {
		// The project behind its gate (wire.SetupGatePath): the gate
		// first, so the daemon mounts it before the project inside.
		mounts[0].Target = wire.SetupProjectPath
		mounts = append([]mount.Mount{{
			Type:        mount.TypeBind,
			Source:      r.GateDir,
			Target:      wire.SetupGatePath,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		}}, mounts...)
	}
	if s.TurnDir != "" {
		mounts = append(mounts, host.Mounts[1])
	}
	host.Mounts = mounts
}

// sessionConfigs turns a turn's confinement into a session's: the same
// flags, except what SessionOptions says.
func (s *Spec) sessionConfigs(cfg *container.Config, host *container.HostConfig) {
	x := s.Session
	cfg.Env = []string{"LANG=C.UTF-8"}
	cfg.Entrypoint = append([]string{}, x.Command[:1]...)
	cfg.Cmd = append([]string{}, x.Command[1:]...)
	cfg.User = "0:0"
	cfg.WorkingDir = WorkPath
	host.CapAdd = append([]string{}, SetupCapabilities...)
	owner := ",uid=" + strconv.Itoa(s.UID) + ",gid=" + strconv.Itoa(s.GID)
	host.Tmpfs = map[string]string{
		TmpPath:    "size=" + strconv.Itoa(s.TmpfsMB) + "m,mode=1777,nosuid,nodev",
		OutputPath: "size=" + strconv.Itoa(x.OutputMB) + "m,mode=0755,nosuid,nodev" + owner,
		WorkPath:   "size=" + strconv.Itoa(x.WorkMB) + "m,mode=0700,nosuid,nodev" + owner,
	}
	host.Mounts = []mount.Mount{{
		Type:        mount.TypeBind,
		Source:      s.WorkspaceDir,
		Target:      protocol.WorkspacePath,
		ReadOnly:    true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}}
	if s.TurnDir != "" {
		// A network session's broker socket, as a network run's: the
		// broker refuses everything until the host binds an exec's grant.
		host.Mounts = append(host.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      s.TurnDir,
			Target:      protocol.BrokerDir,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
}

// TmpfsOptions is the /tmp tmpfs option string for a size in MiB. noexec is
// defence in depth only: the workspace stays executable by design.
func TmpfsOptions(sizeMB int) string {
	return "size=" + strconv.Itoa(sizeMB) + "m,mode=1777,nosuid,nodev,noexec"
}
