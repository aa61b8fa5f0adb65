// Package config loads and validates /etc/roundtable-sandbox/sandbox.yaml.
// Guarantee: a Config returned by Load has passed Validate, unknown keys are
// refused, and every refusal names the key or path it is about. Checks that
// need the running process and the filesystem live in CheckHost.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // validate timeZone the same way on every host and in the worker
	"unicode/utf8"

	"github.com/spf13/viper"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// ErrInvalid is the category of every refused configuration.
var ErrInvalid = errors.New("invalid configuration")

// EnvPrefix prefixes environment overrides: model.url -> SANDBOX_MODEL_URL.
const EnvPrefix = "SANDBOX"

// MaxToolBudget is the worker's bound on the JSON of all model-facing tool
// specs (DESIGN.md section 6), and BuiltinToolReserve what the worker's own
// tools (invalid_tool, memory_set/get/remove) take of it.
const (
	MaxToolBudget      = 32 << 10
	BuiltinToolReserve = 2 << 10
)

// Config is the whole configuration.
type Config struct {
	Installation        string     `mapstructure:"installation"`
	Image               string     `mapstructure:"image"`
	ImageArchive        string     `mapstructure:"imageArchive"`
	Runtime             string     `mapstructure:"runtime"`
	DockerHost          string     `mapstructure:"dockerHost"`
	DockerDataRoot      string     `mapstructure:"dockerDataRoot"`
	UID                 int        `mapstructure:"uid"`
	GID                 int        `mapstructure:"gid"`
	RunRoot             string     `mapstructure:"runRoot"`
	WorkspaceRoot       string     `mapstructure:"workspaceRoot"`
	PolicyDir           string     `mapstructure:"policyDir"`
	StateFile           string     `mapstructure:"stateFile"`
	LockFile            string     `mapstructure:"lockFile"`
	TurnDeadlineSeconds int        `mapstructure:"turnDeadlineSeconds"`
	LogLevel            string     `mapstructure:"logLevel"`
	Limits              Limits     `mapstructure:"limits"`
	Model               Model      `mapstructure:"model"`
	Prompt              string     `mapstructure:"prompt"`
	TimeZone            string     `mapstructure:"timeZone"`
	Credentials         Creds      `mapstructure:"credentials"`
	Tools               []Tool     `mapstructure:"tools"`
	MCP                 []MCP      `mapstructure:"mcp"`
	API                 API        `mapstructure:"api"`
	Queue               Queue      `mapstructure:"queue"`
	InitialChannels     []string   `mapstructure:"initialChannels"`
	Broker              Broker     `mapstructure:"broker"`
	Reaper              Reaper     `mapstructure:"reaper"`
	Guests              Guests     `mapstructure:"guests"`
	Egress              Egress     `mapstructure:"egress"`
	Standby             Standby    `mapstructure:"standby"`
	Runs                Runs       `mapstructure:"runs"`
	Sessions            Sessions   `mapstructure:"sessions"`
	Delegation          Delegation `mapstructure:"delegation"`
	Prechecks           Prechecks  `mapstructure:"prechecks"`
	Rich                Rich       `mapstructure:"rich"`
	Profiles            []Profile  `mapstructure:"profiles"`
	Fleet               Fleet      `mapstructure:"fleet"`
}

// Runs configures code execution (DESIGN.md section 12, package runs): the
// toolbox image, the projects clients may name, and every bound of a run.
type Runs struct {
	Enabled  bool      `mapstructure:"enabled"`
	Image    string    `mapstructure:"image"`
	Projects []Project `mapstructure:"projects"`
	MemoryMB int       `mapstructure:"memoryMb"`
	CPUs     float64   `mapstructure:"cpus"`
	Pids     int64     `mapstructure:"pids"`
	// TmpfsMB sizes /tmp, OutputMB /output (both tmpfs, both counted
	// against MemoryMB).
	TmpfsMB  int `mapstructure:"tmpfsMb"`
	OutputMB int `mapstructure:"outputMb"`
	// MaxOutputBytes bounds stdout and stderr each.
	MaxOutputBytes         int   `mapstructure:"maxOutputBytes"`
	MaxArtifacts           int   `mapstructure:"maxArtifacts"`
	MaxArtifactBytes       int64 `mapstructure:"maxArtifactBytes"`
	MaxArtifactTotalBytes  int64 `mapstructure:"maxArtifactTotalBytes"`
	ApprovalTimeoutSeconds int   `mapstructure:"approvalTimeoutSeconds"`
	// RetainSeconds, MaxRetained and MaxRetainedBytes bound how long, how
	// many and how many bytes (output, events, artifacts) of finished runs
	// stay readable through GET /v1/runs/{id}; the oldest go first.
	RetainSeconds    int   `mapstructure:"retainSeconds"`
	MaxRetained      int   `mapstructure:"maxRetained"`
	MaxRetainedBytes int64 `mapstructure:"maxRetainedBytes"`
	// ResultHoldSeconds is how long a finished run stays readable whatever
	// maxRetained and maxRetainedBytes say (and any run while a client is
	// reading it): runs held over those bounds take the room of new runs,
	// which POST /v1/runs then refuses (429) rather than forget a result.
	ResultHoldSeconds int `mapstructure:"resultHoldSeconds"`
	// MemoryBudgetBytes is the host's memory for runs: every allowed
	// combination of the keys above fits it (validateRunsMemory). An
	// operator who raises the unit's MemoryMax may raise it.
	MemoryBudgetBytes int64 `mapstructure:"memoryBudgetBytes"`
	// MaxInFlight and MaxInFlightPerClient bound unfinished runs (awaiting
	// approval, queued or running) in all and of one client uid; beyond
	// them POST /v1/runs answers 429 at once.
	MaxInFlight          int `mapstructure:"maxInFlight"`
	MaxInFlightPerClient int `mapstructure:"maxInFlightPerClient"`
	// Standby keeps run standbys for declared shapes (runstandby.go).
	Standby RunStandby `mapstructure:"standby"`
}

// The host's memory for code runs: every allowed combination of the runs
// keys fits runs.memoryBudgetBytes (RunsMemoryBudget by default;
// validateRuns), so that no client can take the host past its unit's
// MemoryMax=1G (units/sandbox-host.service) through the runs API. Half of
// it is left to turns, rich channels, delegations and the Go runtime
// (GOMEMLIMIT=900MiB). An operator who raises MemoryMax may raise the
// budget, up to MaxRunsMemoryBudget.
const (
	RunsMemoryBudget    = 512 << 20
	MinRunsMemoryBudget = 64 << 20
	MaxRunsMemoryBudget = 256 << 30
	// RunHistoryBytes bounds one run's event history (package runs'
	// RegistryLimits.MaxHistoryBytes).
	RunHistoryBytes = 4 << 20
	// RunBufferBytes is what a running run holds besides its record: the
	// decoder's reader and one frame of at most 1 MiB.
	RunBufferBytes = 2 << 20
)

// RunRetainedBytes is the most one finished run holds: stdout and stderr
// (runs.maxOutputBytes each), its event history and its artifacts
// (runs.maxArtifactTotalBytes).
func (r Runs) RunRetainedBytes() int64 {
	return 2*int64(r.MaxOutputBytes) + RunHistoryBytes + r.MaxArtifactTotalBytes
}

// RunsWorstCaseBytes is the most all runs together hold: the retained
// bound, and runs.maxInFlight runs holding their record and buffers.
func (r Runs) RunsWorstCaseBytes() int64 {
	return r.MaxRetainedBytes + int64(r.MaxInFlight)*(r.RunRetainedBytes()+RunBufferBytes)
}

// Project is one operator-declared directory a run may see read-only at
// /workspace; clients name it, never its path.
type Project struct {
	Name string `mapstructure:"name"`
	Path string `mapstructure:"path"`
}

// Bounds of the runs keys.
const (
	MaxRunArtifacts          = 256
	MaxRunArtifactBytes      = 64 << 20
	MaxRunArtifactTotalBytes = 256 << 20
	MaxRunOutputBytes        = 16 << 20
	MaxRunsInFlight          = 256
	MinRunOutputBytes        = 1 << 10
	MaxRunProjects           = 256
)

var projectNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ProjectPath is the host directory of the named project, and whether it is declared.
func (r Runs) ProjectPath(name string) (string, bool) {
	for _, p := range r.Projects {
		if p.Name == name {
			return p.Path, true
		}
	}
	return "", false
}

// Standby configures the warm path: one started container per sandbox
// channel waiting for that channel's next turn (package standby).
type Standby struct {
	Enabled       bool `mapstructure:"enabled"`
	MaxAgeSeconds int  `mapstructure:"maxAgeSeconds"`
	// Max caps standbys across all channels; channels beyond it take the
	// cold path.
	Max int `mapstructure:"max"`
}

// Bounds of the standby keys. A standby's broker service starts with the
// standby and lives until its turn ends: at most MaxStandbyAgeSeconds plus
// the longest turn deadline (600 s), under the broker unit's
// RuntimeMaxSec=1260s backstop.
const (
	MinStandbyAgeSeconds = 10
	MaxStandbyAgeSeconds = 600
	MaxStandbys          = 4096
)

// StandbyMaxAge is standby.maxAgeSeconds as a duration.
func (c *Config) StandbyMaxAge() time.Duration {
	return time.Duration(c.Standby.MaxAgeSeconds) * time.Second
}

// Egress widens the fetch tools' vetted dialer: Allow lists exact private
// "address:port" destinations (a LAN mirror, say). Nothing else widens it.
type Egress struct {
	Allow []string `mapstructure:"allow"`
	// Credentials are the credentialed destinations runs may ask for
	// (egresscredentials.go).
	Credentials []EgressCredential `mapstructure:"credentials"`
	// TestRootCAFile is a test-only root CA for loopback IP literal
	// credentialed destinations ("" in every real configuration).
	TestRootCAFile string `mapstructure:"testRootCAFile"`
}

// Guests is the reserved id range the containers run in: each channel's
// guest gets its own uid (and a gid of the same number) from
// [UIDBase, UIDBase+UIDCount), recorded in the state file.
type Guests struct {
	UIDBase  int `mapstructure:"uidBase"`
	UIDCount int `mapstructure:"uidCount"`
}

// Bounds of the guest id range. The floor keeps it above every 16-bit id
// (system users, regular users, nobody, DynamicUser=); the ceiling keeps it
// below 2^31-1, which some tools treat as a signed -1.
const (
	MinGuestUID      = 65536
	MaxGuestUID      = 2147483646
	MaxGuestUIDCount = 1 << 24
)

// IsGuest reports whether id lies in the guest range.
func (g Guests) IsGuest(id int) bool {
	return id >= g.UIDBase && id-g.UIDBase < g.UIDCount
}

// Limits are the container's resources.
type Limits struct {
	MemoryMB int     `mapstructure:"memoryMb"`
	CPUs     float64 `mapstructure:"cpus"`
	Pids     int64   `mapstructure:"pids"`
	TmpfsMB  int     `mapstructure:"tmpfsMb"`
}

// Model is the fixed upstream of the broker's /model route.
type Model struct {
	URL       string `mapstructure:"url"`
	Name      string `mapstructure:"name"`
	MaxTokens int    `mapstructure:"maxTokens"`
	// AllowInsecureLoopbackHTTP permits http://localhost-style URLs; tests only.
	AllowInsecureLoopbackHTTP bool `mapstructure:"allowInsecureLoopbackHTTP"`
}

// Creds selects the credential NAME a turn's policy carries. Rules are a list,
// never a map: viper lowercases map keys, and channel keys are case-sensitive.
type Creds struct {
	Default string     `mapstructure:"default"`
	Rules   []CredRule `mapstructure:"rules"`
}

// CredRule matches exactly one of channel, principal or speaker.
type CredRule struct {
	Channel    string `mapstructure:"channel"`
	Principal  string `mapstructure:"principal"`
	Speaker    string `mapstructure:"speaker"`
	Credential string `mapstructure:"credential"`
}

// Tool is one allow-listed host tool. Parameters is a JSON Schema object
// written as a JSON string, because viper lowercases YAML map keys.
type Tool struct {
	Name                      string   `mapstructure:"name"`
	Description               string   `mapstructure:"description"`
	Parameters                string   `mapstructure:"parameters"`
	Kind                      string   `mapstructure:"kind"`
	Builtin                   string   `mapstructure:"builtin"`
	Argv                      []string `mapstructure:"argv"`
	URL                       string   `mapstructure:"url"`
	TimeoutSeconds            int      `mapstructure:"timeoutSeconds"`
	Credential                string   `mapstructure:"credential"`
	AllowInsecureLoopbackHTTP bool     `mapstructure:"allowInsecureLoopbackHTTP"`
	// Kind fetch: body and answer-text bounds (0: the defaults).
	MaxBytes     int64 `mapstructure:"maxBytes"`
	MaxTextBytes int   `mapstructure:"maxTextBytes"`
}

// MCP is one allow-listed MCP server.
type MCP struct {
	Name                      string    `mapstructure:"name"`
	URL                       string    `mapstructure:"url"`
	Credential                string    `mapstructure:"credential"`
	Session                   string    `mapstructure:"session"`
	Discover                  bool      `mapstructure:"discover"`
	AllowInsecureLoopbackHTTP bool      `mapstructure:"allowInsecureLoopbackHTTP"`
	Tools                     []MCPTool `mapstructure:"tools"`
}

// MCPTool is one declared tool of an MCP server.
type MCPTool struct {
	Name        string `mapstructure:"name"`
	Description string `mapstructure:"description"`
	Parameters  string `mapstructure:"parameters"`
}

// API decides who may use the host socket.
type API struct {
	Clients Access `mapstructure:"clients"`
	Admins  Access `mapstructure:"admins"`
}

// Access lists uids and group names.
type Access struct {
	UIDs   []int    `mapstructure:"uids"`
	Groups []string `mapstructure:"groups"`
}

// Queue bounds the per-channel queues and admission across them.
type Queue struct {
	Depth int `mapstructure:"depth"`
	// GlobalConcurrency caps what runs at once across channels; 0 = derived
	// from the machine (Concurrency).
	GlobalConcurrency int `mapstructure:"globalConcurrency"`
	// StartConcurrency bounds how many of those start at once (a cold
	// turn's broker units and container, a standby's preparation); 0 =
	// derived from the machine (Starts).
	StartConcurrency int `mapstructure:"startConcurrency"`
	// MaxWaitSeconds bounds a turn's wait for its slot; past it the turn
	// is refused as busy (429) without running.
	MaxWaitSeconds int `mapstructure:"maxWaitSeconds"`
}

// Broker carries the broker bounds written into every policy.
type Broker struct {
	MaxCalls          int   `mapstructure:"maxCalls"`
	MaxRequestBytes   int64 `mapstructure:"maxRequestBytes"`
	MaxResponseBytes  int64 `mapstructure:"maxResponseBytes"`
	UpstreamTimeoutMs int   `mapstructure:"upstreamTimeoutMs"`
	MaxConnections    int   `mapstructure:"maxConnections"`
	HeaderTimeoutMs   int   `mapstructure:"headerTimeoutMs"`
	RequestTimeoutMs  int   `mapstructure:"requestTimeoutMs"`
}

// Reaper configures orphan removal.
type Reaper struct {
	GraceSeconds int `mapstructure:"graceSeconds"`
}

// PolicyLimits converts the broker bounds for a policy file.
func (b Broker) PolicyLimits() policy.Limits {
	return policy.Limits{
		MaxCalls: b.MaxCalls, MaxRequestBytes: b.MaxRequestBytes, MaxResponseBytes: b.MaxResponseBytes,
		UpstreamTimeoutMs: b.UpstreamTimeoutMs, MaxConnections: b.MaxConnections,
		HeaderTimeoutMs: b.HeaderTimeoutMs, RequestTimeoutMs: b.RequestTimeoutMs,
	}
}

// TurnDeadline is the turn deadline as a duration.
func (c *Config) TurnDeadline() time.Duration {
	return time.Duration(c.TurnDeadlineSeconds) * time.Second
}

// MaxConfigBytes bounds the config file.
const MaxConfigBytes = 1 << 20

// Load reads path through one viper instance with SANDBOX_* environment
// overrides, refuses unknown keys and validates the result.
func Load(path string) (*Config, error) {
	v := viper.New()
	for k, val := range defaults() {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.SetConfigType("yaml")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes: %w", path, MaxConfigBytes, ErrInvalid)
	}
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("config %s: %v: %w", path, err, ErrInvalid)
	}
	// Unknown keys first, from the file as written (viper lowercases them).
	errs, written := scanKeys(data)
	if len(errs) > 0 {
		return nil, fmt.Errorf("config %s: %w", path, errors.Join(errs...))
	}
	var c Config
	// viper's weak typing stays on: environment overrides arrive as strings.
	if err := v.UnmarshalExact(&c); err != nil {
		return nil, fmt.Errorf("config %s: %s: %w", path, asWritten(decodeMessage(err), written), ErrInvalid)
	}
	c.applyElementDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

var quotedKeyRe = regexp.MustCompile(`'([A-Za-z0-9_.\[\]]+)'`)

// asWritten replaces the decoder's 'key.path' by the path as written in the
// file and its line, where the file has it (an environment override has no
// line: it keeps the decoder's spelling).
func asWritten(msg string, written map[string]writtenKey) string {
	return quotedKeyRe.ReplaceAllStringFunc(msg, func(m string) string {
		if w, ok := written[strings.ToLower(m[1:len(m)-1])]; ok {
			return fmt.Sprintf("%s (line %d)", w.path, w.line)
		}
		return m
	})
}

var invalidKeysRe = regexp.MustCompile(`'([^']*)' has invalid keys: `)

// decodeMessage rewrites mapstructure's "'limits' has invalid keys: x" as
// "limits: unknown key x" (viper shows keys lowercased).
func decodeMessage(err error) string {
	msg := strings.TrimSpace(strings.TrimPrefix(err.Error(), "decoding failed due to the following error(s):"))
	msg = invalidKeysRe.ReplaceAllStringFunc(msg, func(m string) string {
		sec := invalidKeysRe.FindStringSubmatch(m)[1]
		if sec == "" {
			return "unknown key (keys shown lowercased): "
		}
		return sec + ": unknown key (keys shown lowercased): "
	})
	return strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ; ")), " ")
}

// Validate checks every value that needs no filesystem or process state.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", key, fmt.Sprintf(format, a...), ErrInvalid))
	}

	if err := ids.ValidInstallation(c.Installation); err != nil {
		bad("installation", "must match [a-z0-9][a-z0-9-]{0,31}")
	}
	if c.Image == "" || strings.ContainsAny(c.Image, " \t\n") || len(c.Image) > 256 {
		bad("image", "must be a Docker image reference of 1 to 256 characters without spaces")
	}
	if !filepath.IsAbs(c.ImageArchive) {
		bad("imageArchive", "must be an absolute path")
	}
	if c.Runtime != "" && !runtimeRe.MatchString(c.Runtime) {
		bad("runtime", "must be empty or an OCI runtime name matching %s", runtimeRe)
	}
	if c.DockerHost != "" && !strings.HasPrefix(c.DockerHost, "unix:///") {
		bad("dockerHost", "must be empty (DOCKER_HOST or the default socket) or a unix:/// URL")
	}
	if c.UID < 0 {
		bad("uid", "must not be negative")
	}
	if c.GID < 0 {
		bad("gid", "must not be negative")
	}

	paths := []struct{ key, p string }{
		{"runRoot", c.RunRoot}, {"workspaceRoot", c.WorkspaceRoot}, {"policyDir", c.PolicyDir},
		{"stateFile", c.StateFile}, {"lockFile", c.LockFile}, {"dockerDataRoot", c.DockerDataRoot},
	}
	pathsOK := true
	for _, p := range paths {
		if !filepath.IsAbs(p.p) || filepath.Clean(p.p) != p.p || p.p == "/" {
			bad(p.key, "%q must be a clean absolute path other than /", p.p)
			pathsOK = false
		}
	}
	if pathsOK {
		if within(c.RunRoot, c.WorkspaceRoot) || within(c.WorkspaceRoot, c.RunRoot) {
			bad("runRoot", "%s and workspaceRoot %s must not be nested in each other", c.RunRoot, c.WorkspaceRoot)
		}
		for _, root := range []struct{ key, p string }{{"runRoot", c.RunRoot}, {"workspaceRoot", c.WorkspaceRoot}} {
			if within(c.PolicyDir, root.p) || within(root.p, c.PolicyDir) {
				bad("policyDir", "%s must not be nested with %s %s", c.PolicyDir, root.key, root.p)
			}
			if within(c.StateFile, root.p) {
				bad("stateFile", "%s must be outside %s %s", c.StateFile, root.key, root.p)
			}
			if within(c.LockFile, root.p) {
				bad("lockFile", "%s must be outside %s %s", c.LockFile, root.key, root.p)
			}
			if within(root.p, c.DockerDataRoot) || within(c.DockerDataRoot, root.p) {
				bad(root.key, "%s must be outside Docker's data directory %s (dockerDataRoot)", root.p, c.DockerDataRoot)
			}
		}
		if n := BrokerSocketLen(c.RunRoot); n > layout.MaxSocketPath {
			bad("runRoot", "the broker socket path %s/<32 hex>/%s would be %d characters; the limit is %d", c.RunRoot, layout.BrokerSocketName, n, layout.MaxSocketPath)
		}
	}

	if c.TurnDeadlineSeconds < 1 || c.TurnDeadlineSeconds > 600 {
		bad("turnDeadlineSeconds", "must be 1 to 600, got %d", c.TurnDeadlineSeconds)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("logLevel", "must be debug, info, warn or error")
	}
	if c.Limits.MemoryMB < 64 || c.Limits.MemoryMB > 65536 {
		bad("limits.memoryMb", "must be 64 to 65536, got %d", c.Limits.MemoryMB)
	}
	if !(c.Limits.CPUs >= 0.01 && c.Limits.CPUs <= 64) || math.IsNaN(c.Limits.CPUs) {
		bad("limits.cpus", "must be 0.01 to 64, got %v", c.Limits.CPUs)
	}
	if c.Limits.Pids < 8 || c.Limits.Pids > 4096 {
		bad("limits.pids", "must be 8 to 4096, got %d", c.Limits.Pids)
	}
	if c.Limits.TmpfsMB < 1 || c.Limits.TmpfsMB > 4096 || c.Limits.TmpfsMB >= c.Limits.MemoryMB {
		bad("limits.tmpfsMb", "must be 1 to 4096 and below limits.memoryMb (tmpfs counts against memory), got %d", c.Limits.TmpfsMB)
	}

	if err := policy.CheckURL(c.Model.URL, c.Model.AllowInsecureLoopbackHTTP); err != nil {
		if strings.HasPrefix(c.Model.URL, "http://") && !c.Model.AllowInsecureLoopbackHTTP {
			bad("model.url", "must use https (plain http only with model.allowInsecureLoopbackHTTP: true and a loopback host, for tests)")
		} else {
			bad("model.url", "%v", err)
		}
	}
	if c.Model.Name == "" || len(c.Model.Name) > protocol.MaxModelChars || strings.TrimSpace(c.Model.Name) != c.Model.Name {
		bad("model.name", "must be 1 to %d bytes without surrounding spaces", protocol.MaxModelChars)
	}
	if c.Model.MaxTokens < 1 || c.Model.MaxTokens > 1_000_000 {
		bad("model.maxTokens", "must be 1 to 1000000, got %d", c.Model.MaxTokens)
	}
	if !utf8.ValidString(c.Prompt) || utf8.RuneCountInString(c.Prompt) > protocol.MaxPromptChars {
		bad("prompt", "must be valid UTF-8 of at most %d characters", protocol.MaxPromptChars)
	}
	if c.TimeZone == "" || len(c.TimeZone) > protocol.MaxTimeZoneChar {
		bad("timeZone", "must be an IANA time zone name")
	} else if _, err := time.LoadLocation(c.TimeZone); err != nil || c.TimeZone == "Local" {
		bad("timeZone", "%q is not an IANA time zone name", c.TimeZone)
	}

	c.validateCredentials(bad)
	c.validateTools(bad)
	c.validateEgress(bad)
	c.validateEgressCredentials(bad)
	c.validateRuns(bad)
	c.validateSessions(bad)
	c.validateDelegation(bad)
	c.validatePrechecks(bad)
	c.validateRich(bad)
	c.validateFleet(bad)

	for _, a := range []struct {
		key string
		acc Access
	}{{"api.clients", c.API.Clients}, {"api.admins", c.API.Admins}} {
		for i, u := range a.acc.UIDs {
			if u < 0 {
				bad(fmt.Sprintf("%s.uids[%d]", a.key, i), "must not be negative")
			}
		}
		for i, g := range a.acc.Groups {
			if g == "" || strings.ContainsAny(g, " :\n") || len(g) > 64 {
				bad(fmt.Sprintf("%s.groups[%d]", a.key, i), "%q is not a group name", g)
			}
		}
	}
	if c.Queue.Depth < 1 || c.Queue.Depth > 1024 {
		bad("queue.depth", "must be 1 to 1024, got %d", c.Queue.Depth)
	}
	if c.Queue.GlobalConcurrency < 0 || c.Queue.GlobalConcurrency > MaxGlobalConcurrency {
		bad("queue.globalConcurrency", "must be 0 (derived from the machine) to %d, got %d", MaxGlobalConcurrency, c.Queue.GlobalConcurrency)
	}
	if c.Queue.StartConcurrency < 0 || c.Queue.StartConcurrency > MaxGlobalConcurrency {
		bad("queue.startConcurrency", "must be 0 (derived from the machine) to %d, got %d", MaxGlobalConcurrency, c.Queue.StartConcurrency)
	}
	if c.Queue.MaxWaitSeconds < MinQueueWaitSeconds || c.Queue.MaxWaitSeconds > MaxQueueWaitSeconds {
		bad("queue.maxWaitSeconds", "must be %d to %d, got %d", MinQueueWaitSeconds, MaxQueueWaitSeconds, c.Queue.MaxWaitSeconds)
	}
	if s := c.Standby; s.MaxAgeSeconds < MinStandbyAgeSeconds || s.MaxAgeSeconds > MaxStandbyAgeSeconds {
		bad("standby.maxAgeSeconds", "must be %d to %d, got %d", MinStandbyAgeSeconds, MaxStandbyAgeSeconds, s.MaxAgeSeconds)
	}
	if c.Standby.Max < 0 || c.Standby.Max > MaxStandbys {
		bad("standby.max", "must be 0 (no standbys) to %d, got %d", MaxStandbys, c.Standby.Max)
	}
	if len(c.InitialChannels) > 4096 {
		bad("initialChannels", "at most 4096 channels")
	}
	for i, ch := range c.InitialChannels {
		if err := ids.ValidChannel(ch); err != nil {
			bad(fmt.Sprintf("initialChannels[%d]", i), "%v", err)
		}
	}
	b := c.Broker
	for _, r := range []struct {
		key      string
		v        int64
		min, max int64
	}{
		{"broker.maxCalls", int64(b.MaxCalls), 1, 1000},
		{"broker.maxRequestBytes", b.MaxRequestBytes, 1024, 16 << 20},
		{"broker.maxResponseBytes", b.MaxResponseBytes, 1024, 64 << 20},
		{"broker.upstreamTimeoutMs", int64(b.UpstreamTimeoutMs), 100, 600_000},
		{"broker.maxConnections", int64(b.MaxConnections), 1, 1024},
		{"broker.headerTimeoutMs", int64(b.HeaderTimeoutMs), 100, 600_000},
		{"broker.requestTimeoutMs", int64(b.RequestTimeoutMs), 100, 600_000},
	} {
		if r.v < r.min || r.v > r.max {
			bad(r.key, "must be %d to %d, got %d", r.min, r.max, r.v)
		}
	}
	if c.Reaper.GraceSeconds < 0 || c.Reaper.GraceSeconds > 86400 {
		bad("reaper.graceSeconds", "must be 0 to 86400, got %d", c.Reaper.GraceSeconds)
	}
	g := c.Guests
	guestsOK := true
	if g.UIDBase < MinGuestUID || g.UIDBase > MaxGuestUID {
		bad("guests.uidBase", "must be %d to %d, got %d", MinGuestUID, MaxGuestUID, g.UIDBase)
		guestsOK = false
	}
	if g.UIDCount < 1 || g.UIDCount > MaxGuestUIDCount || (guestsOK && g.UIDCount-1 > MaxGuestUID-g.UIDBase) {
		bad("guests.uidCount", "must be 1 to %d with guests.uidBase+uidCount-1 at most %d, got %d", MaxGuestUIDCount, MaxGuestUID, g.UIDCount)
		guestsOK = false
	}
	if guestsOK {
		for _, a := range []struct {
			key  string
			uids []int
		}{{"api.clients", c.API.Clients.UIDs}, {"api.admins", c.API.Admins.UIDs}} {
			for i, u := range a.uids {
				if g.IsGuest(u) {
					bad(fmt.Sprintf("%s.uids[%d]", a.key, i), "%d is a guest uid (guests.uidBase..+uidCount); containers must never reach the API", u)
				}
			}
		}
	}
	return errors.Join(errs...)
}

var runtimeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// BrokerSocketLen is the length of runRoot/<turn id>/broker.sock.
func BrokerSocketLen(runRoot string) int {
	return len(runRoot) + 1 + ids.TurnIDLen + 1 + len(layout.BrokerSocketName)
}

// within reports whether p is root or below it (lexically).
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

func (c *Config) validateCredentials(bad func(key, format string, a ...any)) {
	if !policy.ValidCredentialName(c.Credentials.Default) {
		bad("credentials.default", "must name a credential file (1 to 64 of [A-Za-z0-9._-], not starting with a dot)")
	}
	for i, r := range c.Credentials.Rules {
		key := fmt.Sprintf("credentials.rules[%d]", i)
		set := 0
		for _, v := range []string{r.Channel, r.Principal, r.Speaker} {
			if v != "" {
				set++
			}
		}
		if set != 1 {
			bad(key, "must set exactly one of channel, principal or speaker")
		}
		if r.Channel != "" {
			if err := ids.ValidChannel(r.Channel); err != nil {
				bad(key+".channel", "%v", err)
			}
		}
		for _, f := range []struct{ k, v string }{{"principal", r.Principal}, {"speaker", r.Speaker}} {
			if utf8.RuneCountInString(f.v) > protocol.MaxIDChars || !utf8.ValidString(f.v) {
				bad(key+"."+f.k, "must be valid UTF-8 of at most %d characters", protocol.MaxIDChars)
			}
		}
		if !policy.ValidCredentialName(r.Credential) {
			bad(key+".credential", "must name a credential file")
		}
	}
}

// SelectCredential returns the credential name for a turn: the first rule for
// the channel, else for the principal, else for the speaker, else the default.
func (c *Config) SelectCredential(channel, principal, speaker string) string {
	for _, pick := range []func(CredRule) bool{
		func(r CredRule) bool { return r.Channel != "" && r.Channel == channel },
		func(r CredRule) bool { return r.Principal != "" && r.Principal == principal },
		func(r CredRule) bool { return r.Speaker != "" && r.Speaker == speaker },
	} {
		for _, r := range c.Credentials.Rules {
			if pick(r) {
				return r.Credential
			}
		}
	}
	return c.Credentials.Default
}

func (c *Config) validateTools(bad func(key, format string, a ...any)) {
	if len(c.Tools) > protocol.MaxToolSpecs {
		bad("tools", "at most %d host tools", protocol.MaxToolSpecs)
	}
	names := map[string]bool{}
	var specs []protocol.ToolSpec
	for i, t := range c.Tools {
		key := fmt.Sprintf("tools[%d]", i)
		if !protocol.ValidToolName(t.Name) {
			bad(key+".name", "%q must match %s", t.Name, protocol.ToolNameRule)
		} else if names[t.Name] {
			bad(key+".name", "%q is not unique", t.Name)
		}
		names[t.Name] = true
		checkSpec(key, t.Description, t.Parameters, bad)
		if t.TimeoutSeconds < 0 || t.TimeoutSeconds > 600 {
			bad(key+".timeoutSeconds", "must be 0 (broker default) to 600")
		}
		if t.Credential != "" && !policy.ValidCredentialName(t.Credential) {
			bad(key+".credential", "must name a credential file")
		}
		switch t.Kind {
		case policy.KindBuiltin:
			if t.Builtin != "clock" {
				bad(key+".builtin", "must be clock")
			}
			if len(t.Argv) > 0 || t.URL != "" || t.Credential != "" {
				bad(key, "a builtin tool takes no argv, url or credential")
			}
		case policy.KindExec:
			if len(t.Argv) == 0 || !filepath.IsAbs(t.Argv[0]) {
				bad(key+".argv", "argv[0] must be an absolute path")
			}
			if t.URL != "" || t.Credential != "" {
				bad(key, "an exec tool takes no url or credential")
			}
		case policy.KindHTTP:
			if err := policy.CheckURL(t.URL, t.AllowInsecureLoopbackHTTP); err != nil {
				bad(key+".url", "%v", err)
			}
			if len(t.Argv) > 0 {
				bad(key, "an http tool takes no argv")
			}
		case policy.KindFetch:
			checkFetchTool(key, t, bad)
		default:
			bad(key+".kind", "must be builtin, exec, http or fetch")
		}
		if t.Kind != policy.KindFetch && (t.MaxBytes != 0 || t.MaxTextBytes != 0) {
			bad(key, "maxBytes and maxTextBytes are for fetch tools")
		}
		specs = append(specs, protocol.ToolSpec{Name: protocol.HostFunctionName(t.Name), Description: t.Description, Parameters: json.RawMessage(t.Parameters)})
	}
	if len(c.MCP) > protocol.MaxMCPServers {
		bad("mcp", "at most %d servers", protocol.MaxMCPServers)
	}
	servers := map[string]bool{}
	for i, s := range c.MCP {
		key := fmt.Sprintf("mcp[%d]", i)
		if !protocol.ValidToolName(s.Name) {
			bad(key+".name", "%q must match %s", s.Name, protocol.ToolNameRule)
		} else if servers[s.Name] {
			bad(key+".name", "%q is not unique", s.Name)
		}
		servers[s.Name] = true
		if err := policy.CheckURL(s.URL, s.AllowInsecureLoopbackHTTP); err != nil {
			bad(key+".url", "%v", err)
		}
		if s.Credential != "" && !policy.ValidCredentialName(s.Credential) {
			bad(key+".credential", "must name a credential file")
		}
		if s.Session != policy.SessionAuto && s.Session != policy.SessionStateless {
			bad(key+".session", "must be auto or stateless")
		}
		if s.Discover && s.Credential != "" {
			bad(key+".discover", "the host never reads credentials, so discovery works only for servers without a credential; declare the tools (and compare them with `sandbox-host doctor` run as root)")
		}
		if len(s.Tools) == 0 && !s.Discover {
			bad(key+".tools", "declare at least one tool (or set discover: true)")
		}
		if len(s.Tools) > protocol.MaxToolSpecs {
			bad(key+".tools", "at most %d tools", protocol.MaxToolSpecs)
		}
		tools := map[string]bool{}
		var toolNames []string
		for j, t := range s.Tools {
			tkey := fmt.Sprintf("%s.tools[%d]", key, j)
			if !protocol.ValidMCPToolName(t.Name) {
				bad(tkey+".name", "%q must be %s", t.Name, protocol.MCPToolNameRule)
			} else if tools[t.Name] {
				bad(tkey+".name", "%q is not unique", t.Name)
			}
			tools[t.Name] = true
			toolNames = append(toolNames, t.Name)
			if s.Discover && t.Description == "" && t.Parameters == "" {
				continue // name-only allow-list entry; discovery supplies the rest
			}
			checkSpec(tkey, t.Description, t.Parameters, bad)
			specs = append(specs, protocol.ToolSpec{Name: protocol.MCPFunctionName(i, t.Name), Description: t.Description, Parameters: json.RawMessage(t.Parameters)})
		}
		if a, b, clash := protocol.MCPFunctionNameClash(i, toolNames); clash {
			bad(key+".tools", "%q and %q get the same model-facing function name %q (a hash collision); declare only one of them", a, b, protocol.MCPFunctionName(i, a))
		}
	}
	if n := ToolBudgetBytes(specs); n > MaxToolBudget-BuiltinToolReserve {
		bad("tools", "tool names, descriptions and parameters take %d bytes as the worker counts them; the limit is %d (32 KiB less %d for the worker's own tools)", n, MaxToolBudget-BuiltinToolReserve, BuiltinToolReserve)
	}
}

// ToolBudgetBytes counts specs as the worker does: the JSON of
// [{"type":"function","function":{name,description,parameters}}...].
func ToolBudgetBytes(specs []protocol.ToolSpec) int {
	type fn struct {
		Type     string            `json:"type"`
		Function protocol.ToolSpec `json:"function"`
	}
	list := make([]fn, 0, len(specs))
	for _, s := range specs {
		if !json.Valid(s.Parameters) {
			s.Parameters = json.RawMessage(`{}`)
		}
		list = append(list, fn{"function", s})
	}
	data, _ := json.Marshal(list)
	return len(data)
}

// checkFetchTool checks a fetch tool: no target of its own (the guest names
// the URL), bounds inside safefetch's ranges, a text bound whose JSON answer
// fits the broker's response limit, and parameters that ask for the url.
func checkFetchTool(key string, t Tool, bad func(key, format string, a ...any)) {
	if len(t.Argv) > 0 || t.URL != "" || t.Credential != "" || t.Builtin != "" || t.AllowInsecureLoopbackHTTP {
		bad(key, "a fetch tool takes no argv, url, builtin, credential or allowInsecureLoopbackHTTP")
	}
	if t.TimeoutSeconds > policy.MaxFetchTimeoutMs/1000 {
		bad(key+".timeoutSeconds", "must be 0 (60 s) to %d for a fetch tool", policy.MaxFetchTimeoutMs/1000)
	}
	if t.MaxBytes < 0 || t.MaxBytes > policy.MaxFetchBytes {
		bad(key+".maxBytes", "must be 0 (%d) to %d", policy.DefaultFetchBytes, policy.MaxFetchBytes)
	}
	if t.MaxTextBytes < 0 || t.MaxTextBytes > policy.MaxFetchTextBytes {
		bad(key+".maxTextBytes", "must be 0 (%d) to %d", policy.DefaultFetchTextBytes, policy.MaxFetchTextBytes)
	}
	var schema struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal([]byte(t.Parameters), &schema) != nil || schema.Properties["url"].Type != "string" || !slices.Contains(schema.Required, "url") {
		bad(key+".parameters", "a fetch tool's parameters must require a string property \"url\" (the only input it accepts)")
	}
}

func (c *Config) validateRuns(bad func(key, format string, a ...any)) {
	r := c.Runs
	if r.Image == "" || len(r.Image) > 255 || strings.ContainsAny(r.Image, " \t\n") {
		bad("runs.image", "must be an image reference of 1 to 255 characters")
	}
	if len(r.Projects) > MaxRunProjects {
		bad("runs.projects", "at most %d projects", MaxRunProjects)
	}
	seen := map[string]bool{}
	for i, p := range r.Projects {
		key := fmt.Sprintf("runs.projects[%d]", i)
		if !projectNameRe.MatchString(p.Name) {
			bad(key+".name", "%q must match %s", p.Name, projectNameRe)
		} else if seen[p.Name] {
			bad(key+".name", "%q is declared twice", p.Name)
		}
		seen[p.Name] = true
		if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path || p.Path == "/" || strings.ContainsAny(p.Path, ",:\n") {
			bad(key+".path", "%q must be an absolute, clean directory path other than / (no comma, colon or newline)", p.Path)
		} else if why := c.projectPathRefusal(p.Path); why != "" {
			bad(key+".path", "%q %s", p.Path, why)
		}
	}
	if r.MemoryMB < 64 || r.MemoryMB > 65536 {
		bad("runs.memoryMb", "must be 64 to 65536, got %d", r.MemoryMB)
	}
	if !(r.CPUs >= 0.01 && r.CPUs <= 64) {
		bad("runs.cpus", "must be 0.01 to 64, got %v", r.CPUs)
	}
	if r.Pids < 8 || r.Pids > 4096 {
		bad("runs.pids", "must be 8 to 4096, got %d", r.Pids)
	}
	if r.TmpfsMB < 1 || r.TmpfsMB > 4096 {
		bad("runs.tmpfsMb", "must be 1 to 4096, got %d", r.TmpfsMB)
	}
	if r.OutputMB < 1 || r.OutputMB > 4096 {
		bad("runs.outputMb", "must be 1 to 4096, got %d", r.OutputMB)
	}
	if r.TmpfsMB+r.OutputMB >= r.MemoryMB {
		bad("runs.tmpfsMb", "runs.tmpfsMb plus runs.outputMb must stay below runs.memoryMb (tmpfs counts against memory), got %d + %d >= %d", r.TmpfsMB, r.OutputMB, r.MemoryMB)
	}
	if r.MaxOutputBytes < MinRunOutputBytes || r.MaxOutputBytes > MaxRunOutputBytes {
		bad("runs.maxOutputBytes", "must be %d to %d, got %d", MinRunOutputBytes, MaxRunOutputBytes, r.MaxOutputBytes)
	}
	if r.MaxArtifacts < 1 || r.MaxArtifacts > MaxRunArtifacts {
		bad("runs.maxArtifacts", "must be 1 to %d, got %d", MaxRunArtifacts, r.MaxArtifacts)
	}
	if r.MaxArtifactBytes < 1 || r.MaxArtifactBytes > MaxRunArtifactBytes {
		bad("runs.maxArtifactBytes", "must be 1 to %d, got %d", MaxRunArtifactBytes, r.MaxArtifactBytes)
	}
	if r.MaxArtifactTotalBytes < r.MaxArtifactBytes || r.MaxArtifactTotalBytes > MaxRunArtifactTotalBytes {
		bad("runs.maxArtifactTotalBytes", "must be runs.maxArtifactBytes (%d) to %d, got %d", r.MaxArtifactBytes, MaxRunArtifactTotalBytes, r.MaxArtifactTotalBytes)
	}
	if r.ApprovalTimeoutSeconds < 10 || r.ApprovalTimeoutSeconds > 3600 {
		bad("runs.approvalTimeoutSeconds", "must be 10 to 3600, got %d", r.ApprovalTimeoutSeconds)
	}
	if r.RetainSeconds < 10 || r.RetainSeconds > 86400 {
		bad("runs.retainSeconds", "must be 10 to 86400, got %d", r.RetainSeconds)
	}
	if r.MaxRetained < 1 || r.MaxRetained > 4096 {
		bad("runs.maxRetained", "must be 1 to 4096, got %d", r.MaxRetained)
	}
	if r.ResultHoldSeconds < 10 || r.ResultHoldSeconds > max(r.RetainSeconds, 10) {
		bad("runs.resultHoldSeconds", "must be 10 to runs.retainSeconds (%d), got %d", r.RetainSeconds, r.ResultHoldSeconds)
	}
	c.validateRunStandby(bad)
	c.validateRunsMemory(bad)
}

// validateRunsMemory refuses settings whose worst case passes the host's
// memory for runs: the bounds hold at every allowed setting, not only at
// the defaults.
func (c *Config) validateRunsMemory(bad func(key, format string, a ...any)) {
	r := c.Runs
	const mib = 1 << 20
	budget := r.MemoryBudgetBytes
	if budget < MinRunsMemoryBudget || budget > MaxRunsMemoryBudget {
		bad("runs.memoryBudgetBytes", "must be %d to %d, got %d", MinRunsMemoryBudget, int64(MaxRunsMemoryBudget), budget)
		return
	}
	if r.MaxInFlight < 1 || r.MaxInFlight > MaxRunsInFlight {
		bad("runs.maxInFlight", "must be 1 to %d, got %d", MaxRunsInFlight, r.MaxInFlight)
		return
	}
	if r.MaxInFlightPerClient < 1 || r.MaxInFlightPerClient > r.MaxInFlight {
		bad("runs.maxInFlightPerClient", "must be 1 to runs.maxInFlight (%d), got %d", r.MaxInFlight, r.MaxInFlightPerClient)
	}
	if r.MaxOutputBytes < MinRunOutputBytes || r.MaxOutputBytes > MaxRunOutputBytes || r.MaxArtifactTotalBytes < 1 ||
		r.MaxArtifactTotalBytes > MaxRunArtifactTotalBytes {
		return // refused above; the sums below would mislead
	}
	one := r.RunRetainedBytes()
	if r.MaxRetainedBytes < one || r.MaxRetainedBytes > budget {
		bad("runs.maxRetainedBytes", "must be one finished run at runs.maxOutputBytes and runs.maxArtifactTotalBytes "+
			"(2 x %d + %d MiB of events + %d = %d bytes) to %d (the host's memory for runs, runs.memoryBudgetBytes), got %d",
			r.MaxOutputBytes, RunHistoryBytes/mib, r.MaxArtifactTotalBytes, one, budget, r.MaxRetainedBytes)
		return
	}
	if worst := r.RunsWorstCaseBytes(); worst > budget {
		bad("runs.maxRetainedBytes", "runs.maxRetainedBytes (%d MiB) plus runs.maxInFlight (%d) runs of up to %.1f MiB each "+
			"(2 x runs.maxOutputBytes + %d MiB of events + runs.maxArtifactTotalBytes + %d MiB of buffers) is %.1f MiB, "+
			"over the %d MiB the host keeps for runs (runs.memoryBudgetBytes; the shipped unit has MemoryMax=1G): lower runs.maxRetainedBytes, "+
			"runs.maxInFlight, runs.maxOutputBytes or runs.maxArtifactTotalBytes, or raise runs.memoryBudgetBytes with the unit's MemoryMax",
			r.MaxRetainedBytes/mib, r.MaxInFlight, float64(one+RunBufferBytes)/mib, RunHistoryBytes/mib, RunBufferBytes/mib,
			float64(worst)/mib, budget/mib)
	}
}

// hiddenFromHost are trees sandbox-host.service cannot see (ProtectHome,
// PrivateTmp) or that hold what no run may read.
var hiddenFromHost = []string{"/home", "/root", "/run/user", "/tmp", "/var/tmp", "/proc", "/sys", "/dev", "/run", "/etc/roundtable-sandbox"}

// projectPathRefusal says why a project path cannot be mounted into runs:
// the host cannot see it (so cannot check it), or it holds the family's own
// state, credentials or Docker's data.
func (c *Config) projectPathRefusal(path string) string {
	for _, h := range hiddenFromHost {
		if path == h || strings.HasPrefix(path, h+"/") {
			return fmt.Sprintf("is under %s, which sandbox-host.service cannot see or must not share (put projects under /srv or /var/lib)", h)
		}
	}
	for _, own := range []struct{ key, dir string }{
		{"workspaceRoot", c.WorkspaceRoot}, {"runRoot", c.RunRoot}, {"policyDir", c.PolicyDir},
		{"stateFile", filepath.Dir(c.StateFile)}, {"dockerDataRoot", c.DockerDataRoot},
	} {
		if own.dir == "" {
			continue
		}
		if path == own.dir || strings.HasPrefix(path, own.dir+"/") || strings.HasPrefix(own.dir, path+"/") {
			return fmt.Sprintf("overlaps %s (%s)", own.key, own.dir)
		}
	}
	return ""
}

func (c *Config) validateEgress(bad func(key, format string, a ...any)) {
	for i, a := range c.Egress.Allow {
		if ap, err := safefetch.ParseAllow([]string{a}); err != nil || ap[0].String() != a {
			bad(fmt.Sprintf("egress.allow[%d]", i), "%q must be an exact address:port in canonical form (e.g. 10.0.0.5:3142 or [fd00::5]:443), not unspecified, multicast, broadcast or a cloud metadata address", a)
		}
	}
}

func checkSpec(key, desc, params string, bad func(key, format string, a ...any)) {
	if desc == "" || utf8.RuneCountInString(desc) > protocol.MaxDescChars || !utf8.ValidString(desc) {
		bad(key+".description", "must be 1 to %d characters", protocol.MaxDescChars)
	}
	if err := CompileSchema(params); err != nil {
		bad(key+".parameters", "%v", err)
	}
}
