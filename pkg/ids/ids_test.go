package ids

import (
	"strings"
	"testing"
)

func TestTurnID(t *testing.T) {
	id := NewTurnID()
	if err := ValidTurnID(id); err != nil {
		t.Fatalf("NewTurnID() = %q, invalid: %v", id, err)
	}
	if NewTurnID() == id {
		t.Fatal("two turn ids are equal")
	}
	for _, bad := range []string{"", "../etc", strings.Repeat("A", 32), strings.Repeat("a", 31), strings.Repeat("a", 33), "0123456789abcdef0123456789abcdeg"} {
		if ValidTurnID(bad) == nil {
			t.Errorf("ValidTurnID(%q) = nil, want error", bad)
		}
	}
}

func TestChannel(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
		tag string
	}{
		{"guild:1234", true, "guild:1234"},
		{"a b", true, ChannelHash("a b")[:16]},
		{"../../etc/passwd", true, ChannelHash("../../etc/passwd")[:16]},
		{"", false, ""},
		{"x\x00y", false, ""},
		{"x\ny", false, ""},
		{strings.Repeat("é", 256), true, ChannelHash(strings.Repeat("é", 256))[:16]},
		{strings.Repeat("é", 257), false, ""},
		// Internal names are refused; look-alikes that no internal name
		// takes stay valid.
		{"run-" + strings.Repeat("a", 32), false, ""},
		{"precheck-0123456789abcdef0123456789abcdef", false, ""},
		{"job-0123456789abcdef0123456789abcdef", false, ""},
		{"sandbox-run-slot/0", false, ""},
		{"sandbox-precheck-slot/0", false, ""},
		{"sandbox-run-slot/", false, ""},
		{"sandbox:preflight", false, ""},
		{"run-club", true, "run-club"},
		{"run-" + strings.Repeat("A", 32), true, "run-" + strings.Repeat("A", 32)},
		{"run-" + strings.Repeat("a", 31), true, "run-" + strings.Repeat("a", 31)},
		{"job-" + strings.Repeat("a", 32) + "x", true, "job-" + strings.Repeat("a", 32) + "x"},
		{"sandbox-run-slot", true, "sandbox-run-slot"},
		{"sandbox:preflight2", true, "sandbox:preflight2"},
	}
	for _, tt := range tests {
		err := ValidChannel(tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("ValidChannel(%q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
		if tt.ok {
			if got := ChannelTag(tt.key); got != tt.tag {
				t.Errorf("ChannelTag(%q) = %q, want %q", tt.key, got, tt.tag)
			}
			if err := ValidChannelTag(ChannelTag(tt.key)); err != nil {
				t.Errorf("ChannelTag(%q) not valid: %v", tt.key, err)
			}
		}
	}
}

func TestUnitNames(t *testing.T) {
	id := NewTurnID()
	sock, err := BrokerSocketUnit(id)
	if err != nil || sock != "sandbox-broker@"+id+".socket" {
		t.Fatalf("BrokerSocketUnit = %q, %v", sock, err)
	}
	if got, ok := ParseBrokerUnit(sock); !ok || got != id {
		t.Errorf("ParseBrokerUnit(%q) = %q, %v", sock, got, ok)
	}
	for _, bad := range []string{"sandbox-broker@x.socket", "sandbox-broker@" + id + ".timer", "other@" + id + ".service", "sandbox-broker@" + id} {
		if _, ok := ParseBrokerUnit(bad); ok {
			t.Errorf("ParseBrokerUnit(%q) ok, want refused", bad)
		}
	}
	if _, err := BrokerServiceUnit("evil;name"); err == nil {
		t.Error("BrokerServiceUnit accepted an invalid id")
	}
	name, err := ContainerName("guild:1", id)
	if err != nil || name != "roundtable-sandbox-"+ChannelHash("guild:1")[:16]+"-"+id[:8] {
		t.Errorf("ContainerName = %q, %v", name, err)
	}
}

// Every internal name the host builds is refused as a channel key (so no
// channel shares its queue entry, tag or guest uid) and accepted by
// ValidName (where the host uses it: policies, the state's guest uids).
func TestInternalNamesAreNoChannelKeys(t *testing.T) {
	id := NewTurnID()
	names := []string{RunName(id), PrecheckName(id), JobName(id), RunSlot(0), RunSlot(63), PrecheckSlot(0), PrecheckSlot(7), PreflightChannel}
	for _, n := range names {
		if !Internal(n) {
			t.Errorf("Internal(%q) = false, want true", n)
		}
		if err := ValidChannel(n); err == nil {
			t.Errorf("ValidChannel(%q) = nil, want refused", n)
		}
		if err := ValidName(n); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", n, err)
		}
	}
	if got := LogTag(RunName(id)); got != "sandbox/run-"+id {
		t.Errorf("a run's journal tag is %q, want sandbox/run-%s", got, id)
	}
	for _, bad := range []string{"", "x\ny"} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) = nil, want refused", bad)
		}
	}
}
