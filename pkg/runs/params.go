package runs

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of Params. They are fixed (not configuration): they protect the
// host's memory and the container's argv, not an operator's policy.
const (
	DefaultTimeoutSeconds = 120       // timeoutSeconds 0 or absent
	MaxTimeoutSeconds     = 3600      // the seed's maximum
	MaxSetupCommands      = 32        // setup entries
	MaxCommandBytes       = 64 << 10  // command, and each setup entry
	MaxExecutableBytes    = 4096      // executable (PATH_MAX)
	MaxArgs               = 1024      // args entries
	MaxArgsBytes          = 256 << 10 // args, all entries together
	MaxProjectBytes       = 255       // project name (config restricts it further)
)

// ParamLimits are the operator's bounds and knowledge Validate needs.
type ParamLimits struct {
	// MaxArtifacts bounds len(Params.Artifacts); 0 or less allows none
	// (fail closed on a zero ParamLimits).
	MaxArtifacts int
	// ProjectKnown reports whether a project of that name is declared. Nil
	// knows no project: every non-empty project is refused.
	ProjectKnown func(name string) bool
	// CredentialAvailable reports whether this run may ask for the
	// credentialed destination name (declared, and granted to its project
	// or client). Nil makes none available.
	CredentialAvailable func(name string) bool
}

// MaxCredentials bounds Params.Credentials (policy.MaxEgressCredentials).
const MaxCredentials = 16

// maxCredentialNameBytes bounds one credential name.
const maxCredentialNameBytes = 64

// Clone returns a deep copy of p: its slices share nothing with p's.
func (p Params) Clone() Params {
	p.Args = slices.Clone(p.Args)
	p.Setup = slices.Clone(p.Setup)
	p.Artifacts = slices.Clone(p.Artifacts)
	p.Credentials = slices.Clone(p.Credentials)
	return p
}

// Mode returns ModeShell when Command is set, ModeArgv when Executable is
// set, and "" when neither is (Validate refuses both and neither).
func (p Params) Mode() string {
	switch {
	case p.Command != "":
		return ModeShell
	case p.Executable != "":
		return ModeArgv
	}
	return ""
}

// Validate refuses parameters that break the seed's rules or the package's
// bounds, with an error wrapping ErrInvalid whose message names the
// parameter (API key spelling, 0-based index for lists). On success it
// normalises p: TimeoutSeconds 0 becomes DefaultTimeoutSeconds and every
// artifact is replaced by its clean form (CleanArtifactPath). On refusal p
// is unchanged.
func (p *Params) Validate(l ParamLimits) error {
	hasCmd := strings.TrimSpace(p.Command) != ""
	hasExe := strings.TrimSpace(p.Executable) != ""
	switch {
	case hasCmd && hasExe:
		return Invalidf("give either command (shell) or executable with args (argv), not both")
	case !hasCmd && !hasExe:
		if p.Command != "" {
			return Invalidf("command must not be empty or only whitespace")
		}
		if p.Executable != "" {
			return Invalidf("executable must not be empty or only whitespace")
		}
		return Invalidf("give either command (shell) or executable with args (argv)")
	case hasCmd && p.Executable != "":
		return Invalidf("give either command (shell) or executable with args (argv), not both")
	case hasExe && p.Command != "":
		return Invalidf("give either command (shell) or executable with args (argv), not both")
	case hasCmd && len(p.Args) > 0:
		return Invalidf("args is only for argv mode (with executable), not with command")
	}

	if hasCmd {
		if len(p.Command) > MaxCommandBytes {
			return Invalidf("command must be at most %d bytes, got %d", MaxCommandBytes, len(p.Command))
		}
		if err := plainText("command", p.Command); err != nil {
			return err
		}
	} else {
		if len(p.Executable) > MaxExecutableBytes {
			return Invalidf("executable must be at most %d bytes, got %d", MaxExecutableBytes, len(p.Executable))
		}
		if err := plainText("executable", p.Executable); err != nil {
			return err
		}
		if len(p.Args) > MaxArgs {
			return Invalidf("args must have at most %d entries, got %d", MaxArgs, len(p.Args))
		}
		total := 0
		for i, a := range p.Args {
			total += len(a)
			if total > MaxArgsBytes {
				return Invalidf("args must be at most %d bytes together", MaxArgsBytes)
			}
			if err := plainText(indexed("args", i), a); err != nil {
				return err
			}
		}
	}

	if len(p.Setup) > MaxSetupCommands {
		return Invalidf("setup must have at most %d commands, got %d", MaxSetupCommands, len(p.Setup))
	}
	for i, s := range p.Setup {
		name := indexed("setup", i)
		if strings.TrimSpace(s) == "" {
			return Invalidf("%s must not be empty or only whitespace", name)
		}
		if len(s) > MaxCommandBytes {
			return Invalidf("%s must be at most %d bytes, got %d", name, MaxCommandBytes, len(s))
		}
		if err := plainText(name, s); err != nil {
			return err
		}
	}

	timeout := p.TimeoutSeconds
	switch {
	case timeout == 0:
		timeout = DefaultTimeoutSeconds
	case timeout < 1 || timeout > MaxTimeoutSeconds:
		return Invalidf("timeoutSeconds must be 1 to %d (absent or 0 means %d), got %d",
			MaxTimeoutSeconds, DefaultTimeoutSeconds, timeout)
	}

	if p.Project != "" {
		if len(p.Project) > MaxProjectBytes {
			return Invalidf("project must be at most %d bytes", MaxProjectBytes)
		}
		if err := plainText("project", p.Project); err != nil {
			return err
		}
		if l.ProjectKnown == nil || !l.ProjectKnown(p.Project) {
			return Invalidf("project is not a project declared on this host")
		}
	}

	max := max(l.MaxArtifacts, 0)
	if len(p.Artifacts) > max {
		return Invalidf("artifacts must have at most %d entries, got %d", max, len(p.Artifacts))
	}
	var clean []string
	if len(p.Artifacts) > 0 {
		clean = make([]string, len(p.Artifacts))
		seen := make(map[string]int, len(p.Artifacts))
		for i, a := range p.Artifacts {
			c, err := CleanArtifactPath(a)
			if err != nil {
				return Invalidf("%s: %s", indexed("artifacts", i), err.Error())
			}
			if j, dup := seen[c]; dup {
				return Invalidf("%s names the same file as %s", indexed("artifacts", i), indexed("artifacts", j))
			}
			seen[c] = i
			clean[i] = c
		}
	}

	if len(p.Credentials) > 0 && !p.Network {
		return Invalidf("credentials need network: true (they are added to the run's approved egress)")
	}
	if len(p.Credentials) > MaxCredentials {
		return Invalidf("credentials must have at most %d entries, got %d", MaxCredentials, len(p.Credentials))
	}
	seenCred := make(map[string]int, len(p.Credentials))
	for i, c := range p.Credentials {
		name := indexed("credentials", i)
		if c == "" || len(c) > maxCredentialNameBytes {
			return Invalidf("%s must be 1 to %d bytes", name, maxCredentialNameBytes)
		}
		if err := plainText(name, c); err != nil {
			return err
		}
		if j, dup := seenCred[c]; dup {
			return Invalidf("%s names the same credential as %s", name, indexed("credentials", j))
		}
		seenCred[c] = i
		// One answer for unknown and not granted: a client learns nothing
		// of credentials it may not use.
		if l.CredentialAvailable == nil || !l.CredentialAvailable(c) {
			return Invalidf("%s: no credential of that name is available to this run", name)
		}
	}

	p.TimeoutSeconds = timeout
	if clean != nil {
		p.Artifacts = clean
	}
	return nil
}

// plainText refuses invalid UTF-8 and NUL bytes: neither survives an argv or
// a shell unchanged, and both are how a smuggled second meaning starts.
func plainText(name, s string) error {
	if !utf8.ValidString(s) {
		return Invalidf("%s must be valid UTF-8", name)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return Invalidf("%s must not contain NUL bytes", name)
	}
	return nil
}

func indexed(name string, i int) string {
	return name + "[" + strconv.Itoa(i) + "]"
}
