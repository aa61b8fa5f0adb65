package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"io"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// The sealed turn's standbys are tested beside it (pkg/sealedturn); what
// stays here is the host's side of them: the channel status and the
// /v1/turns listing show a kind's standby, and a mode change through the
// API reaches the kind.

// newWarmRig is a rig whose driver supports standbys; channel "c" is on.
func newWarmRig(t *testing.T, extra string) (*rig, *sandboxtest.WarmDocker) {
	t.Helper()
	var w *sandboxtest.WarmDocker
	r := newRig(t, extra, func(o *Options) {
		w = sandboxtest.NewWarmDocker(o.Containers.(*fakeDocker))
		o.Containers = w
	})
	must(t, r.h.state.SetMode("c", ModeOn))
	t.Cleanup(r.h.Shutdown)
	return r, w
}

func waitStandby(t *testing.T, r *rig, channel, want string) apiwire.Channel {
	t.Helper()
	var st apiwire.Channel
	waitFor(t, "standby "+want, func() bool { st = r.h.status(channel); return st.Standby == want })
	return st
}

func counter(t *testing.T, r *rig, name string, labels map[string]string) float64 {
	t.Helper()
	return sandboxtest.CounterWith(t, r.h.reg, name, labels)
}

// TestStandbyChannelOffDiscards: the channel status and /v1/turns show
// the channel's standby; switching the channel off through the API reaches
// the kind, which removes it (what the kind does then, the discard counted
// and nothing prepared, is pkg/sealedturn's test of this name).
func TestStandbyChannelOffDiscards(t *testing.T) {
	r, _ := newWarmRig(t, "")
	hc, _ := serve(t, r)
	if code, _ := call(t, hc, "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"}`); code != 200 {
		t.Fatalf("turn: %d", code)
	}
	waitStandby(t, r, "c", standby.StateReady)
	code, body := call(t, hc, "GET", "/v1/channels/c", "")
	if code != 200 || body["standby"] != standby.StateReady {
		t.Errorf("channel status %d %v, want standby ready", code, body)
	}
	resp, err := hc.Get("http://host/v1/turns")
	must(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(data), `"standby":"ready"`) {
		t.Errorf("/v1/turns does not show the standby: %s", data)
	}
	if code, _ := call(t, hc, "PUT", "/v1/channels/c/mode", `{"mode":"off"}`); code != 200 {
		t.Fatalf("mode off: %d", code)
	}
	waitFor(t, "nothing left", func() bool { return r.docker.LiveCount() == 0 && len(r.h.ActiveTurns()) == 0 })
	if st := r.h.status("c"); st.Standby != standby.StateNone {
		t.Errorf("standby %q after channel off", st.Standby)
	}
}
