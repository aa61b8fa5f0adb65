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
