package config

import (
	"strings"
	"testing"
)

// TestRunStandbyValidate: each runs.standby bound and shape rule refuses
// with its key; the defaults declare no shape.
func TestRunStandbyValidate(t *testing.T) {
	def := validBase(t)
	if s := def.Runs.Standby; len(s.Shapes) != 0 || s.Max != 2 || s.MaxAgeSeconds != 300 {
		t.Errorf("defaults %+v, want no shapes, max 2, 300 s", s)
	}
	base := func() *Config {
		c := validBase(t)
		c.Runs.Projects = []Project{{Name: "demo", Path: "/srv/demo"}}
		c.Runs.Standby.Shapes = []RunShape{{}, {Project: "demo", Setup: true}}
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("valid run standby config refused: %v", err)
	}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantKey string
	}{
		{"max negative", func(c *Config) { c.Runs.Standby.Max = -1 }, "runs.standby.max: must be 0"},
		{"max over", func(c *Config) { c.Runs.Standby.Max = MaxRunStandbys + 1 }, "runs.standby.max: must be 0"},
		{"age short", func(c *Config) { c.Runs.Standby.MaxAgeSeconds = 1 }, "runs.standby.maxAgeSeconds: must be 10 to 600"},
		{"age long", func(c *Config) { c.Runs.Standby.MaxAgeSeconds = 601 }, "runs.standby.maxAgeSeconds"},
		{"unknown project", func(c *Config) { c.Runs.Standby.Shapes[1].Project = "other" }, `runs.standby.shapes[1].project: "other" is not a project`},
		{"twice", func(c *Config) { c.Runs.Standby.Shapes = append(c.Runs.Standby.Shapes, RunShape{}) }, "runs.standby.shapes[2]: shape no-project is declared twice (also runs.standby.shapes[0])"},
		{"twice with setup", func(c *Config) {
			c.Runs.Standby.Shapes = append(c.Runs.Standby.Shapes, RunShape{Project: "demo", Setup: true})
		}, "runs.standby.shapes[2]: shape project=demo,setup is declared twice (also runs.standby.shapes[1])"},
		{"runs off", func(c *Config) { c.Runs.Enabled = false }, "runs.standby.shapes: declares run standbys, but runs.enabled is false"},
		{"too many", func(c *Config) {
			for i := 0; i < MaxRunStandbys; i++ {
				c.Runs.Standby.Shapes = append(c.Runs.Standby.Shapes, RunShape{Project: "demo"})
			}
		}, "runs.standby.shapes: at most 16"},
	}
	for _, tc := range cases {
		c := base()
		tc.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantKey) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.wantKey)
		}
	}
}

// TestRunStandbyFromYAML: shapes load as written; an unknown key under
// runs.standby is named as written; RunStandbyShape finds a run's shape.
func TestRunStandbyFromYAML(t *testing.T) {
	c, err := Load(write(t, base+"runs:\n  projects:\n    - name: demo\n      path: /srv/demo\n  standby:\n    max: 3\n    shapes:\n      - project: demo\n      - setup: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []RunShape{{Project: "demo"}, {Setup: true}}
	if got := c.Runs.Standby.Shapes; len(got) != 2 || got[0] != want[0] || got[1] != want[1] || c.Runs.Standby.Max != 3 {
		t.Fatalf("runs.standby = %+v, want shapes %v and max 3", c.Runs.Standby, want)
	}
	for _, tc := range []struct {
		project string
		setup   bool
		want    bool
	}{{"demo", false, true}, {"", true, true}, {"", false, false}, {"demo", true, false}} {
		if _, ok := c.Runs.RunStandbyShape(tc.project, tc.setup); ok != tc.want {
			t.Errorf("RunStandbyShape(%q, %v) = %v, want %v", tc.project, tc.setup, ok, tc.want)
		}
	}
	_, err = Load(write(t, base+"runs:\n  standby:\n    shapes:\n      - Projekt: demo\n"))
	if err == nil || !strings.Contains(err.Error(), "runs.standby.shapes[0].Projekt: unknown key") {
		t.Errorf("unknown shape key: %v, want it named as written", err)
	}
}

// TestRunShapeNamesAreDistinct: the pool knows a shape by its name, so
// every shape a config can declare has a name of its own: "none" and
// "no-project" are valid project names, and neither shape of them is named
// as the shape without a project. The config of issue 33 ({project: none}
// declared before the shape without a project) loads, and two shapes of
// one name are refused with the key as written.
func TestRunShapeNamesAreDistinct(t *testing.T) {
	var shapes []RunShape
	for _, p := range []string{"", "none", "no-project", "demo"} {
		if p != "" && !projectNameRe.MatchString(p) {
			t.Fatalf("%q is not a valid project name; the test wants one", p)
		}
		shapes = append(shapes, RunShape{Project: p}, RunShape{Project: p, Setup: true})
	}
	seen := map[string]RunShape{}
	for _, s := range shapes {
		if prev, ok := seen[s.Name()]; ok {
			t.Errorf("shapes %+v and %+v are both named %s", prev, s, s.Name())
		}
		seen[s.Name()] = s
	}

	projects := "runs:\n  projects:\n    - name: none\n      path: /srv/none\n  standby:\n    shapes:\n"
	c, err := Load(write(t, base+projects+"      - project: none\n      - {}\n"))
	if err != nil {
		t.Fatalf("{project: none} beside a shape without a project refused: %v", err)
	}
	if a, b := c.Runs.Standby.Shapes[0].Name(), c.Runs.Standby.Shapes[1].Name(); a == b {
		t.Errorf("{project: none} and {} are both named %s", a)
	}
	_, err = Load(write(t, base+projects+"      - project: none\n      - setup: true\n      - project: none\n"))
	if want := "runs.standby.shapes[2]: shape project=none is declared twice (also runs.standby.shapes[0])"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("two shapes of one name: %v, want %q", err, want)
	}
}
