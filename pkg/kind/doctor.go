package kind

import (
	"io/fs"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// The statuses of a doctor check (sandbox-host doctor, docs/operating.md).
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "fail"
)

// DoctorEnv is what a kind's doctor checks may read of the machine.
type DoctorEnv struct {
	Stat func(path string) (fs.FileInfo, error)
}

// AddCheck reports one doctor check: its name, status (Check*), what was
// found and, unless it is ok, what to do about it.
type AddCheck func(name, status, detail, remedy string)

// Doctor is a kind with something of its own for `sandbox-host doctor` to
// check (a code run's projects, a rich session's skills). Doctor runs
// without a host, so the host asks the kind's Registration.Zero: the
// checks read only cfg and env, never the receiver.
type Doctor interface {
	DoctorChecks(cfg *config.Config, env DoctorEnv, add AddCheck)
}
