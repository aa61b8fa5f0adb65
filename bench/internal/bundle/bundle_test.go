package bundle

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func good() Spec {
	return Spec{Args: []string{"/floor"}, UID: 999, GID: 999, MemoryMB: 512, CPUs: 1, Pids: 64, TmpfsMB: 64,
		Binds: []Bind{{Source: "/srv/ws", Destination: "/workspace"}, {Source: "/srv/turn", Destination: "/run/broker", ReadOnly: true}}}
}

func TestConfigConfinement(t *testing.T) {
	cfg, err := Config(good())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(cfg)
	s := string(data)
	for _, want := range []string{
		`"noNewPrivileges":true`,
		`"readonly":true`,
		`"bounding":[]`,
		`{"type":"network"}`,
		`"limit":536870912,"swap":536870912`,
		`"quota":100000`,
		`"pids":{"limit":64}`,
		`"size=64m"`,
		`"uid":999`,
		`"destination":"/run/broker","options":["rbind","rprivate","nosuid","nodev","ro"]`,
		`"destination":"/workspace","options":["rbind","rprivate","nosuid","nodev","rw"]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %s\n%s", want, s)
		}
	}
}

func TestConfigRefuses(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Spec)
	}{
		{"root uid", func(s *Spec) { s.UID = 0 }},
		{"relative argv0", func(s *Spec) { s.Args = []string{"floor"} }},
		{"no memory limit", func(s *Spec) { s.MemoryMB = 0 }},
		{"relative bind", func(s *Spec) { s.Binds = []Bind{{Source: "ws", Destination: "/workspace"}} }},
	}
	for _, tt := range tests {
		s := good()
		tt.mod(&s)
		if _, err := Config(s); !errors.Is(err, ErrSpec) {
			t.Errorf("%s: err = %v, want ErrSpec", tt.name, err)
		}
	}
}

func TestWriteMakesMountPoints(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, good()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"config.json", "rootfs/proc", "rootfs/tmp", "rootfs/workspace", "rootfs/run/broker"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
}
