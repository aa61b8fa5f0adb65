// Package sessionwire is the contract between the host and a session's
// container (DESIGN.md section 18): framed requests the host writes on the
// supervisor's stdin (the attach stream) and framed events the supervisor
// writes on its stdout. It extends the framing of package runs/wire (one
// type byte, a uint32 big-endian payload length, the payload) with its own
// frame types, and imports only the standard library and runs/wire: the
// host and the static in-container binary both carry it.
//
// Guarantee: a Request that a RequestDecoder returns passed Validate, and a
// put's data that it yields is exactly the announced size in DataChunk
// pieces; every payload's size is checked against its type's bound before
// it is allocated; JSON is exactly one object of known fields. Every
// refusal wraps ErrProtocol (framing) or ErrInvalidRequest (a request's
// content), and no error quotes what the stream sent.
package sessionwire

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// Type is a frame's first byte. The values do not overlap runs/wire's, so
// a stream of the wrong kind is refused at its first frame.
type Type byte

// Frame types. Host -> container: FrameRequest, then for a put exactly
// Put.Size bytes of FramePutData. Container -> host: the others.
const (
	// FrameRequest carries one Request (JSON, at most MaxRequestBytes).
	FrameRequest Type = 16
	// FramePutData carries a put's data, in frames of DataChunk bytes
	// but the last; nothing comes between a put request and its last
	// data frame.
	FramePutData Type = 17
	// FrameEvent carries one Event (JSON, at most MaxEventBytes).
	FrameEvent Type = 32
	// FrameStdout and FrameStderr carry an exec's output, FrameFileData
	// a get's or a get-dir's bytes: an id (see taggedPayload) then 1 to
	// MaxChunk bytes (MaxFileChunk for file data).
	FrameStdout   Type = 33
	FrameStderr   Type = 34
	FrameFileData Type = 35
)

func (t Type) String() string {
	switch t {
	case FrameRequest:
		return "request"
	case FramePutData:
		return "put data"
	case FrameEvent:
		return "event"
	case FrameStdout:
		return "stdout"
	case FrameStderr:
		return "stderr"
	case FrameFileData:
		return "file data"
	}
	return fmt.Sprintf("unknown(%d)", byte(t))
}

// Bounds of the wire. Each is checked before anything of its size is
// allocated.
const (
	// HeaderBytes is a frame's header (type byte and length).
	HeaderBytes = wire.HeaderBytes
	// MaxRequestBytes bounds a request's JSON: stdin, env and args fit
	// with their JSON escaping.
	MaxRequestBytes = 1 << 20
	// MaxEventBytes bounds an event's JSON (a list batch is the largest).
	MaxEventBytes = 1 << 20
	// DataChunk is the size of every put data frame but a put's last.
	DataChunk = 256 << 10
	// MaxChunk bounds the data of one output frame, MaxFileChunk of one
	// file data frame (a get's or a get-dir's: fewer, larger frames for
	// a transfer, each bounded before it is allocated).
	MaxChunk     = 32 << 10
	MaxFileChunk = 256 << 10
	// MaxIDBytes bounds a request id: 1 to 64 of [A-Za-z0-9._-].
	MaxIDBytes = 64
	// MaxStdinBytes bounds an exec's stdin.
	MaxStdinBytes = 256 << 10
	// MaxArgs bounds an exec's args, MaxArgBytes their bytes together
	// (the command or executable included).
	MaxArgs     = 4096
	MaxArgBytes = 256 << 10
	// MaxEnv bounds an exec's variables, MaxEnvBytes names and values
	// together, MaxEnvNameBytes one name.
	MaxEnv          = 128
	MaxEnvBytes     = 64 << 10
	MaxEnvNameBytes = 128
	// MaxTimeoutSeconds bounds an exec's timeout (a run's bound);
	// DefaultTimeoutSeconds is used when the request gives 0.
	MaxTimeoutSeconds     = 3600
	DefaultTimeoutSeconds = 120
	// MaxOutputBytes bounds what an exec may be allowed per stream
	// (Exec.MaxOutputBytes, which the host sets, is at most this).
	MaxOutputBytes = 16 << 20
	// MaxPutBytes bounds a put's file, MaxGetBytes a get's: a file a
	// coding agent moves is source, a wheel or a small data set.
	MaxPutBytes = 64 << 20
	MaxGetBytes = 64 << 20
	// MaxTarBytes bounds a get-dir's tar stream, headers included.
	MaxTarBytes = 256 << 20
	// MaxListEntries bounds a list; the entries come in batches of at
	// most MaxListBatch (a batch stays under MaxEventBytes whatever the
	// names' JSON escaping).
	MaxListEntries = 10000
	MaxListBatch   = 256
	// MaxPathBytes bounds a path (PATH_MAX), MaxNameBytes a component.
	MaxPathBytes = 4096
	MaxNameBytes = 255
	// MaxErrorBytes bounds an error event's message (printable ASCII).
	MaxErrorBytes = 256
)

// Operations of a Request.
const (
	OpExec   = "exec"
	OpSignal = "signal"
	OpPut    = "put"
	OpGet    = "get"
	OpList   = "list"
	OpGetDir = "getdir"
)

// Request is one thing the host asks of the supervisor. ID names it in
// every event it causes; Op says which one of the op fields is set (the
// others must be absent).
type Request struct {
	ID     string  `json:"id"`
	Op     string  `json:"op"`
	Exec   *Exec   `json:"exec,omitempty"`
	Signal *Signal `json:"signal,omitempty"`
	// File is the path of a put, get, list or get-dir; Put adds the
	// size and mode of a put.
	File *File `json:"file,omitempty"`
}

// Exec runs one command: exactly one of Command (through /bin/sh -c) or
// Executable (looked up in PATH) with Args.
type Exec struct {
	Command    string   `json:"command,omitempty"`
	Executable string   `json:"executable,omitempty"`
	Args       []string `json:"args,omitempty"`
	// Cwd is a session path (see ValidPath), default the work directory.
	Cwd string `json:"cwd,omitempty"`
	// Env adds variables that ValidEnvName accepts to the supervisor's
	// fixed environment.
	Env map[string]string `json:"env,omitempty"`
	// Stdin is the whole of the command's standard input (then EOF).
	Stdin []byte `json:"stdin,omitempty"`
	// TimeoutSeconds (0: DefaultTimeoutSeconds) kills the exec's process
	// group when it passes.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// Root runs the command as root with exactly what a run's setup
	// command holds; otherwise it runs as the session's guest with no
	// capability.
	Root bool `json:"root,omitempty"`
	// MaxOutputBytes bounds stdout and stderr each; the host sets it
	// (1..MaxOutputBytes). Output past it is read and dropped, and the
	// result says so.
	MaxOutputBytes int `json:"maxOutputBytes"`
	// Proxy points the exec's proxy variables at the egress bridge (a
	// network exec the host granted, network.go).
	Proxy bool `json:"proxy,omitempty"`
	// Placeholders are a granted network exec's credentials' variables
	// and the placeholders its broker minted for this exec only, and
	// RunCA the certificate (PEM) of the CA that exec's grant intercepts
	// with (the broker's bind answer, network.go): the supervisor gives
	// the exec both variables and a CA bundle of the system roots and
	// RunCA. Only with Proxy; RunCA exactly when Placeholders. Never
	// logged.
	Placeholders map[string]string `json:"placeholders,omitempty"`
	RunCA        string            `json:"runCa,omitempty"`
}

// Signal sends Name to the process group of the running exec Target.
type Signal struct {
	Target string `json:"target"`
	Name   string `json:"name"`
}

// Signal names a Signal request may carry. SignalKill is the cancel.
const (
	SignalInt  = "INT"
	SignalTerm = "TERM"
	SignalKill = "KILL"
	SignalHup  = "HUP"
	SignalQuit = "QUIT"
	SignalUsr1 = "USR1"
	SignalUsr2 = "USR2"
)

// ValidSignal reports whether name is one of the signal names above.
func ValidSignal(name string) bool {
	switch name {
	case SignalInt, SignalTerm, SignalKill, SignalHup, SignalQuit, SignalUsr1, SignalUsr2:
		return true
	}
	return false
}

// File names the file of a put, get, list or get-dir. Size and Mode are
// a put's only: Size bytes of FramePutData follow the request; Mode is
// the permission bits (0 means 0644; at most 0777, no setuid, setgid or
// sticky bit).
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size,omitempty"`
	Mode uint32 `json:"mode,omitempty"`
}

// ErrInvalidRequest is the category of every refused request content.
var ErrInvalidRequest = errors.New("invalid session request")

func invalid(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidRequest, msg) }

// ValidID accepts 1 to MaxIDBytes of ASCII letters, digits, '.', '_', '-'.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Validate refuses a request whose op is unknown, whose fields do not
// match its op, or whose content leaves the bounds.
func (r Request) Validate() error {
	if !ValidID(r.ID) {
		return invalid("id is not 1 to 64 of [A-Za-z0-9._-]")
	}
	set := 0
	for _, b := range []bool{r.Exec != nil, r.Signal != nil, r.File != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return invalid("exactly one of exec, signal and file must be set")
	}
	switch r.Op {
	case OpExec:
		if r.Exec == nil {
			return invalid("exec without its exec object")
		}
		return r.Exec.Validate()
	case OpSignal:
		if r.Signal == nil {
			return invalid("signal without its signal object")
		}
		if !ValidID(r.Signal.Target) {
			return invalid("signal target is not a request id")
		}
		if !ValidSignal(r.Signal.Name) {
			return invalid("unknown signal name")
		}
		return nil
	case OpPut, OpGet, OpList, OpGetDir:
		if r.File == nil {
			return invalid(r.Op + " without its file object")
		}
		if err := ValidPath(r.File.Path); err != nil {
			return invalid("path: " + err.Error())
		}
		if r.Op != OpPut {
			if r.File.Size != 0 || r.File.Mode != 0 {
				return invalid("size and mode are a put's only")
			}
			return nil
		}
		if r.File.Size < 0 || r.File.Size > MaxPutBytes {
			return invalid(fmt.Sprintf("put size outside 0..%d", MaxPutBytes))
		}
		if r.File.Mode > 0o777 {
			return invalid("put mode has bits beyond 0777")
		}
		return nil
	}
	return invalid("unknown op")
}

// Validate refuses an exec that names both modes or neither, text that is
// not UTF-8 or carries NUL, a variable ValidEnvName refuses, a cwd
// ValidPath refuses, or anything past its bound.
func (e Exec) Validate() error {
	if err := e.validateNetwork(); err != nil {
		return err
	}
	hasCmd, hasExe := e.Command != "", e.Executable != ""
	switch {
	case hasCmd && hasExe:
		return invalid("both command and executable are set")
	case !hasCmd && !hasExe:
		return invalid("neither command nor executable is set")
	case hasCmd && len(e.Args) > 0:
		return invalid("args go with executable, not command")
	case len(e.Args) > MaxArgs:
		return invalid(fmt.Sprintf("more than %d args", MaxArgs))
	}
	n := len(e.Command) + len(e.Executable)
	for _, s := range append([]string{e.Command, e.Executable}, e.Args...) {
		if !plain(s) {
			return invalid("command, executable or an arg is not UTF-8 without NUL")
		}
		n += len(s)
	}
	if n > MaxArgBytes {
		return invalid(fmt.Sprintf("command and args over %d bytes", MaxArgBytes))
	}
	if e.Cwd != "" {
		if err := ValidPath(e.Cwd); err != nil {
			return invalid("cwd: " + err.Error())
		}
	}
	if len(e.Env) > MaxEnv {
		return invalid(fmt.Sprintf("more than %d env variables", MaxEnv))
	}
	n = 0
	for k, v := range e.Env {
		if err := ValidEnvName(k); err != nil {
			return invalid("env: " + err.Error())
		}
		if !plain(v) {
			return invalid("env: a value is not UTF-8 without NUL")
		}
		n += len(k) + len(v)
	}
	if n > MaxEnvBytes {
		return invalid(fmt.Sprintf("env over %d bytes", MaxEnvBytes))
	}
	if len(e.Stdin) > MaxStdinBytes {
		return invalid(fmt.Sprintf("stdin over %d bytes", MaxStdinBytes))
	}
	if e.TimeoutSeconds < 0 || e.TimeoutSeconds > MaxTimeoutSeconds {
		return invalid(fmt.Sprintf("timeoutSeconds outside 0..%d", MaxTimeoutSeconds))
	}
	if e.MaxOutputBytes <= 0 || e.MaxOutputBytes > MaxOutputBytes {
		return invalid(fmt.Sprintf("maxOutputBytes outside 1..%d", MaxOutputBytes))
	}
	return nil
}

// Timeout returns the exec's timeout in seconds, the default for 0.
func (e Exec) Timeout() int {
	if e.TimeoutSeconds == 0 {
		return DefaultTimeoutSeconds
	}
	return e.TimeoutSeconds
}

func plain(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// deniedEnv are the names a client may not set: those the supervisor sets
// itself (the exec's identity, search path and, for a network exec, the
// egress route and the credentialed hosts' git configuration) and those
// that change how the shell or the dynamic loader start a program.
var deniedEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "PWD": true, "OLDPWD": true,
	"IFS": true, "ENV": true, "BASH_ENV": true, "CDPATH": true, "GLOBIGNORE": true, "SHELLOPTS": true,
	"BASHOPTS": true, "PS4": true, "PROMPT_COMMAND": true, "LANG": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true, "FTP_PROXY": true,
	"http_proxy": true, "https_proxy": true, "all_proxy": true, "no_proxy": true, "ftp_proxy": true,
	"GCONV_PATH": true, "HOSTALIASES": true, "LOCALDOMAIN": true, "RES_OPTIONS": true,
	"NLSPATH": true,
}

// deniedEnvPrefixes: the dynamic loader's (LD_), bash's exported
// functions, git's configuration from the environment (the credentialed
// hosts' rewrite uses it) and the family's own.
var deniedEnvPrefixes = []string{"LD_", "BASH_FUNC_", "GIT_CONFIG", "SANDBOX_"}

// ValidEnvName is the rule for a variable a client sets: a name of ASCII
// letters, digits and '_', not starting with a digit, at most
// MaxEnvNameBytes, that is not in the deny list (PATH, HOME, USER, LOGNAME,
// SHELL, PWD, IFS, ENV, BASH_ENV, LANG, the proxy variables and the
// loader's resolver knobs: what the supervisor sets or what changes how a
// program is started) and does not start with LD_, BASH_FUNC_, GIT_CONFIG
// or SANDBOX_.
func ValidEnvName(name string) error {
	if name == "" || len(name) > MaxEnvNameBytes {
		return fmt.Errorf("a name is empty or over %d bytes", MaxEnvNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return errors.New("a name is not letters, digits and _ (not starting with a digit)")
		}
	}
	if deniedEnv[name] {
		return errors.New("a name the supervisor sets or that changes how programs start")
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return errors.New("a name with a denied prefix")
		}
	}
	return nil
}

// Session path roots: a relative path is under the work directory; an
// absolute one must be under RootOutput or RootTmp.
const (
	RootOutput = "/output"
	RootTmp    = "/tmp"
)

// ValidPath accepts a session path: "." (the work directory itself), a
// clean relative path, or a clean absolute path under /output or /tmp (or
// either root itself); no "." or ".." component, no NUL, valid UTF-8, at
// most MaxPathBytes with components of at most MaxNameBytes. The
// supervisor resolves it beneath its root with no symlink followed
// (SplitPath).
func ValidPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case p == ".":
		return nil
	case len(p) > MaxPathBytes:
		return fmt.Errorf("path longer than %d bytes", MaxPathBytes)
	case !plain(p):
		return errors.New("path is not UTF-8 without NUL")
	case path.Clean(p) != p:
		return errors.New("path is not clean")
	}
	rel := p
	if strings.HasPrefix(p, "/") {
		root, rest, ok := cutRoot(p)
		if !ok {
			return errors.New("an absolute path outside /output and /tmp")
		}
		if rest == "." {
			return nil
		}
		_ = root
		rel = rest
	}
	for _, c := range strings.Split(rel, "/") {
		switch {
		case c == "." || c == "..":
			return errors.New("path has a . or .. component")
		case len(c) > MaxNameBytes:
			return fmt.Errorf("path component longer than %d bytes", MaxNameBytes)
		}
	}
	return nil
}

// Roots of SplitPath.
const (
	RootWork = "" // the work directory
)

// SplitPath returns the root a valid session path is under (RootWork,
// RootOutput or RootTmp) and the path relative to it ("." for the root).
func SplitPath(p string) (root, rel string, err error) {
	if err := ValidPath(p); err != nil {
		return "", "", err
	}
	if !strings.HasPrefix(p, "/") {
		return RootWork, p, nil
	}
	root, rel, _ = cutRoot(p)
	return root, rel, nil
}

func cutRoot(p string) (root, rel string, ok bool) {
	for _, r := range []string{RootOutput, RootTmp} {
		if p == r {
			return r, ".", true
		}
		if rest, found := strings.CutPrefix(p, r+"/"); found && rest != "" {
			return r, rest, true
		}
	}
	return "", "", false
}
