// Package credset gives one turn's broker exactly the credentials its policy
// names. sandbox-credset@<turn>.service (user _sandbox-credset, no
// capabilities and no mount namespace, group _sandbox-credset to read the
// credential store, group _sandbox-broker to read the policy) runs it before
// sandbox-broker@<turn>.service, which loads the result with
// LoadCredential=sandbox:/run/roundtable-sandbox/credsets/<turn>.
//
// Guarantee: Copy writes a file for a name only when the turn's validated
// policy names it, or a standby's placeholder lists it (the names the host
// will put in the turn's policy; a placeholder that lists none gets none),
// reads credentials without following a symlink and within
// credential.MaxBytes, writes each copy 0400 with O_EXCL|O_NOFOLLOW, and
// never logs a value. A named credential that does not exist, or is not a
// regular file (a symlink, say), is skipped: the broker then fails that call
// closed, as before. One the copier may not read (no group
// _sandbox-credset read: a file written after the package's postinst
// without `-g _sandbox-credset -m 0640`) is skipped too, and named as
// unreadable so that the log says what to fix.
package credset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// Names are the distinct credential names p uses, sorted.
func Names(p *policy.Policy) []string { return p.CredentialNames() }

// Result says what Copy did, by name only.
type Result struct {
	Copied, Missing []string
	// Skipped: present but not a regular file within credential.MaxBytes
	// (a symlink, say); the broker fails their calls closed.
	Skipped []string
	// Unreadable: present but not readable by this process (the file
	// lacks group _sandbox-credset's read, docs/operating.md); the broker
	// fails their calls closed.
	Unreadable []string
	// Pending: the policy file is a standby's placeholder; the names it
	// lists were copied (none when it lists none: never every credential).
	Pending bool
}

// readAt reads one credential file (a seam: the tests run as root, whom no
// file mode refuses).
var readAt = atomicfile.ReadAt

// Copy reads policyDir/<turn>.json and copies each credential it names from
// fromDir into outDir (an existing, empty directory of this process).
func Copy(turn, policyDir, fromDir, outDir string) (Result, error) {
	var r Result
	path, err := layout.PolicyFile(policyDir, turn)
	if err != nil {
		return r, err
	}
	if err := ids.ValidTurnID(turn); err != nil {
		return r, err
	}
	p, pending, err := policy.Read(path)
	if err != nil {
		return r, err
	}
	var names []string
	switch {
	case pending != nil:
		if pending.TurnID != turn {
			return r, fmt.Errorf("placeholder %s is for turn %s", path, pending.TurnID)
		}
		r.Pending = true
		names = pending.Credentials
	case p.TurnID != turn:
		return r, fmt.Errorf("policy %s is for turn %s", path, p.TurnID)
	default:
		names = Names(p)
	}
	from, err := unix.Open(fromDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("credentials directory %s: %w", fromDir, err)
	}
	defer unix.Close(from)
	out, err := unix.Open(outDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("output directory %s: %w", outDir, err)
	}
	defer unix.Close(out)
	for _, name := range names {
		data, err := readAt(from, name, credential.MaxBytes)
		if errors.Is(err, fs.ErrNotExist) {
			r.Missing = append(r.Missing, name)
			continue
		}
		if errors.Is(err, fs.ErrPermission) {
			r.Unreadable = append(r.Unreadable, name)
			continue
		}
		if err != nil {
			r.Skipped = append(r.Skipped, name)
			continue
		}
		if err := writeAt(out, name, data); err != nil {
			return r, fmt.Errorf("copy of credential %s: %w", name, err)
		}
		r.Copied = append(r.Copied, name)
	}
	return r, nil
}

func writeAt(dir int, name string, data []byte) error {
	if filepath.Base(name) != name || !policy.ValidCredentialName(name) {
		return errors.New("bad name")
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
