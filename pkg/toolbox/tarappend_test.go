package toolbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

var baseMembers = []member{
	{name: "./", typ: tar.TypeDir, mode: 0o755},
	{name: "./dev/", typ: tar.TypeDir, mode: 0o755},
	{name: "./dev/null", typ: tar.TypeChar, mode: 0o666},
	{name: "./lib", typ: tar.TypeSymlink, linkname: "usr/lib", mode: 0o777},
	{name: "./usr/", typ: tar.TypeDir, mode: 0o755},
	{name: "./usr/bin/", typ: tar.TypeDir, mode: 0o755},
	{name: "./usr/bin/sh", typ: tar.TypeReg, mode: 0o755, body: "#!shell"},
	{name: "./usr/bin/sh.hard", typ: tar.TypeLink, linkname: "./usr/bin/sh"},
	{name: "./usr/lib/", typ: tar.TypeDir, mode: 0o755},
	{name: "./etc/", typ: tar.TypeDir, mode: 0o755},
	{name: "./etc/apt/", typ: tar.TypeDir, mode: 0o755},
	{name: "./etc/apt/apt.conf.d/", typ: tar.TypeDir, mode: 0o755},
	{name: "./etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0::/root:/bin/sh\n"},
}

func TestAppendWorkerKeepsEveryBaseMemberThenTheWorker(t *testing.T) {
	worker := fakeELF(false)
	mtime := time.Unix(1710000000, 0)
	for _, tc := range []struct {
		name     string
		base     []member
		confDirs []string // appended parents of the apt configuration
		wantDirs []string // appended parents of the worker
		prefix   string
	}{
		{"mmdebstrap naming", baseMembers, nil, []string{"./usr/lib/roundtable-sandbox/"}, "./"},
		{"parent already there", append(append([]member(nil), baseMembers...), member{name: "./usr/lib/roundtable-sandbox/", typ: tar.TypeDir, mode: 0o755}), nil, nil, "./"},
		{"bare names, no parents", []member{{name: "etc/", typ: tar.TypeDir, mode: 0o755}, {name: "etc/hostname", typ: tar.TypeReg, mode: 0o644, body: "x"}},
			[]string{"etc/apt/", "etc/apt/apt.conf.d/"}, []string{"usr/", "usr/lib/", "usr/lib/roundtable-sandbox/"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := appendWorker(&out, bytes.NewReader(makeTar(t, tc.base)), worker, mtime); err != nil {
				t.Fatal(err)
			}
			hdrs, bodies := readTar(t, &out)
			if got, want := len(hdrs), len(tc.base)+len(tc.confDirs)+1+len(tc.wantDirs)+1; got != want {
				t.Fatalf("got %d members, want %d (base %d + dirs %d + apt configuration + dirs %d + worker)", got, want, len(tc.base), len(tc.confDirs), len(tc.wantDirs))
			}
			for i, m := range tc.base {
				h := hdrs[i]
				if h.Name != m.name || h.Typeflag != m.typ || h.Mode != m.mode || h.Linkname != m.linkname {
					t.Errorf("member %d: got %q type %q mode %o link %q, want %q type %q mode %o link %q", i, h.Name, h.Typeflag, h.Mode, h.Linkname, m.name, m.typ, m.mode, m.linkname)
				}
				if m.typ == tar.TypeReg && bodies[m.name] != m.body {
					t.Errorf("member %s: body %q, want %q", m.name, bodies[m.name], m.body)
				}
			}
			// After the base: the apt configuration, then the worker, each
			// after its missing parents.
			dirs := append(append([]string(nil), tc.confDirs...), tc.wantDirs...)
			at := func(i int) *tar.Header {
				if i >= len(tc.confDirs) {
					i++ // the apt configuration
				}
				return hdrs[len(tc.base)+i]
			}
			conf := hdrs[len(tc.base)+len(tc.confDirs)]
			if wantName := tc.prefix + "etc/apt/apt.conf.d/90roundtable-sandbox-setup"; conf.Name != wantName || conf.Typeflag != tar.TypeReg || conf.Mode != 0o644 || conf.Uid != 0 || conf.Gid != 0 ||
				bodies[wantName] != AptConf || !strings.Contains(AptConf, `APT::Sandbox::User "root";`) {
				t.Errorf("apt configuration member: got %q type %q mode %o %d:%d body %q, want %q regular 0644 0:0", conf.Name, conf.Typeflag, conf.Mode, conf.Uid, conf.Gid, bodies[conf.Name], wantName)
			}
			for i, d := range dirs {
				h := at(i)
				if h.Name != d || h.Typeflag != tar.TypeDir || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 {
					t.Errorf("appended dir %d: got %q type %q mode %o %d:%d, want %q dir 0755 0:0", i, h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, d)
				}
			}
			w := hdrs[len(hdrs)-1]
			wantName := tc.prefix + "usr/lib/roundtable-sandbox/sandbox-worker"
			if w.Name != wantName || w.Typeflag != tar.TypeReg || w.Mode != 0o755 || w.Uid != 0 || w.Gid != 0 || w.Uname != "root" || w.Gname != "root" {
				t.Errorf("worker member: got %q type %q mode %o %d:%d %s:%s, want %q regular 0755 0:0 root:root", w.Name, w.Typeflag, w.Mode, w.Uid, w.Gid, w.Uname, w.Gname, wantName)
			}
			if !w.ModTime.Equal(mtime) {
				t.Errorf("worker mtime %v, want %v", w.ModTime, mtime)
			}
			if bodies[wantName] != string(worker) {
				t.Errorf("worker body differs (%d bytes, want %d)", len(bodies[wantName]), len(worker))
			}
		})
	}
}

func TestAppendWorkerRefusesABaseHoldingThePath(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    member
	}{
		{"the worker itself", member{name: "./usr/lib/roundtable-sandbox/sandbox-worker", typ: tar.TypeReg, mode: 0o755, body: "old"}},
		{"absolute name", member{name: "/usr/lib/roundtable-sandbox/sandbox-worker", typ: tar.TypeReg, mode: 0o755}},
		{"uncleaned name", member{name: "usr//lib/./roundtable-sandbox/sandbox-worker", typ: tar.TypeReg, mode: 0o755}},
		{"worker as symlink", member{name: "./usr/lib/roundtable-sandbox/sandbox-worker", typ: tar.TypeSymlink, linkname: "/bin/sh"}},
		{"worker as directory", member{name: "./usr/lib/roundtable-sandbox/sandbox-worker/", typ: tar.TypeDir, mode: 0o755}},
		{"parent symlinked away", member{name: "./usr/lib/roundtable-sandbox", typ: tar.TypeSymlink, linkname: "/etc"}},
		{"usr a symlink", member{name: "./usr", typ: tar.TypeSymlink, linkname: "/tmp"}},
		{"parent a file", member{name: "./usr/lib/roundtable-sandbox", typ: tar.TypeReg, mode: 0o644}},
		{"the apt configuration", member{name: "./etc/apt/apt.conf.d/90roundtable-sandbox-setup", typ: tar.TypeReg, mode: 0o644, body: "APT::Sandbox::User \"_apt\";"}},
		{"apt.conf.d symlinked away", member{name: "./etc/apt/apt.conf.d", typ: tar.TypeSymlink, linkname: "/tmp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := append(append([]member(nil), baseMembers...), tc.m)
			err := appendWorker(&bytes.Buffer{}, bytes.NewReader(makeTar(t, base)), fakeELF(false), time.Now())
			if !errors.Is(err, ErrBaseHoldsWorker) {
				t.Fatalf("got %v, want ErrBaseHoldsWorker", err)
			}
		})
	}
}

func TestAppendWorkerRefusesBrokenBases(t *testing.T) {
	good := makeTar(t, baseMembers)
	for _, tc := range []struct {
		name, want string
		base       []byte
	}{
		{"empty tar", "no members", makeTar(t, nil)},
		{"not a tar", "reading the base tar", bytes.Repeat([]byte("garbage!"), 200)},
		{"cut inside a member", "copying member", good[:bytes.Index(good, []byte("root:x"))+5]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := appendWorker(&bytes.Buffer{}, bytes.NewReader(tc.base), fakeELF(false), time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCopyBaseReadsThePackagesFile(t *testing.T) {
	base := append(append([]member(nil), baseMembers...),
		member{name: "./usr/lib/roundtable-sandbox/", typ: tar.TypeDir, mode: 0o755},
		member{name: "./usr/lib/roundtable-sandbox/toolbox-packages", typ: tar.TypeReg, mode: 0o644, body: "bash=5.2.15-2+b7\npython3=3.11.2-1+b1\n"})
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	s, err := copyBase(tw, bytes.NewReader(makeTar(t, base)))
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if got, err := packagesLabel(s.packages); err != nil || got != "bash=5.2.15-2+b7,python3=3.11.2-1+b1" {
		t.Errorf("packages label %q, %v", got, err)
	}
	// The file was read for the label and still copied whole.
	_, bodies := readTar(t, &out)
	if bodies["./usr/lib/roundtable-sandbox/toolbox-packages"] != base[len(base)-1].body {
		t.Errorf("packages file not copied unchanged: %q", bodies["./usr/lib/roundtable-sandbox/toolbox-packages"])
	}

	big := append(append([]member(nil), baseMembers...),
		member{name: "./usr/lib/roundtable-sandbox/toolbox-packages", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("a", maxPackagesFile+1)})
	if _, err := copyBase(nil, bytes.NewReader(makeTar(t, big))); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("an oversized packages file: got %v, want a refusal", err)
	}
}
