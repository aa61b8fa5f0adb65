package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testOwner is the uid that owns the temp roots: when the tests run as root
// the roots are handed to an unprivileged uid so the "not root" check can pass.
func testOwner(t *testing.T) (uid, gid int) {
	if os.Getuid() == 0 {
		return 4242, 4242
	}
	return os.Getuid(), os.Getgid()
}

func hostConfig(t *testing.T) (*Config, Env) {
	t.Helper()
	dir := t.TempDir()
	uid, gid := testOwner(t)
	c, err := Load(write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	c.RunRoot = filepath.Join(dir, "run")
	c.WorkspaceRoot = filepath.Join(dir, "ws")
	c.PolicyDir = filepath.Join(dir, "pol")
	c.StateFile = filepath.Join(dir, "state", "channels.json")
	c.LockFile = filepath.Join(dir, "host.lock")
	if err := c.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{c.RunRoot, c.WorkspaceRoot, c.PolicyDir, filepath.Dir(c.StateFile)} {
		if err := os.Chown(d, uid, gid); err != nil && os.Getuid() == 0 {
			t.Fatal(err)
		}
	}
	env := Env{UID: uid, GID: gid, GOOS: "linux", LookupGroup: func(name string) (int, error) {
		if name == "sandbox-clients" {
			return 999, nil
		}
		return 0, errors.New("unknown group")
	}}
	return c, env
}

func TestCheckHostAccepts(t *testing.T) {
	c, env := hostConfig(t)
	if err := c.CheckHost(env); err != nil {
		t.Fatalf("CheckHost: %v", err)
	}
	acc, err := c.ResolveAccess(env)
	if err != nil || len(acc.ClientGIDs) != 1 || acc.ClientGIDs[0] != 999 {
		t.Errorf("ResolveAccess = %+v, %v", acc, err)
	}
}

func TestCheckHostRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, c *Config, env *Env)
		want   string
	}{
		{"root", func(t *testing.T, c *Config, env *Env) { env.UID = 0 }, "refusing to run as root"},
		{"non-linux", func(t *testing.T, c *Config, env *Env) { env.GOOS = "darwin" }, "a native Linux host is required"},
		{"uid differs", func(t *testing.T, c *Config, env *Env) { c.UID = env.UID + 1 }, "uid: configured"},
		{"gid differs", func(t *testing.T, c *Config, env *Env) { c.GID = env.GID + 1 }, "gid: configured"},
		{"host uid in guest range", func(t *testing.T, c *Config, env *Env) { c.Guests = Guests{UIDBase: env.UID, UIDCount: 1} }, "guests.uidBase: the range"},
		{"host gid in guest range", func(t *testing.T, c *Config, env *Env) { c.Guests = Guests{UIDBase: env.GID - 1, UIDCount: 2} }, "guests.uidBase: the range"},
		{"group bits", func(t *testing.T, c *Config, env *Env) { os.Chmod(c.RunRoot, 0o750) }, "runRoot: "},
		{"other bits on workspace", func(t *testing.T, c *Config, env *Env) { os.Chmod(c.WorkspaceRoot, 0o701) }, "group/other permissions are refused"},
		{"policyDir group write", func(t *testing.T, c *Config, env *Env) { os.Chmod(c.PolicyDir, 0o770) }, "policyDir:"},
		{"state dir open", func(t *testing.T, c *Config, env *Env) { os.Chmod(filepath.Dir(c.StateFile), 0o755) }, "stateFile:"},
		{"wrong owner", func(t *testing.T, c *Config, env *Env) { env.UID = env.UID + 7 }, "must be owned by the service user"},
		{"missing", func(t *testing.T, c *Config, env *Env) { c.WorkspaceRoot = c.WorkspaceRoot + "-missing" }, "workspaceRoot: "},
		{"symlink root", func(t *testing.T, c *Config, env *Env) {
			link := c.WorkspaceRoot + "-link"
			os.Symlink(c.WorkspaceRoot, link)
			c.WorkspaceRoot = link
		}, "is a symlink"},
		{"not a dir", func(t *testing.T, c *Config, env *Env) {
			f := c.RunRoot + "-file"
			os.WriteFile(f, nil, 0o600)
			c.RunRoot = f
		}, "is not a directory"},
		{"unknown group", func(t *testing.T, c *Config, env *Env) { c.API.Admins.Groups = []string{"nosuch"} }, `api.admins.groups[0]: unknown group "nosuch"`},
		{"root inside docker dir", func(t *testing.T, c *Config, env *Env) { c.DockerDataRoot = filepath.Dir(c.RunRoot) }, "resolves inside Docker's data directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, env := hostConfig(t)
			tt.mutate(t, c, &env)
			err := c.CheckHost(env)
			if err == nil {
				t.Fatalf("CheckHost accepted, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckHost = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPolicyDirGroupReadable(t *testing.T) {
	c, env := hostConfig(t)
	os.Chmod(c.PolicyDir, 0o750)
	if err := c.CheckHost(env); err != nil {
		t.Errorf("policyDir 0750 refused: %v", err)
	}
}
