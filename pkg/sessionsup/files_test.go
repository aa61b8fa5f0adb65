package sessionsup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

func lastEvent(frames []sessionwire.EventFrame) sessionwire.Event {
	_, ev := fileData(frames)
	return ev
}

func errCode(frames []sessionwire.EventFrame) string {
	if ev := lastEvent(frames); ev.Error != nil {
		return ev.Error.Code
	}
	return ""
}

func TestPutGetList(t *testing.T) {
	f := newFixture(t, nil)
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 300000) // 1.2 MB, binary
	if ev := lastEvent(f.put("p", "a.bin", data, 0o600)); ev.Kind != sessionwire.EventFile || ev.File.Size != int64(len(data)) {
		t.Fatalf("put: %+v", ev)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(f.work, "a.bin"), &st); err != nil {
		t.Fatal(err)
	}
	if int(st.Uid) != f.uid || int(st.Gid) != f.gid || st.Mode&0o7777 != 0o600 {
		t.Fatalf("put file is %d:%d mode %#o, want %d:%d 0600", st.Uid, st.Gid, st.Mode&0o7777, f.uid, f.gid)
	}
	got, ev := fileData(f.file(sessionwire.OpGet, "g", "a.bin"))
	if !bytes.Equal(got, data) || ev.File == nil || ev.File.Size != int64(len(data)) || ev.File.Changed || ev.File.Mode != 0o600 {
		t.Fatalf("get: %d bytes, %+v", len(got), ev.File)
	}
	// Replace: the new content, and no temporary file left beside it.
	f.put("p2", "a.bin", []byte("new"), 0)
	if got, _ := fileData(f.file(sessionwire.OpGet, "g2", "a.bin")); string(got) != "new" {
		t.Fatalf("after the replace: %q", got)
	}
	if err := os.Mkdir(filepath.Join(f.work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(f.work, "sub"), f.uid, f.gid)
	f.put("p3", "sub/x.txt", []byte("x"), 0o755)
	f.put("p4", "/output/r.txt", []byte("report"), 0)
	f.put("p5", "/tmp/t", []byte("t"), 0)
	if b, _ := os.ReadFile(filepath.Join(f.output, "r.txt")); string(b) != "report" {
		t.Fatalf("/output/r.txt = %q", b)
	}
	var names []string
	for _, fr := range f.file(sessionwire.OpList, "l", ".") {
		for _, e := range fr.Event.List.Entries {
			names = append(names, fmt.Sprintf("%s:%s:%d", e.Name, e.Type, e.Size))
		}
	}
	if got, want := strings.Join(sorted(names), " "), "a.bin:file:3 sub:dir:0"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}
	// Missing file, missing parent, a directory as a get.
	for _, tt := range []struct{ op, p, code string }{
		{sessionwire.OpGet, "nope", sessionwire.ErrNotFound},
		{sessionwire.OpGet, "sub", sessionwire.ErrNotRegular},
		{sessionwire.OpList, "a.bin", sessionwire.ErrNotRegular},
	} {
		if c := errCode(f.file(tt.op, "x"+tt.op+strings.ReplaceAll(tt.p, "/", "_"), tt.p)); c != tt.code {
			t.Errorf("%s %s: code %q, want %q", tt.op, tt.p, c, tt.code)
		}
	}
	if c := errCode(f.put("pmiss", "nodir/x", []byte("x"), 0)); c != sessionwire.ErrNotFound {
		t.Errorf("put under a missing directory: code %q", c)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestPathSymlinkRefused: a symlink anywhere on the path is refused, in
// the middle or last, for get, put, list and get-dir; a put over a
// symlink's name replaces the link and never writes through it.
func TestPathSymlinkRefused(t *testing.T) {
	f := newFixture(t, nil)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(outside, 0o755)
	for name, target := range map[string]string{"dirlink": outside, "filelink": secret, "rel": "../.."} {
		if err := os.Symlink(target, filepath.Join(f.work, name)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ op, p string }{
		{sessionwire.OpGet, "dirlink/secret"}, {sessionwire.OpGet, "filelink"}, {sessionwire.OpList, "dirlink"},
		{sessionwire.OpGetDir, "dirlink"}, {sessionwire.OpGet, "rel/etc/passwd"},
	}
	for i, c := range cases {
		if code := errCode(f.file(c.op, fmt.Sprintf("s%d", i), c.p)); code != sessionwire.ErrDenied {
			t.Errorf("%s %s: code %q, want denied", c.op, c.p, code)
		}
	}
	if code := errCode(f.put("pw", "dirlink/secret", []byte("pwned"), 0)); code != sessionwire.ErrDenied {
		t.Errorf("put through a directory symlink: code %q, want denied", code)
	}
	f.put("pr", "filelink", []byte("replaced"), 0)
	if b, _ := os.ReadFile(secret); string(b) != "SECRET" {
		t.Fatalf("a put wrote through a symlink: the target now holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(f.work, "filelink")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the put did not replace the link itself: %v %v", fi, err)
	}
}

// TestOpenAtRefusesEscapes: the resolver below the session paths refuses
// "..", absolute paths and symlinks on its own (sessionwire refuses them
// earlier; this is the second wall).
func TestOpenAtRefusesEscapes(t *testing.T) {
	base := t.TempDir()
	os.Mkdir(filepath.Join(base, "d"), 0o755)
	os.WriteFile(filepath.Join(base, "d", "f"), []byte("x"), 0o644)
	os.Symlink("d", filepath.Join(base, "l"))
	for _, tt := range []struct {
		rel  string
		want error
	}{
		{"d/f", nil},
		{"d/../d/f", nil}, // ".." that stays beneath is the kernel's to allow
		{"..", unix.EXDEV},
		{"d/../../x", unix.EXDEV},
		{"/etc/passwd", unix.EXDEV},
		{"l/f", unix.ELOOP},
		{"l", unix.ELOOP},
		{"/proc/self/root/etc/passwd", unix.EXDEV},
	} {
		fd, err := openAt(base, tt.rel, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("openAt(%q) = %v, want %v", tt.rel, err, tt.want)
		}
	}
}

// TestPathAbsoluteAndDotDot: a path outside /output and /tmp, or with
// "..", is refused as a bad request; the session goes on.
func TestPathAbsoluteAndDotDot(t *testing.T) {
	f := newFixture(t, nil)
	for i, p := range []string{"/etc/passwd", "../x", "a/../../x", "/tmp/../etc/passwd", "/", "a//b"} {
		raw := rawRequest(t, sessionwire.Request{ID: fmt.Sprintf("a%d", i), Op: sessionwire.OpGet, File: &sessionwire.File{Path: p}})
		if _, err := f.in.Write(raw); err != nil {
			t.Fatal(err)
		}
		if code := errCode(f.wait(fmt.Sprintf("a%d", i))); code != sessionwire.ErrBadRequest {
			t.Errorf("get %q: code %q, want bad_request", p, code)
		}
	}
}

// TestPathSymlinkRace: while a directory on the path is swapped with a
// symlink (renameat2 RENAME_EXCHANGE, atomic) to outside the root or to
// another directory inside it, every get returns the real directory's file
// or a refusal, never the other one.
func TestPathSymlinkRace(t *testing.T) {
	for _, tt := range []struct{ name, target string }{{"outside", ""}, {"inside", "other"}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			target := tt.target
			if target == "" {
				target = t.TempDir()
				os.Chmod(target, 0o755)
			} else {
				os.Mkdir(filepath.Join(f.work, target), 0o755)
				target = filepath.Join(f.work, target)
			}
			os.WriteFile(filepath.Join(target, "f"), []byte("SECRET"), 0o644)
			os.Mkdir(filepath.Join(f.work, "d"), 0o755)
			os.WriteFile(filepath.Join(f.work, "d", "f"), []byte("inside"), 0o644)
			link := target
			if tt.target != "" {
				link = tt.target // relative, resolving beneath the root
			}
			os.Symlink(link, filepath.Join(f.work, "alt"))
			symlinkRace(t, f)
		})
	}
}

func symlinkRace(t *testing.T, f *fixture) {
	dirfd, err := unix.Open(f.work, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	swaps := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(dirfd, "d", dirfd, "alt", unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps++
		}
	}()
	inside, refused := 0, 0
	for i := range 300 {
		b, ev := fileData(f.file(sessionwire.OpGet, fmt.Sprintf("r%d", i), "d/f"))
		switch {
		case ev.Error != nil && ev.Error.Code == sessionwire.ErrDenied:
			refused++
		case ev.File != nil && string(b) == "inside":
			inside++
		default:
			close(stop)
			wg.Wait()
			t.Fatalf("get %d returned %q, %+v", i, b, ev)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps: %d gets inside, %d refused", swaps, inside, refused)
}

// TestFileBounds: a file over MaxGetBytes is refused (sparse: costs no
// disk); a put over MaxPutBytes is refused by the encoder, and a stream
// that sends one anyway is a protocol violation that ends the session.
func TestFileBounds(t *testing.T) {
	f := newFixture(t, nil)
	big := filepath.Join(f.work, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, sessionwire.MaxGetBytes+1); err != nil {
		t.Fatal(err)
	}
	if code := errCode(f.file(sessionwire.OpGet, "g", "big")); code != sessionwire.ErrTooLarge {
		t.Fatalf("get over the bound: code %q", code)
	}
	if err := os.Truncate(big, sessionwire.MaxGetBytes); err != nil {
		t.Fatal(err)
	}
	if b, ev := fileData(f.file(sessionwire.OpGet, "g2", "big")); ev.File == nil || len(b) != sessionwire.MaxGetBytes {
		t.Fatalf("get at the bound: %d bytes, %+v", len(b), ev)
	}
	over := sessionwire.Request{ID: "p", Op: sessionwire.OpPut, File: &sessionwire.File{Path: "p", Size: sessionwire.MaxPutBytes + 1}}
	if err := f.enc.Put(over, make([]byte, sessionwire.MaxPutBytes+1)); !errors.Is(err, sessionwire.ErrInvalidRequest) {
		t.Fatalf("encoder put over the bound: %v", err)
	}
	if _, err := f.in.Write(rawRequest(t, over)); err != nil {
		t.Fatal(err)
	}
	if err := <-f.serveErr; !errors.Is(err, sessionwire.ErrProtocol) {
		t.Fatalf("Serve after a put over the bound: %v, want ErrProtocol", err)
	}
}

// TestGetChangedWhileRead: a file that grows or shrinks between its fstat
// and its read is sent up to its size when opened, never more, and the
// result says it changed.
func TestGetChangedWhileRead(t *testing.T) {
	f := newFixture(t, nil)
	p := filepath.Join(f.work, "log")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	os.Chown(p, f.uid, f.gid) // the hook runs on the guest's thread
	f.s.afterStat = func() {
		fh, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		fh.Write(bytes.Repeat([]byte("g"), 100000))
		fh.Close()
	}
	b, ev := fileData(f.file(sessionwire.OpGet, "g", "log"))
	if string(b) != "0123456789" || ev.File == nil || !ev.File.Changed || ev.File.Size != 10 {
		t.Fatalf("grown: %q, %+v; want the first 10 bytes and changed", b, ev.File)
	}
	f.s.afterStat = func() { os.Truncate(p, 4) }
	b, ev = fileData(f.file(sessionwire.OpGet, "g2", "log"))
	if string(b) != "0123" || ev.File == nil || !ev.File.Changed || ev.File.Size != 4 {
		t.Fatalf("shrunk: %q, %+v; want 4 bytes and changed", b, ev.File)
	}
}

// TestPutCutLeavesOldFile: a put whose data stops mid-way (the host died)
// leaves the old file whole and no temporary file.
func TestPutCutLeavesOldFile(t *testing.T) {
	f := newFixture(t, nil)
	f.put("p", "keep", []byte("old content"), 0)
	req := rawRequest(t, sessionwire.Request{ID: "p2", Op: sessionwire.OpPut, File: &sessionwire.File{Path: "keep", Size: 100}})
	req = wire.AppendFrame(req, wire.FrameType(sessionwire.FramePutData), []byte("partial"))[:len(req)+5+7]
	// The frame claims 7 bytes of the 100; then the stream ends.
	if _, err := f.in.Write(req); err != nil {
		t.Fatal(err)
	}
	f.in.Close()
	if err := <-f.serveErr; !errors.Is(err, sessionwire.ErrProtocol) {
		t.Fatalf("Serve: %v, want ErrProtocol", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "keep")); string(b) != "old content" {
		t.Fatalf("the old file is now %q", b)
	}
	ents, _ := os.ReadDir(f.work)
	if len(ents) != 1 {
		t.Fatalf("work dir holds %d entries, want only the file", len(ents))
	}
}

// TestFileAsGuest: a file the guest cannot read (root's, 0600) is refused
// to a get even though the supervisor is root, and a put cannot write into
// a directory the guest cannot write.
func TestFileAsGuest(t *testing.T) {
	needRoot(t)
	f := newFixture(t, nil)
	os.WriteFile(filepath.Join(f.work, "rootonly"), []byte("r"), 0o600)
	if code := errCode(f.file(sessionwire.OpGet, "g", "rootonly")); code != sessionwire.ErrDenied {
		t.Fatalf("get of root's 0600 file: code %q, want denied", code)
	}
	os.Mkdir(filepath.Join(f.work, "ro"), 0o755) // root's
	if code := errCode(f.put("p", "ro/x", []byte("x"), 0)); code != sessionwire.ErrDenied {
		t.Fatalf("put into root's directory: code %q, want denied", code)
	}
}

// TestGetDir: a directory comes back as a tar of its directories and
// regular files; symlinks are skipped and counted, never followed.
func TestGetDir(t *testing.T) {
	f := newFixture(t, nil)
	os.MkdirAll(filepath.Join(f.output, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(f.output, "a", "b", "c.txt"), []byte("ccc"), 0o644)
	os.WriteFile(filepath.Join(f.output, "top"), []byte("t"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(f.output, "link"))
	b, ev := fileData(f.file(sessionwire.OpGetDir, "d", "/output"))
	if ev.File == nil || ev.File.Skipped != 1 || ev.File.Size != int64(len(b)) {
		t.Fatalf("get-dir: %+v", ev)
	}
	got := tarNames(t, b)
	if want := "a/ a/b/ a/b/c.txt:ccc top:t"; got != want {
		t.Fatalf("tar = %s, want %s", got, want)
	}
}

// BenchmarkPutGet1MiB is a 1 MiB put then its get through the supervisor.
func BenchmarkPutGet1MiB(b *testing.B) {
	f := newFixture(b, nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		if ev := lastEvent(f.put(fmt.Sprintf("p%d", i), "bench.bin", data, 0)); ev.File == nil {
			b.Fatalf("put: %+v", ev)
		}
		if got, _ := fileData(f.file(sessionwire.OpGet, fmt.Sprintf("g%d", i), "bench.bin")); len(got) != len(data) {
			b.Fatalf("get: %d bytes", len(got))
		}
	}
}
