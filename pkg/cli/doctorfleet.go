package cli

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
)

// NATSUnit is the fleet engine's unit on a box that runs its own server;
// FleetHostDropIn the host unit's drop-in for a fleet, as the package
// ships it.
const (
	NATSUnit        = "sandbox-nats.service"
	FleetHostDropIn = "/usr/share/roundtable-sandbox/sandbox-host-fleet.conf"
)

// systemctlProperty asks systemd for one property's value.
func systemctlProperty(ctx context.Context, unit, prop string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "--property="+prop, "--value", "--", unit).Output()
	if err != nil {
		return "", fmt.Errorf("systemctl: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// doctorFleet reports the fleet: one line "off" when fleet.enabled is
// false; otherwise this box's sandbox-nats unit when fleet.url is on this
// box, then the connection, JetStream, each family stream and bucket and
// this box's permissions (fleetnats.Health), each failure naming what is
// broken.
func doctorFleet(ctx context.Context, cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) {
	f := cfg.Fleet
	if !f.Enabled {
		add("fleet", StatusOK, "off (fleet.enabled is false): this box is the whole family", "")
		return
	}
	if fleetURLIsLocal(f) {
		switch st, err := d.unitState(ctx, NATSUnit); {
		case err != nil:
			add("fleet-server", StatusSkip, "cannot ask systemd about "+NATSUnit+": "+err.Error(), "")
		case st.Active != "active":
			desc := NATSUnit + " is " + st.Active + " (" + st.Sub + ")"
			if st.Result != "" && st.Result != "success" {
				desc += ", result " + st.Result
			}
			add("fleet-server", StatusFail, desc+": fleet.url names this box's own server", "systemctl enable --now "+NATSUnit+"; journalctl -u "+NATSUnit+" -n 20 shows why it stopped")
		default:
			add("fleet-server", StatusOK, NATSUnit+" is active", "")
		}
	}
	switch pn, err := d.unitProperty(ctx, "sandbox-host.service", "PrivateNetwork"); {
	case err != nil:
		add("fleet-host-net", StatusSkip, "cannot ask systemd about sandbox-host.service: "+err.Error(), "")
	case pn == "yes":
		add("fleet-host-net", StatusFail, "sandbox-host.service has PrivateNetwork=yes: the host cannot reach fleet.url",
			"install -D -m 0644 "+FleetHostDropIn+" /etc/systemd/system/sandbox-host.service.d/fleet.conf && systemctl daemon-reload && systemctl restart sandbox-host.service (docs/fleet.md)")
	default:
		add("fleet-host-net", StatusOK, "sandbox-host.service may reach the network (PrivateNetwork="+pn+")", "")
	}
	for _, c := range d.fleetHealth(ctx, f) {
		add(c.Name, c.Status, c.Detail, c.Remedy)
	}
}

// fleetURLIsLocal: every fleet.url host is a loopback address (the
// default, this box's sandbox-nats).
func fleetURLIsLocal(f config.Fleet) bool {
	urls := f.FleetURLs()
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return false
		}
		h := u.Hostname()
		if ip := net.ParseIP(h); (ip == nil || !ip.IsLoopback()) && h != "localhost" {
			return false
		}
	}
	return len(urls) > 0
}

func realFleetHealth(ctx context.Context, f config.Fleet) []fleetnats.Finding {
	return fleetnats.Health(ctx, f)
}
