package toolbox

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// ErrBaseHoldsWorker: the base tar already has an entry at the worker's
// path (or AptConfPath's), or something other than a directory at one of
// their parents. It is
// refused rather than overridden: such a base is either an already
// imported toolbox exported again (whose old worker would shadow or be
// shadowed depending on the unpacker) or a rootfs that redirects the path
// (a symlinked /usr/lib/roundtable-sandbox would put the worker elsewhere).
var ErrBaseHoldsWorker = errors.New("base tar already holds the worker's path")

// workerMember is layout.ToolboxWorker as a member name without prefix.
var workerMember = strings.TrimPrefix(layout.ToolboxWorker, "/")

// AptConfPath is the toolbox's apt configuration for setup commands, which
// hold neither CAP_SETUID nor CAP_SETGID (supervisor.SetupCommandCapabilities:
// they could otherwise pass the project's gate): apt, left to drop to its
// _apt user for downloads, would fail with "setgroups ... Operation not
// permitted"; it stays root. The import adds it to every base.
const AptConfPath = "/etc/apt/apt.conf.d/90roundtable-sandbox-setup"

// AptConf is AptConfPath's content.
const AptConf = `// roundtable-sandbox: a run's setup commands are root without CAP_SETUID
// and CAP_SETGID, so apt cannot switch to its _apt user; it stays root.
APT::Sandbox::User "root";
`

var aptConfMember = strings.TrimPrefix(AptConfPath, "/")

// added are the members the import writes after the base, in order.
var added = []string{aptConfMember, workerMember}

// memberName normalizes a tar member name: no leading "./" or "/", no
// trailing "/", cleaned; "" for the root itself.
func memberName(n string) string {
	n = path.Clean("/" + n)
	return strings.TrimPrefix(n, "/")
}

// parents of a member name, outermost first ("usr", "usr/lib", ...).
func parents(member string) []string {
	var out []string
	for i := 0; i < len(member); i++ {
		if member[i] == '/' {
			out = append(out, member[:i])
		}
	}
	return out
}

// baseScan is what a pass over the base learned.
type baseScan struct {
	entries  int
	prefix   string          // "./" when the base names members so (mmdebstrap does)
	dirs     map[string]bool // the added members' parents present as directories
	packages string          // PackagesFile's content, "" when absent
}

// scanEntry checks one base header against the added members' paths (the
// worker's and AptConfPath).
func (s *baseScan) scanEntry(hdr *tar.Header) error {
	name := memberName(hdr.Name)
	if s.entries == 0 && strings.HasPrefix(hdr.Name, "./") {
		s.prefix = "./"
	}
	s.entries++
	for _, a := range added {
		if name == a {
			return fmt.Errorf("toolbox: %w: member %q", ErrBaseHoldsWorker, hdr.Name)
		}
		for _, p := range parents(a) {
			if name != p {
				continue
			}
			if hdr.Typeflag != tar.TypeDir {
				return fmt.Errorf("toolbox: %w: member %q is not a directory (type %q)", ErrBaseHoldsWorker, hdr.Name, hdr.Typeflag)
			}
			s.dirs[p] = true
		}
	}
	return nil
}

// maxWorker bounds the worker binary Import reads into memory.
const maxWorker = 256 << 20

// copyBase reads every member of base, checks it (scanEntry) and, when tw
// is not nil, writes it to tw unchanged but for the tar format, which the
// writer picks again (mtimes keep whole seconds). PackagesFile's content
// is read on the way.
func copyBase(tw *tar.Writer, base io.Reader) (*baseScan, error) {
	s := &baseScan{dirs: map[string]bool{}}
	tr := tar.NewReader(base)
	pkgFile := strings.TrimPrefix(PackagesFile, "/")
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("toolbox: reading the base tar after %d members: %w", s.entries, err)
		}
		if err := s.scanEntry(hdr); err != nil {
			return nil, err
		}
		var body io.Reader = tr
		if memberName(hdr.Name) == pkgFile && hdr.Typeflag == tar.TypeReg {
			if hdr.Size > maxPackagesFile {
				return nil, fmt.Errorf("toolbox: %s in the base is %d bytes (limit %d)", PackagesFile, hdr.Size, maxPackagesFile)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("toolbox: reading %s from the base: %w", PackagesFile, err)
			}
			s.packages = string(b)
			body = strings.NewReader(s.packages)
		}
		if tw == nil {
			continue
		}
		h := *hdr
		h.Format = tar.FormatUnknown
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("toolbox: rewriting member %q: %w", hdr.Name, err)
		}
		if _, err := io.Copy(tw, body); err != nil {
			return nil, fmt.Errorf("toolbox: copying member %q: %w", hdr.Name, err)
		}
	}
	if s.entries == 0 {
		return nil, errors.New("toolbox: the base tar has no members")
	}
	return s, nil
}

// appendWorker writes base's members to w, then AptConfPath (0644
// root:root) and the worker at layout.ToolboxWorker (0755 root:root), each
// after its missing parent directories (0755 root:root), all of mtime
// mtime, then the tar's end. Nothing is unpacked: one member at a time goes
// from reader to writer.
func appendWorker(w io.Writer, base io.Reader, worker []byte, mtime time.Time) error {
	tw := tar.NewWriter(w)
	s, err := copyBase(tw, base)
	if err != nil {
		return err
	}
	mtime = mtime.UTC().Truncate(time.Second)
	for _, f := range []struct {
		member, what string
		mode         int64
		data         []byte
	}{{aptConfMember, "the apt configuration", 0o644, []byte(AptConf)}, {workerMember, "the worker", 0o755, worker}} {
		for _, p := range parents(f.member) {
			if s.dirs[p] {
				continue
			}
			s.dirs[p] = true
			if err := tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeDir, Name: s.prefix + p + "/", Mode: 0o755,
				Uname: "root", Gname: "root", ModTime: mtime,
			}); err != nil {
				return fmt.Errorf("toolbox: writing directory %s: %w", p, err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: s.prefix + f.member, Mode: f.mode, Size: int64(len(f.data)),
			Uname: "root", Gname: "root", ModTime: mtime,
		}); err != nil {
			return fmt.Errorf("toolbox: writing %s: %w", f.what, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("toolbox: writing %s: %w", f.what, err)
		}
	}
	return tw.Close()
}
