// Package ids validates every identifier before it becomes a systemd unit
// name, a container name, a label or a file name. Nothing outside this package
// builds such a name from an unchecked string.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is the category of every validation failure in this package.
var ErrInvalid = errors.New("invalid identifier")

// TurnIDLen is the length of a turn id: 128 random bits as lowercase hex.
const TurnIDLen = 32

// MaxChannelLen bounds a channel key in characters.
const MaxChannelLen = 256

var (
	turnRe    = regexp.MustCompile(`^[0-9a-f]{32}$`)
	tagRe     = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	installRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
)

// NewTurnID returns a fresh random turn id.
func NewTurnID() string {
	var b [TurnIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("ids: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// ValidTurnID checks a turn id against its strict alphabet.
func ValidTurnID(id string) error {
	if !turnRe.MatchString(id) {
		return fmt.Errorf("turn id must be %d lowercase hex digits: %w", TurnIDLen, ErrInvalid)
	}
	return nil
}

// ValidChannel checks a channel key: 1..256 printable characters of valid
// UTF-8 that are not an internal name (Internal). The key is never used as
// a path; it is hashed for every file name.
func ValidChannel(key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	if Internal(key) {
		return fmt.Errorf("channel %s: %w", reservedWhy, ErrInvalid)
	}
	return nil
}

func validKey(key string) error {
	if key == "" || !utf8.ValidString(key) || utf8.RuneCountInString(key) > MaxChannelLen {
		return fmt.Errorf("channel must be 1 to %d characters of UTF-8: %w", MaxChannelLen, ErrInvalid)
	}
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("channel must contain only printable characters: %w", ErrInvalid)
		}
	}
	return nil
}

// Internal names: the host's own entries in the places a channel key also
// names (the queue, the state file's guest uids, channel tags and so
// journal tags, policy identities). ValidChannel refuses every key of
// these forms, so no channel shares a run's queue entry or journal tag
// (sandbox/run-<id>, documented) or a slot's guest uid.
const (
	// RunPrefix + a run id: a run's queue entry, pseudo channel and tag.
	RunPrefix = "run-"
	// PrecheckPrefix + a precheck id: a precheck's queue entry.
	PrecheckPrefix = "precheck-"
	// JobPrefix + a job id: a delegated job's queue entry.
	JobPrefix = "job-"
	// PreflightChannel is the pseudo channel of the sample turn that
	// checks the configuration at start.
	PreflightChannel = "sandbox:preflight"

	// SessionPrefix + a session id: a session's pseudo channel and tag
	// (its journal identifier sandbox/session-<id>).
	SessionPrefix = "session-"

	runSlotPrefix      = "sandbox-run-slot/"
	precheckSlotPrefix = "sandbox-precheck-slot/"
	sessionSlotPrefix  = "sandbox-session-slot/"
	reservedWhy        = "must not take the form of an internal name (run-, precheck-, job- or session- and 32 hex digits; sandbox-run-slot/..., sandbox-precheck-slot/..., sandbox-session-slot/..., sandbox:preflight)"
)

// RunName is a run's pseudo channel, queue entry and tag: run-<id>.
func RunName(id string) string { return RunPrefix + id }

// PrecheckName is a precheck's queue entry: precheck-<id>.
func PrecheckName(id string) string { return PrecheckPrefix + id }

// JobName is a delegated job's queue entry: job-<id>.
func JobName(id string) string { return JobPrefix + id }

// SessionName is a session's pseudo channel and tag: session-<id>.
func SessionName(id string) string { return SessionPrefix + id }

// SessionSlot names the guest-uid record of session slot k.
func SessionSlot(k int) string { return sessionSlotPrefix + strconv.Itoa(k) }

// RunSlot names the guest-uid record of run slot k.
func RunSlot(k int) string { return runSlotPrefix + strconv.Itoa(k) }

// PrecheckSlot names the guest-uid record of precheck slot k.
func PrecheckSlot(k int) string { return precheckSlotPrefix + strconv.Itoa(k) }

// Internal reports whether key takes the form of an internal name. The
// run, precheck and job forms need a whole turn id after the prefix (ids
// are always one), so a channel such as "run-club" stays valid; the slot
// records and the preflight channel are reserved as whole prefixes.
func Internal(key string) bool {
	for _, p := range []string{RunPrefix, PrecheckPrefix, JobPrefix, SessionPrefix} {
		if id, ok := strings.CutPrefix(key, p); ok && turnRe.MatchString(id) {
			return true
		}
	}
	return key == PreflightChannel || strings.HasPrefix(key, runSlotPrefix) || strings.HasPrefix(key, precheckSlotPrefix) || strings.HasPrefix(key, sessionSlotPrefix)
}

// ValidName checks what may be a channel key or an internal name: a
// policy's identity channel, a guest-uid record of the state file.
func ValidName(key string) error { return validKey(key) }

// ValidInstallation checks an installation id (used in container labels).
func ValidInstallation(id string) error {
	if !installRe.MatchString(id) {
		return fmt.Errorf("installation must match %s: %w", installRe, ErrInvalid)
	}
	return nil
}

// ChannelHash is the hex sha256 of a channel key: the workspace directory name.
func ChannelHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ChannelTag is the channel's journald tag suffix: the key itself when it is
// short and plain, otherwise the first 16 hex digits of its hash.
func ChannelTag(key string) string {
	if tagRe.MatchString(key) {
		return key
	}
	return ChannelHash(key)[:16]
}

// ValidChannelTag checks a tag as produced by ChannelTag.
func ValidChannelTag(tag string) error {
	if !tagRe.MatchString(tag) {
		return fmt.Errorf("channel tag must match %s: %w", tagRe, ErrInvalid)
	}
	return nil
}

// LogTag is the journald SYSLOG_IDENTIFIER of a channel's worker lines.
func LogTag(key string) string { return "sandbox/" + ChannelTag(key) }

// ContainerPrefix starts every container name of this family.
const ContainerPrefix = "roundtable-sandbox-"

// ContainerName is roundtable-sandbox-<16 hex of channel hash>-<8 of turn id>.
func ContainerName(channel, turnID string) (string, error) {
	if err := ValidTurnID(turnID); err != nil {
		return "", err
	}
	return ContainerPrefix + ChannelHash(channel)[:16] + "-" + turnID[:8], nil
}

const (
	brokerUnitPrefix = "sandbox-broker@"
	// BrokerUnitPattern matches every broker unit for D-Bus listing.
	BrokerUnitPattern = "sandbox-broker@*"
)

// BrokerSocketUnit is the socket unit of one turn's broker.
func BrokerSocketUnit(turnID string) (string, error) {
	if err := ValidTurnID(turnID); err != nil {
		return "", err
	}
	return brokerUnitPrefix + turnID + ".socket", nil
}

// BrokerServiceUnit is the service unit of one turn's broker.
func BrokerServiceUnit(turnID string) (string, error) {
	if err := ValidTurnID(turnID); err != nil {
		return "", err
	}
	return brokerUnitPrefix + turnID + ".service", nil
}

// CredsetUnit is the unit that copies one turn's broker credentials
// (sandbox-credset@<turn>.service, pulled in by the broker service).
func CredsetUnit(turnID string) (string, error) {
	if err := ValidTurnID(turnID); err != nil {
		return "", err
	}
	return "sandbox-credset@" + turnID + ".service", nil
}

// ParseBrokerUnit returns the turn id of a broker unit name, or false when the
// name is not exactly sandbox-broker@<turn id>.socket|service.
func ParseBrokerUnit(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, brokerUnitPrefix)
	if !ok {
		return "", false
	}
	for _, suffix := range []string{".socket", ".service"} {
		if id, ok := strings.CutSuffix(rest, suffix); ok && ValidTurnID(id) == nil {
			return id, true
		}
	}
	return "", false
}
