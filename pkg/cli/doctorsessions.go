package cli

import (
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// doctorSessions reports the sessions' bounds (docs/api.md, Sessions) and
// warns when the memory all sessions may hold (sessions.maxMemoryMb, or
// fewer sessions at their full memory) passes half of this machine's:
// paused sessions keep their memory, and turns and runs need the rest.
func doctorSessions(cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) {
	s := cfg.Sessions
	if !s.Enabled {
		add("sessions", StatusOK, "sessions are off (sessions.enabled: false)", "")
		return
	}
	worst := min(s.MaxMemoryMB, s.MaxLive*s.MemoryMB)
	detail := fmt.Sprintf("at most %d sessions on this box (sessions.maxLive), %d per client (sessions.maxPerClient), %d MiB of memory limits together (sessions.maxMemoryMb, %d MiB each); idle after %d s they are paused, at %d s removed; they take no turn slot",
		s.MaxLive, s.MaxPerClient, worst, s.MemoryMB, s.IdleSeconds, s.TTLSeconds)
	if d.machine != nil {
		if m := d.machine(); m.MemoryRead && int64(worst) > m.MemoryMB/2 {
			add("sessions", StatusWarn, detail+fmt.Sprintf("; this machine has %d MiB", m.MemoryMB),
				fmt.Sprintf("lower sessions.maxMemoryMb to %d or less: sessions, paused ones too, keep their memory", m.MemoryMB/2))
			return
		}
	}
	add("sessions", StatusOK, detail, "")
}
