package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// Env describes the process the configuration is checked against, so the
// checks are pure functions of it and testable without being root or not.
type Env struct {
	UID, GID int
	GOOS     string
	// LookupGroup resolves a group name to its gid.
	LookupGroup func(name string) (int, error)
}

// ProcessEnv is the running process.
func ProcessEnv() Env {
	return Env{UID: os.Getuid(), GID: os.Getgid(), GOOS: runtime.GOOS, LookupGroup: lookupGroup}
}

func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// ResolvedAccess is the api section with group names resolved to gids.
type ResolvedAccess struct {
	ClientUIDs, ClientGIDs []int
	AdminUIDs, AdminGIDs   []int
	// Guests is the container id range: never a client or admin.
	Guests Guests
}

// ResolveAccess resolves api.*.groups; an unknown group is a refusal naming its key.
func (c *Config) ResolveAccess(env Env) (ResolvedAccess, error) {
	var r ResolvedAccess
	var errs []error
	resolve := func(key string, names []string) []int {
		var gids []int
		for i, n := range names {
			gid, err := env.LookupGroup(n)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.groups[%d]: unknown group %q (create it or remove it from the list): %w", key, i, n, ErrInvalid))
				continue
			}
			gids = append(gids, gid)
		}
		return gids
	}
	r.ClientUIDs = append([]int(nil), c.API.Clients.UIDs...)
	r.AdminUIDs = append([]int(nil), c.API.Admins.UIDs...)
	r.ClientGIDs = resolve("api.clients", c.API.Clients.Groups)
	r.AdminGIDs = resolve("api.admins", c.API.Admins.Groups)
	r.Guests = c.Guests
	return r, errors.Join(errs...)
}

// EnsureDirs creates missing roots (mode 0700, policyDir 0750) and the state
// directory, as the seeds did; existing ones are left for CheckHost to judge.
func (c *Config) EnsureDirs() error {
	for _, d := range []struct {
		p    string
		mode os.FileMode
	}{{c.RunRoot, 0o700}, {c.WorkspaceRoot, 0o700}, {c.PolicyDir, 0o750}, {filepath.Dir(c.StateFile), 0o700}} {
		if _, err := os.Lstat(d.p); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(d.p, d.mode); err != nil {
				return fmt.Errorf("create %s: %w", d.p, err)
			}
			if err := os.Chmod(d.p, d.mode); err != nil { // umask
				return fmt.Errorf("chmod %s: %w", d.p, err)
			}
		}
	}
	return nil
}

// CheckHost applies the startup refusals that depend on the process and the
// filesystem (DESIGN.md section 2). It returns every refusal, each naming the
// key or path it is about.
func (c *Config) CheckHost(env Env) error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", key, fmt.Sprintf(format, a...), ErrInvalid))
	}
	if env.GOOS != "linux" {
		bad("host", "a native Linux host is required, this is %s", env.GOOS)
	}
	if env.UID == 0 || env.GID == 0 {
		bad("host", "refusing to run as root (uid %d gid %d); run as the service user _sandbox", env.UID, env.GID)
	}
	if c.UID != 0 && c.UID != env.UID {
		bad("uid", "configured %d differs from the process uid %d; it names the host process's own uid", c.UID, env.UID)
	}
	if c.GID != 0 && c.GID != env.GID {
		bad("gid", "configured %d differs from the process gid %d; it names the host process's own gid", c.GID, env.GID)
	}
	if c.Guests.IsGuest(env.UID) || c.Guests.IsGuest(env.GID) {
		bad("guests.uidBase", "the range %d..%d holds the host's own uid %d or gid %d; guests must never share the family's ids", c.Guests.UIDBase, c.Guests.UIDBase+c.Guests.UIDCount-1, env.UID, env.GID)
	}
	real := map[string]string{}
	for _, d := range []struct {
		key, p  string
		allowed os.FileMode // permission bits allowed besides the owner's
	}{
		{"runRoot", c.RunRoot, 0},
		{"workspaceRoot", c.WorkspaceRoot, 0},
		{"policyDir", c.PolicyDir, 0o050}, // group _sandbox-broker reads policies
		{"stateFile", filepath.Dir(c.StateFile), 0},
	} {
		st, err := os.Lstat(d.p)
		if err != nil {
			bad(d.key, "%s: %v (install -d -m 0700 -o _sandbox %s)", d.p, err, d.p)
			continue
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			bad(d.key, "%s is a symlink; use a dedicated directory", d.p)
			continue
		case !st.IsDir():
			bad(d.key, "%s is not a directory", d.p)
			continue
		case sys == nil || int(sys.Uid) != env.UID:
			bad(d.key, "%s must be owned by the service user (uid %d)", d.p, env.UID)
		}
		if extra := st.Mode().Perm() &^ 0o700 &^ d.allowed; extra != 0 {
			bad(d.key, "%s has mode %04o; group/other permissions are refused (want %04o)", d.p, st.Mode().Perm(), 0o700|d.allowed)
		}
		if r, err := filepath.EvalSymlinks(d.p); err == nil {
			real[d.key] = r
		}
	}
	run, ws := real["runRoot"], real["workspaceRoot"]
	if run != "" && ws != "" && (within(run, ws) || within(ws, run)) {
		bad("runRoot", "%s and workspaceRoot %s resolve into each other", run, ws)
	}
	if st := real["stateFile"]; st != "" {
		for _, k := range []string{"runRoot", "workspaceRoot"} {
			if r := real[k]; r != "" && within(st, r) {
				bad("stateFile", "%s resolves inside %s %s", c.StateFile, k, r)
			}
		}
	}
	dockerRoot := c.DockerDataRoot
	if r, err := filepath.EvalSymlinks(dockerRoot); err == nil {
		dockerRoot = r
	}
	for _, k := range []string{"runRoot", "workspaceRoot"} {
		if r := real[k]; r != "" && within(r, dockerRoot) {
			bad(k, "%s resolves inside Docker's data directory %s", r, dockerRoot)
		}
	}
	if _, err := c.ResolveAccess(env); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
