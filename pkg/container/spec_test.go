package container

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

const testTurn = "0123456789abcdef0123456789abcdef"

func validSpec(t *testing.T) Spec {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, turn := filepath.Join(root, "ws"), filepath.Join(root, "turn")
	for _, d := range []string{ws, turn} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	name, _ := ids.ContainerName("guild:1", testTurn)
	return Spec{
		Name: name, Image: "roundtable-sandbox-worker:latest", UID: 1000, GID: 1000,
		WorkspaceDir: ws, TurnDir: turn,
		MemoryMB: 512, CPUs: 1, Pids: 64, TmpfsMB: 64,
		LogTag: ids.LogTag("guild:1"),
		Labels: map[string]string{
			layout.LabelInstallation: "default",
			layout.LabelTurn:         testTurn,
			layout.LabelChannel:      "guild:1",
			layout.LabelDeadline:     "1764410000",
		},
	}
}

func TestValidate(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 } // as if run by the host user
	t.Cleanup(func() { processIDs = old })
	base := validSpec(t)
	if err := base.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	link := filepath.Join(filepath.Dir(base.WorkspaceDir), "link")
	if err := os.Symlink(base.WorkspaceDir, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(base.WorkspaceDir), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	labels := func(k, v string) func(*Spec) {
		return func(s *Spec) {
			l := map[string]string{}
			for a, b := range s.Labels {
				l[a] = b
			}
			if v == "\x00delete" {
				delete(l, k)
			} else {
				l[k] = v
			}
			s.Labels = l
		}
	}
	tests := []struct {
		name    string
		mutate  func(*Spec)
		sockets []string
	}{
		{"root uid", func(s *Spec) { s.UID = 0 }, nil},
		{"root gid", func(s *Spec) { s.GID = 0 }, nil},
		{"negative uid", func(s *Spec) { s.UID = -1 }, nil},
		{"the process's own uid", func(s *Spec) { s.UID = 990 }, nil},
		{"the process's own gid", func(s *Spec) { s.GID = 990 }, nil},
		{"name without prefix", func(s *Spec) { s.Name = "other-0123456789abcdef-01234567" }, nil},
		{"name with path", func(s *Spec) { s.Name = "roundtable-sandbox-../../x" }, nil},
		{"name of another turn", func(s *Spec) { s.Name = ids.ContainerPrefix + "0123456789abcdef-ffffffff" }, nil},
		{"empty image", func(s *Spec) { s.Image = "" }, nil},
		{"image with space", func(s *Spec) { s.Image = "a b" }, nil},
		{"image option-like", func(s *Spec) { s.Image = "-x" }, nil},
		{"zero memory (unlimited)", func(s *Spec) { s.MemoryMB = 0 }, nil},
		{"huge memory", func(s *Spec) { s.MemoryMB = MaxMemoryMB + 1 }, nil},
		{"zero cpus", func(s *Spec) { s.CPUs = 0 }, nil},
		{"NaN cpus", func(s *Spec) { s.CPUs = math.NaN() }, nil},
		{"zero pids (unlimited)", func(s *Spec) { s.Pids = 0 }, nil},
		{"negative pids", func(s *Spec) { s.Pids = -1 }, nil},
		{"zero tmpfs", func(s *Spec) { s.TmpfsMB = 0 }, nil},
		{"huge tmpfs", func(s *Spec) { s.TmpfsMB = MaxTmpfsMB + 1 }, nil},
		{"bad runtime", func(s *Spec) { s.Runtime = "runsc --debug" }, nil},
		{"log tag without prefix", func(s *Spec) { s.LogTag = "guild:1" }, nil},
		{"log tag bad tag", func(s *Spec) { s.LogTag = "sandbox/a b" }, nil},
		{"relative workspace", func(s *Spec) { s.WorkspaceDir = "ws" }, nil},
		{"unclean workspace", func(s *Spec) { s.WorkspaceDir += "/../ws" }, nil},
		{"root workspace", func(s *Spec) { s.WorkspaceDir = "/" }, nil},
		{"symlinked workspace", func(s *Spec) { s.WorkspaceDir = link }, nil},
		{"missing turn dir", func(s *Spec) { s.TurnDir += "-missing" }, nil},
		{"file as turn dir", func(s *Spec) { s.TurnDir = file }, nil},
		{"same dirs", func(s *Spec) { s.TurnDir = s.WorkspaceDir }, nil},
		{"nested dirs", func(s *Spec) { s.TurnDir = filepath.Dir(s.WorkspaceDir) }, nil},
		{"docker socket inside", func(s *Spec) {}, []string{"SELF/docker.sock"}},
		{"missing installation", labels(layout.LabelInstallation, "\x00delete"), nil},
		{"bad installation", labels(layout.LabelInstallation, "Bad Install"), nil},
		{"missing turn", labels(layout.LabelTurn, "\x00delete"), nil},
		{"bad turn", labels(layout.LabelTurn, "../x"), nil},
		{"bad channel tag", labels(layout.LabelChannel, "a b"), nil},
		{"zero deadline", labels(layout.LabelDeadline, "0"), nil},
		{"text deadline", labels(layout.LabelDeadline, "soon"), nil},
		{"control label", labels("x", "a\nb"), nil},
		{"long label", labels("x", strings.Repeat("a", maxLabelVal+1)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.mutate(&s)
			var socks []string
			for _, sock := range tt.sockets {
				socks = append(socks, strings.Replace(sock, "SELF", s.WorkspaceDir, 1))
			}
			if err := s.Validate(socks...); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Validate() = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

func TestConfigs(t *testing.T) {
	s := validSpec(t)
	s.Runtime = "runsc"
	cfg, hc := s.configs("")
	checks := []struct {
		field     string
		got, want any
	}{
		{"User", cfg.User, "1000:1000"},
		{"Env", strings.Join(cfg.Env, " "), "SANDBOX_BROKER_SOCKET=/run/broker/broker.sock SANDBOX_API_KEY=sandbox-dummy-key"},
		{"AttachStdin", cfg.AttachStdin, true},
		{"AttachStdout", cfg.AttachStdout, true},
		{"OpenStdin", cfg.OpenStdin, true},
		{"StdinOnce", cfg.StdinOnce, true},
		{"Tty", cfg.Tty, false},
		{"WorkingDir", cfg.WorkingDir, "/workspace"},
		{"Cmd", len(cfg.Cmd), 0},
		{"NetworkMode", string(hc.NetworkMode), "none"},
		{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
		{"CapDrop", strings.Join(hc.CapDrop, ","), "ALL"},
		{"SecurityOpt", strings.Join(hc.SecurityOpt, ","), "no-new-privileges"},
		{"Memory", hc.Memory, int64(512 << 20)},
		{"MemorySwap", hc.MemorySwap, int64(512 << 20)},
		{"NanoCPUs", hc.NanoCPUs, int64(1e9)},
		{"PidsLimit", *hc.PidsLimit, int64(64)},
		{"Tmpfs", hc.Tmpfs["/tmp"], "size=64m,mode=1777,nosuid,nodev,noexec"},
		{"Binds", len(hc.Binds), 0},
		{"Mounts", len(hc.Mounts), 2},
		{"LogConfig.Type", hc.LogConfig.Type, "none"},
		{"LogConfig.Config", len(hc.LogConfig.Config), 0},
		{"AttachStderr", cfg.AttachStderr, true},
		{"IpcMode", string(hc.IpcMode), "none"},
		{"Init", hc.Init != nil && !*hc.Init, true},
		{"Ulimits", fmt.Sprint(hc.Ulimits), "[nofile=1024:1024 nproc=64:64]"},
		{"ShmSize", hc.ShmSize, int64(0)},
		{"Runtime", hc.Runtime, "runsc"},
		{"AutoRemove", hc.AutoRemove, false},
		{"Labels", len(cfg.Labels), 4},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: s.WorkspaceDir, Target: "/workspace", ReadOnly: false},
		{Type: mount.TypeBind, Source: s.TurnDir, Target: "/run/broker", ReadOnly: true},
	}
	for i, m := range hc.Mounts {
		if m.Type != want[i].Type || m.Source != want[i].Source || m.Target != want[i].Target || m.ReadOnly != want[i].ReadOnly ||
			m.BindOptions == nil || m.BindOptions.Propagation != mount.PropagationRPrivate {
			t.Errorf("mount %d = %+v, want %+v rprivate", i, m, want[i])
		}
	}
	// The labels are copied: a caller mutating its map later changes nothing.
	s.Labels["x"] = "y"
	if _, ok := cfg.Labels["x"]; ok {
		t.Error("configs shares the caller's label map")
	}
	s.CPUs = 0.5
	if _, hc := s.configs(""); hc.NanoCPUs != 500_000_000 {
		t.Errorf("NanoCPUs(0.5) = %d, want 500000000", hc.NanoCPUs)
	}
}

func TestBoundedWriter(t *testing.T) {
	w := &boundedWriter{max: 5}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatalf("Write(abc) = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("de")); n != 2 || err != nil {
		t.Fatalf("Write(de) at the bound = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("f")); n != 0 || !errors.Is(err, errStdoutLimit) {
		t.Fatalf("Write(f) over the bound = %d, %v; want 0, errStdoutLimit", n, err)
	}
	if string(w.buf) != "abcde" {
		t.Errorf("buf = %q, want abcde", w.buf)
	}
}

func TestNewRefusesRemoteHosts(t *testing.T) {
	for _, host := range []string{"tcp://127.0.0.1:2375", "ssh://x", "unix://relative"} {
		if d, err := New(host); !errors.Is(err, ErrUnsupportedHost) {
			if d != nil {
				d.Close()
			}
			t.Errorf("New(%q) = %v, want ErrUnsupportedHost", host, err)
		}
	}
	d, err := New("unix:///nonexistent/docker.sock")
	if err != nil {
		t.Fatalf("New(unix socket) = %v", err)
	}
	defer d.Close()
	if !strings.Contains(strings.Join(d.sockets, " "), "/nonexistent/docker.sock") {
		t.Errorf("daemon socket %v not in the refused bind sources", d.sockets)
	}
}
