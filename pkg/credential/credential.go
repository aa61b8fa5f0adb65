// Package credential loads the broker's named credentials and keeps their
// values out of every log, error and encoding. A Secret prints, logs and
// marshals as "[redacted]"; only Reveal returns the value, and the broker
// calls it once per upstream call, immediately before the request is sent.
// A missing, empty, oversized, non-regular or symlinked credential file fails
// closed. Reflected reports whether a decoded JSON answer echoes a secret.
package credential

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// MaxBytes bounds one credential file.
const MaxBytes = 64 << 10

// Error categories. Messages never contain a credential value.
var (
	// ErrMissing: the credential file is absent or empty; the call fails closed.
	ErrMissing = errors.New("credential missing")
	// ErrInvalid: a bad name, an unreadable or malformed file.
	ErrInvalid = errors.New("credential invalid")
)

const redacted = "[redacted]"

// Secret holds one credential value. Its zero value is empty.
type Secret struct{ v string }

// NewSecret wraps a value (tests and callers that hold a value already).
func NewSecret(v string) Secret { return Secret{v: v} }

// Reveal returns the value. Call it only where the value goes on the wire.
func (s Secret) Reveal() string { return s.v }

// Empty reports whether the secret has no value.
func (s Secret) Empty() bool { return s.v == "" }

// String never reveals the value.
func (s Secret) String() string { return redacted }

// GoString never reveals the value (%#v).
func (s Secret) GoString() string { return redacted }

// Format never reveals the value, whatever the verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue never reveals the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON never reveals the value.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText never reveals the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Dir loads credentials from one directory ($CREDENTIALS_DIRECTORY), one file
// per name: the credential <name> is the file <prefix><name>. systemd's
// LoadCredential=<ID>:<directory> names each file "<ID>_<name>", so the
// broker passes layout.CredentialPrefix; tests and development use "".
// Nothing is cached: every Load reads the file again, so a rotated
// credential takes effect on the next call.
type Dir struct{ path, prefix string }

// OpenDir checks that path is an accessible directory (not a symlink) and
// returns a loader for it. prefix must be a plain file-name fragment.
func OpenDir(path, prefix string) (*Dir, error) {
	if path == "" {
		return nil, fmt.Errorf("credential: no credentials directory: %w", ErrInvalid)
	}
	if prefix != "" && !policy.ValidCredentialName(prefix) {
		return nil, fmt.Errorf("credential: bad file-name prefix: %w", ErrInvalid)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("credential: open credentials directory: %v: %w", err, ErrInvalid)
	}
	_ = unix.Close(fd)
	return &Dir{path: path, prefix: prefix}, nil
}

// LogValue shows the directory and prefix only.
func (d *Dir) LogValue() slog.Value {
	return slog.GroupValue(slog.String("dir", d.path), slog.String("prefix", d.prefix))
}

// Load reads the named credential: the file's content with one trailing
// newline trimmed. The name must pass policy.ValidCredentialName.
func (d *Dir) Load(name string) (Secret, error) {
	if !policy.ValidCredentialName(name) {
		return Secret{}, fmt.Errorf("credential: bad name: %w", ErrInvalid)
	}
	dfd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Secret{}, fmt.Errorf("credential: open directory: %v: %w", err, ErrMissing)
	}
	defer unix.Close(dfd)
	data, err := atomicfile.ReadAt(dfd, d.prefix+name, MaxBytes)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Secret{}, fmt.Errorf("credential: %s: %w", name, ErrMissing)
		}
		// atomicfile's errors name the file and the cause, never content.
		return Secret{}, fmt.Errorf("credential: %s: %v: %w", name, err, ErrInvalid)
	}
	v := string(data)
	if s, ok := strings.CutSuffix(v, "\n"); ok {
		v = strings.TrimSuffix(s, "\r")
	}
	if v == "" {
		return Secret{}, fmt.Errorf("credential: %s is empty: %w", name, ErrMissing)
	}
	for i := 0; i < len(v); i++ {
		// A bearer value must be a valid header value: no controls.
		if c := v[i]; c < 0x20 || c == 0x7f {
			return Secret{}, fmt.Errorf("credential: %s holds control characters: %w", name, ErrInvalid)
		}
	}
	return Secret{v: v}, nil
}
