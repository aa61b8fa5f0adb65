package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// doctorLeftovers reports this installation's containers past their
// deadline label plus reaper.graceSeconds: a sandbox lives at most to its
// deadline, so one still there was left by a cleanup that failed (after a
// reply left, its channel is held until it is gone: docs/sealed-turns.md,
// "When the cleanup fails") or by a host that stopped, and sandbox-reaper
// removes exactly these. The broker units of such a turn go with the
// reaper's same pass.
func doctorLeftovers(ctx context.Context, cfg *config.Config, probe dockerProbe, now time.Time, add func(name, status, detail, remedy string)) {
	list, err := probe.List(ctx, cfg.Installation)
	if err != nil {
		add("leftovers", StatusSkip, "cannot list the installation's containers: "+err.Error(), "")
		return
	}
	grace := time.Duration(cfg.Reaper.GraceSeconds) * time.Second
	var stale []string
	for _, c := range list {
		unix, err := strconv.ParseInt(c.Labels[layout.LabelDeadline], 10, 64)
		if err != nil {
			continue // no deadline: not a sandbox the reaper judges by it
		}
		if deadline := time.Unix(unix, 0); now.After(deadline.Add(grace)) {
			stale = append(stale, fmt.Sprintf("%s (turn %s, %s, deadline %s)", c.Name, c.Labels[layout.LabelTurn], c.State, deadline.UTC().Format(time.RFC3339)))
		}
	}
	if len(stale) == 0 {
		add("leftovers", StatusOK, fmt.Sprintf("no container past its deadline (of %d)", len(list)), "")
		return
	}
	add("leftovers", StatusWarn, fmt.Sprintf("%d container(s) past their deadline, left by a failed cleanup or a stopped host (a sealed channel whose turn left one is held until it is gone): %s",
		len(stale), strings.Join(stale, "; ")),
		"systemctl start sandbox-reaper removes them and their broker units (journalctl -u sandbox-host names what failed)")
}
