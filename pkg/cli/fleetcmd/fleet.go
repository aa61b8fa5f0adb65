// Package fleetcmd is sandbox-host's `fleet` command group: sandbox-nats's
// configuration, a box's nkey, and the repair of a channel's fleet state
// (docs/fleet.md), registered into the root command by pkg/cli.
// Guarantee: a configuration or a file it names that is refused exits with
// the root's configuration status (78); a seed file is created 0600 and
// never over an existing file; a repair never prints a channel state's raw
// bytes and is logged, done or refused.
package fleetcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// NATSUser is sandbox-nats.service's own system user (sysusers.d).
const NATSUser = "_sandbox-nats"

// Env is what the group needs of the root command line: its persistent
// flags (read when a command runs, after parsing) and how a refused
// configuration becomes the root's exit status.
type Env struct {
	Config         func() string        // --config
	JSON           func() bool          // --json
	ConnectTimeout func() time.Duration // --connect-timeout
	// ConfigError marks err as a refused configuration (exit 78).
	ConfigError func(err error) error
}

// Command is the `fleet` command group.
func Command(g Env) *cobra.Command {
	c := &cobra.Command{
		Use:   "fleet",
		Short: "The fleet's engine on this box: sandbox-nats's configuration, a box's nkey, a channel's fleet state (docs/fleet.md)",
	}
	c.AddCommand(fleetConfigCmd(g), fleetNkeyCmd(g), fleetChannelCmd(g))
	return c
}

func fleetConfigCmd(g Env) *cobra.Command {
	var runtimeDir, owner string
	c := &cobra.Command{
		Use:   "config",
		Short: "Print the nats-server configuration generated from fleet.*, or prepare sandbox-nats's runtime directory",
		Long: "Without --runtime-dir, prints the configuration sandbox-nats would run from (it holds no secret: the TLS key is named by path,\n" +
			"the encryption key is given apart). With --runtime-dir (sandbox-nats.service's ExecStartPre=, as root), checks the fleet's\n" +
			"files (certificate and key a pair signed by the CA for server and client use, secrets not readable by every user, the\n" +
			"encryption key long enough) and writes private 0600 copies and the configuration there, owned by --owner.\n" +
			"Exits 78 when the configuration or a file named by it is refused.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(g.Config())
			if err != nil {
				return g.ConfigError(err)
			}
			f := cfg.Fleet
			if runtimeDir == "" {
				out, err := fleetnats.ServerConfig(f, fleetnats.TLSFiles{CA: f.TLS.CA, Cert: f.TLS.Cert, Key: f.TLS.Key})
				if err != nil {
					return g.ConfigError(err)
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			u, err := user.Lookup(owner)
			if err != nil {
				return fmt.Errorf("--owner %s: %v (the package's sysusers.d makes %s)", owner, err, NATSUser)
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := fleetnats.PrepareRuntime(f, runtimeDir, uid, gid); err != nil {
				if errors.Is(err, fleetnats.ErrServerConfig) {
					return g.ConfigError(err)
				}
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox-host: fleet: %s prepared for %s (box %s, %d boxes allowed in)\n", runtimeDir, owner, f.Box, len(f.Server.Boxes))
			return nil
		},
	}
	c.Flags().StringVar(&runtimeDir, "runtime-dir", "", "write the server's files into this directory (sandbox-nats.service: "+fleetnats.RuntimeDir+")")
	c.Flags().StringVar(&owner, "owner", NATSUser, "user owning the files written with --runtime-dir")
	return c
}

func fleetNkeyCmd(g Env) *cobra.Command {
	var output, owner string
	c := &cobra.Command{
		Use:   "nkey --output FILE",
		Short: "Make this box's NATS user key: write its seed (0600) and print its public key for fleet.server.boxes",
		Long: "Writes a new user nkey seed to --output (mode 0600, never over an existing file; owned by --owner, the host's user by\n" +
			"default, so that the host can log in with it) and prints the public key (U...), which goes into fleet.server.boxes of\n" +
			"every box's sandbox.yaml. The seed is this box's password: it never leaves the box.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output == "" {
				return errors.New("--output is required (e.g. " + config.FleetDir + "/box.nkey)")
			}
			uid, gid := -1, -1
			if owner != "" {
				u, err := user.Lookup(owner)
				if err != nil {
					return fmt.Errorf("--owner %s: %v", owner, err)
				}
				uid, _ = strconv.Atoi(u.Uid)
				gid, _ = strconv.Atoi(u.Gid)
			}
			pub, err := writeNkeySeed(output, uid, gid)
			if err != nil {
				return err
			}
			if g.JSON() {
				return printJSON(cmd, map[string]any{"ok": true, "nkey": pub, "seedFile": output})
			}
			fmt.Fprintln(cmd.OutOrStdout(), pub)
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox-host: seed written to %s; list this box in fleet.server.boxes of every box: {name: <fleet.box>, nkey: %s}\n", output, pub)
			return nil
		},
	}
	c.Flags().StringVar(&output, "output", "", "seed file to create (it must not exist)")
	c.Flags().StringVar(&owner, "owner", layout.HostUser, "user owning the seed file (empty: the caller)")
	return c
}

// writeNkeySeed creates path (exclusive, no symlink followed, 0600),
// writes a new user seed into it and returns the public key. The seed
// lives in memory only until it is written.
func writeNkeySeed(path string, uid, gid int) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	defer clear(seed)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("%s exists: a box keeps its key (remove the file first to replace it, then update fleet.server.boxes everywhere)", path)
		}
		return "", fmt.Errorf("%s: %v", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	ok := false
	defer func() {
		f.Close()
		if !ok {
			os.Remove(path)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return "", err
	}
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return "", fmt.Errorf("chown %s: %v (run as root, or pass --owner '')", filepath.Base(path), err)
		}
	}
	if _, err := f.Write(seed); err != nil {
		return "", err
	}
	if _, err := f.Write([]byte{'\n'}); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	ok = true
	return pub, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
