package config

// Sessions configures sessions (DESIGN.md section 18, package
// livesession): a toolbox container that lives across execs. They take
// runs.image and runs.projects; every other bound is their own, so that
// sessions never take what turns and runs need.
type Sessions struct {
	Enabled bool `mapstructure:"enabled"`
	// MaxLive bounds the sessions of this box (running or paused),
	// MaxPerClient those of one client uid, MaxMemoryMB the memory limits
	// of all of them together; a create past any is refused with 429 at
	// once, naming the key.
	MaxLive      int `mapstructure:"maxLive"`
	MaxPerClient int `mapstructure:"maxPerClient"`
	MaxMemoryMB  int `mapstructure:"maxMemoryMb"`
	// MemoryMB is a session's memory limit (a create may ask for less);
	// WorkMB sizes its /work tmpfs, TmpfsMB /tmp, OutputMB /output (all
	// counted against MemoryMB).
	MemoryMB int     `mapstructure:"memoryMb"`
	CPUs     float64 `mapstructure:"cpus"`
	Pids     int64   `mapstructure:"pids"`
	WorkMB   int     `mapstructure:"workMb"`
	TmpfsMB  int     `mapstructure:"tmpfsMb"`
	OutputMB int     `mapstructure:"outputMb"`
	// MaxOutputBytes bounds an exec's stdout and stderr each.
	MaxOutputBytes int `mapstructure:"maxOutputBytes"`
	// MaxFileBytes bounds a file put or got, and a directory's tar.
	MaxFileBytes int `mapstructure:"maxFileBytes"`
	// IdleSeconds pauses a session nobody used for that long (the next
	// request resumes it); TTLSeconds removes it that long after its
	// creation (a create may ask for less).
	IdleSeconds int `mapstructure:"idleSeconds"`
	TTLSeconds  int `mapstructure:"ttlSeconds"`
	// Standby is how many prepared session containers the box keeps
	// ready for a plain create (0 or 1; docs/sessions.md "Standby"): it
	// is counted in sessions.maxLive and sessions.maxMemoryMb as a
	// session is.
	Standby int `mapstructure:"standby"`
}

// Bounds of the sessions keys.
const (
	MaxSessionsLive = 256
	// MaxSessionFileBytes is sessionwire's put and get bound.
	MaxSessionFileBytes = 64 << 20
	MinSessionFileBytes = 1 << 10
	// SessionFilesBudget bounds what file transfers of all sessions may
	// hold in the host at once (sessions.maxLive x 2 x
	// sessions.maxFileBytes: the request's body and its encoding), a part
	// of the unit's MemoryMax=1G.
	SessionFilesBudget = 256 << 20
	MaxSessionTTL      = 7 * 86400
)

func (c *Config) validateSessions(bad func(key, format string, a ...any)) {
	s := c.Sessions
	if s.MaxLive < 1 || s.MaxLive > MaxSessionsLive {
		bad("sessions.maxLive", "must be 1 to %d, got %d", MaxSessionsLive, s.MaxLive)
	}
	if s.MaxPerClient < 1 || s.MaxPerClient > max(s.MaxLive, 1) {
		bad("sessions.maxPerClient", "must be 1 to sessions.maxLive (%d), got %d", s.MaxLive, s.MaxPerClient)
	}
	if s.MemoryMB < 64 || s.MemoryMB > 65536 {
		bad("sessions.memoryMb", "must be 64 to 65536, got %d", s.MemoryMB)
	}
	if s.MaxMemoryMB < s.MemoryMB || s.MaxMemoryMB > 1<<20 {
		bad("sessions.maxMemoryMb", "must be sessions.memoryMb (%d) to %d, got %d", s.MemoryMB, 1<<20, s.MaxMemoryMB)
	}
	if !(s.CPUs >= 0.01 && s.CPUs <= 64) {
		bad("sessions.cpus", "must be 0.01 to 64, got %v", s.CPUs)
	}
	if s.Pids < 8 || s.Pids > 4096 {
		bad("sessions.pids", "must be 8 to 4096, got %d", s.Pids)
	}
	for _, t := range []struct {
		key string
		v   int
	}{{"sessions.workMb", s.WorkMB}, {"sessions.tmpfsMb", s.TmpfsMB}, {"sessions.outputMb", s.OutputMB}} {
		if t.v < 1 || t.v > 4096 {
			bad(t.key, "must be 1 to 4096, got %d", t.v)
		}
	}
	if s.WorkMB+s.TmpfsMB+s.OutputMB >= s.MemoryMB {
		bad("sessions.workMb", "sessions.workMb plus sessions.tmpfsMb plus sessions.outputMb must stay below sessions.memoryMb (tmpfs counts against memory), got %d + %d + %d >= %d",
			s.WorkMB, s.TmpfsMB, s.OutputMB, s.MemoryMB)
	}
	if s.MaxOutputBytes < MinRunOutputBytes || s.MaxOutputBytes > MaxRunOutputBytes {
		bad("sessions.maxOutputBytes", "must be %d to %d, got %d", MinRunOutputBytes, MaxRunOutputBytes, s.MaxOutputBytes)
	}
	if s.MaxFileBytes < MinSessionFileBytes || s.MaxFileBytes > MaxSessionFileBytes {
		bad("sessions.maxFileBytes", "must be %d to %d, got %d", MinSessionFileBytes, MaxSessionFileBytes, s.MaxFileBytes)
	} else if int64(s.MaxLive)*2*int64(s.MaxFileBytes) > SessionFilesBudget {
		bad("sessions.maxFileBytes", "sessions.maxLive x 2 x sessions.maxFileBytes must stay within the %d MiB the host keeps for session files, got %d x 2 x %d",
			SessionFilesBudget>>20, s.MaxLive, s.MaxFileBytes)
	}
	if s.IdleSeconds < 10 || s.IdleSeconds > 86400 {
		bad("sessions.idleSeconds", "must be 10 to 86400, got %d", s.IdleSeconds)
	}
	if s.Standby < 0 || s.Standby > 1 {
		bad("sessions.standby", "must be 0 or 1, got %d", s.Standby)
	}
	if s.TTLSeconds < 60 || s.TTLSeconds > MaxSessionTTL {
		bad("sessions.ttlSeconds", "must be 60 to %d, got %d", MaxSessionTTL, s.TTLSeconds)
	}
}
