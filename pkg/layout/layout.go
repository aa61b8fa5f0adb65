// Package layout names every installed path, label and user of the family in
// one place, so the host, broker, reaper, units and package agree on them.
// Paths built here from ids are only built from ids that package ids accepted.
package layout

import (
	"path/filepath"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// Installed defaults (DESIGN.md section 2).
const (
	ConfigFile     = "/etc/roundtable-sandbox/sandbox.yaml"
	CredentialsDir = "/etc/roundtable-sandbox/credentials"
	StateDir       = "/var/lib/roundtable-sandbox/state"
	StateFile      = "/var/lib/roundtable-sandbox/state/channels.json"
	WorkspaceRoot  = "/var/lib/roundtable-sandbox/workspaces"
	RuntimeDir     = "/run/roundtable-sandbox"
	RunRoot        = "/run/roundtable-sandbox/turns"
	PolicyDir      = "/run/roundtable-sandbox/policies"
	HostSocket     = "/run/roundtable-sandbox/host.sock"
	LockFile       = "/run/roundtable-sandbox/host.lock"
	// ImageArchive is the worker image shipped in the package (docker-archive format).
	ImageArchive = "/usr/lib/roundtable-sandbox/worker-image.tar"
	// DefaultImage is the tag the shipped archive carries.
	DefaultImage = "roundtable-sandbox-worker:latest"
	// DefaultToolboxImage is the tag `sandbox-host toolbox build` gives the
	// code-execution image (DESIGN.md section 12).
	DefaultToolboxImage = "roundtable-sandbox-toolbox:latest"
	// ToolboxWorker is where the toolbox image carries sandbox-worker (the
	// run supervisor and the egress bridge).
	ToolboxWorker = "/usr/lib/roundtable-sandbox/sandbox-worker"
	// EmptyWorkspace is the empty directory a run without a project sees
	// read-only at /workspace.
	EmptyWorkspace = "/var/lib/roundtable-sandbox/empty"

	HostUser   = "_sandbox"
	BrokerUser = "_sandbox-broker"
	// CredsetUser runs sandbox-credset@<turn>.service, the copier of a
	// turn's credentials; its group is the only one that reads
	// CredentialsDir (root:_sandbox-credset 0750, files 0640).
	CredsetUser = "_sandbox-credset"
	// ClientGroup may connect to the host API socket.
	ClientGroup = "sandbox-clients"

	HostService  = "sandbox-host.service"
	ReaperUnit   = "sandbox-reaper.service"
	BrokerBinary = "/usr/bin/sandbox-broker"

	// CredentialLoadID is the ID in sandbox-broker@.service's
	// LoadCredential=<ID>:/etc/roundtable-sandbox/credentials. systemd 252
	// loads every regular file of that directory (recursively, symlinks
	// skipped) and names the file <name> "<ID>_<name>" in
	// $CREDENTIALS_DIRECTORY (measured; a bare path without an ID loads
	// nothing). The broker therefore reads the credential a policy names
	// <name> from $CREDENTIALS_DIRECTORY/CredentialPrefix+<name>.
	CredentialLoadID = "sandbox"
	CredentialPrefix = CredentialLoadID + "_"

	// MaxSocketPath bounds a Unix socket path (sun_path is 108 bytes).
	MaxSocketPath = 100
	// BrokerSocketName is the listening socket's name inside a turn directory.
	BrokerSocketName = "broker.sock"
)

// Container labels (DESIGN.md section 4).
const (
	LabelInstallation = "io.roundtable-sandbox.installation"
	LabelTurn         = "io.roundtable-sandbox.turn"
	LabelChannel      = "io.roundtable-sandbox.channel"  // the channel tag
	LabelDeadline     = "io.roundtable-sandbox.deadline" // unix seconds
	// LabelStandby marks a standby's container with its expiry (unix
	// seconds); its deadline label holds the same until a turn binds it.
	LabelStandby = "io.roundtable-sandbox.standby"
)

// TurnDir is runRoot/<turn>.
func TurnDir(runRoot, turnID string) (string, error) {
	if err := ids.ValidTurnID(turnID); err != nil {
		return "", err
	}
	return filepath.Join(runRoot, turnID), nil
}

// BrokerSocket is runRoot/<turn>/broker.sock.
func BrokerSocket(runRoot, turnID string) (string, error) {
	dir, err := TurnDir(runRoot, turnID)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, BrokerSocketName), nil
}

// PolicyFile is policyDir/<turn>.json.
func PolicyFile(policyDir, turnID string) (string, error) {
	if err := ids.ValidTurnID(turnID); err != nil {
		return "", err
	}
	return filepath.Join(policyDir, turnID+".json"), nil
}

// WorkspaceDir is workspaceRoot/<sha256(channel)>.
func WorkspaceDir(workspaceRoot, channel string) (string, error) {
	if err := ids.ValidChannel(channel); err != nil {
		return "", err
	}
	return filepath.Join(workspaceRoot, ids.ChannelHash(channel)), nil
}
