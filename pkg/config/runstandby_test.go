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
		{"twice", func(c *Config) { c.Runs.Standby.Shapes = append(c.Runs.Standby.Shapes, RunShape{}) }, "runs.standby.shapes[2]: shape project=none is declared twice"},
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
