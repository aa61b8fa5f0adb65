package config

import "fmt"

// RunStandby configures run standbys (DESIGN.md section 10): per run shape
// an operator declares, one toolbox container created and started ahead of
// its run, its supervisor waiting on stdin, a run uid slot taken; a run of
// that shape binds it instead of waiting for Docker. Each serves one run.
// Network runs always take the cold path (their broker is made at
// approval), and so does a run whose shape is not declared.
type RunStandby struct {
	// Shapes are the run shapes kept warm, one standby each; none by
	// default: each waiting standby holds memory and a run uid slot.
	Shapes []RunShape `mapstructure:"shapes"`
	// Max caps run standbys across shapes (preparing ones included).
	Max int `mapstructure:"max"`
	// MaxAgeSeconds is a run standby's life; an expired one is replaced.
	MaxAgeSeconds int `mapstructure:"maxAgeSeconds"`
}

// RunShape is what a run standby is made for: the project bound at
// /workspace ("" none) and whether the run has setup commands (a setup
// run's container starts as root with the setup capabilities and the
// project behind its gate).
type RunShape struct {
	Project string `mapstructure:"project"`
	Setup   bool   `mapstructure:"setup"`
}

// Name is the shape as the host names it (logs, metrics, the pool, which
// finds a shape's standbys by it): one name per shape. A shape without a
// project is "no-project", which no "project=<name>" can spell ("none" is a
// valid project name: "project=none" once named both).
func (s RunShape) Name() string {
	name := "project=" + s.Project
	if s.Project == "" {
		name = "no-project"
	}
	if s.Setup {
		return name + ",setup"
	}
	return name
}

// Bounds of the runs.standby keys.
const (
	MaxRunStandbys = 16
)

// RunStandbyShape is the declared shape a run of project and setup fits,
// if any.
func (r Runs) RunStandbyShape(project string, setup bool) (RunShape, bool) {
	for _, s := range r.Standby.Shapes {
		if s.Project == project && s.Setup == setup {
			return s, true
		}
	}
	return RunShape{}, false
}

func (c *Config) validateRunStandby(bad func(key, format string, a ...any)) {
	s := c.Runs.Standby
	if s.Max < 0 || s.Max > MaxRunStandbys {
		bad("runs.standby.max", "must be 0 (no run standbys) to %d, got %d", MaxRunStandbys, s.Max)
	}
	if s.MaxAgeSeconds < MinStandbyAgeSeconds || s.MaxAgeSeconds > MaxStandbyAgeSeconds {
		bad("runs.standby.maxAgeSeconds", "must be %d to %d, got %d", MinStandbyAgeSeconds, MaxStandbyAgeSeconds, s.MaxAgeSeconds)
	}
	if len(s.Shapes) > MaxRunStandbys {
		bad("runs.standby.shapes", "at most %d shapes, got %d", MaxRunStandbys, len(s.Shapes))
	}
	if len(s.Shapes) > 0 && !c.Runs.Enabled {
		bad("runs.standby.shapes", "declares run standbys, but runs.enabled is false")
	}
	// The pool knows a shape by its name alone: two shapes of one name
	// would share one standby, whichever was declared first preparing it.
	first := map[string]string{}
	for i, sh := range s.Shapes {
		key := fmt.Sprintf("runs.standby.shapes[%d]", i)
		if sh.Project != "" {
			if _, ok := c.Runs.ProjectPath(sh.Project); !ok {
				bad(key+".project", "%q is not a project of runs.projects (leave it empty for runs without a project)", sh.Project)
			}
		}
		if prev, ok := first[sh.Name()]; ok {
			bad(key, "shape %s is declared twice (also %s)", sh.Name(), prev)
			continue
		}
		first[sh.Name()] = key
	}
}
