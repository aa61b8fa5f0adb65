package config

import (
	"strings"
	"testing"
)

// TestRunsValidate: each runs.* bound and project rule refuses with its key.
func TestRunsValidate(t *testing.T) {
	base := func() *Config {
		c := validBase(t)
		c.Runs.Projects = []Project{{Name: "demo", Path: "/srv/demo"}}
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("valid runs config refused: %v", err)
	}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantKey string
	}{
		{"no image", func(c *Config) { c.Runs.Image = "" }, "runs.image"},
		{"bad name", func(c *Config) { c.Runs.Projects[0].Name = "../x" }, "runs.projects[0].name"},
		{"twice", func(c *Config) { c.Runs.Projects = append(c.Runs.Projects, Project{Name: "demo", Path: "/srv/b"}) }, "runs.projects[1].name"},
		{"relative", func(c *Config) { c.Runs.Projects[0].Path = "srv/demo" }, "runs.projects[0].path"},
		{"root", func(c *Config) { c.Runs.Projects[0].Path = "/" }, "runs.projects[0].path"},
		{"home", func(c *Config) { c.Runs.Projects[0].Path = "/home/alice/code" }, "runs.projects[0].path"},
		{"tmp", func(c *Config) { c.Runs.Projects[0].Path = "/tmp/x" }, "runs.projects[0].path"},
		{"credentials", func(c *Config) { c.Runs.Projects[0].Path = "/etc/roundtable-sandbox" }, "runs.projects[0].path"},
		{"docker data", func(c *Config) { c.Runs.Projects[0].Path = "/var/lib/docker/volumes" }, "runs.projects[0].path"},
		{"parent of workspaces", func(c *Config) { c.Runs.Projects[0].Path = "/var/lib/roundtable-sandbox" }, "runs.projects[0].path"},
		{"comma", func(c *Config) { c.Runs.Projects[0].Path = "/srv/a,b" }, "runs.projects[0].path"},
		{"memory", func(c *Config) { c.Runs.MemoryMB = 10 }, "runs.memoryMb"},
		{"tmpfs+output", func(c *Config) { c.Runs.TmpfsMB, c.Runs.OutputMB = 1500, 600 }, "runs.tmpfsMb"},
		{"pids", func(c *Config) { c.Runs.Pids = 1 }, "runs.pids"},
		{"output bytes", func(c *Config) { c.Runs.MaxOutputBytes = 10 }, "runs.maxOutputBytes"},
		{"artifacts", func(c *Config) { c.Runs.MaxArtifacts = 0 }, "runs.maxArtifacts"},
		{"total below each", func(c *Config) { c.Runs.MaxArtifactTotalBytes = 1 }, "runs.maxArtifactTotalBytes"},
		{"approval", func(c *Config) { c.Runs.ApprovalTimeoutSeconds = 5 }, "runs.approvalTimeoutSeconds"},
		{"retain", func(c *Config) { c.Runs.MaxRetained = 0 }, "runs.maxRetained"},
		{"in flight 0", func(c *Config) { c.Runs.MaxInFlight = 0 }, "runs.maxInFlight: must be 1 to 256"},
		{"in flight per client over all", func(c *Config) { c.Runs.MaxInFlightPerClient = c.Runs.MaxInFlight + 1 }, "runs.maxInFlightPerClient: must be 1 to runs.maxInFlight (8)"},
		{"retained bytes below one run", func(c *Config) { c.Runs.MaxRetainedBytes = 1 << 20 }, "runs.maxRetainedBytes: must be one finished run"},
		{"retained bytes over the budget", func(c *Config) { c.Runs.MaxRetainedBytes = RunsMemoryBudget + 1 }, "runs.maxRetainedBytes: must be one finished run"},
		{"hold below 10 s", func(c *Config) { c.Runs.ResultHoldSeconds = 9 }, "runs.resultHoldSeconds: must be 10 to runs.retainSeconds (900), got 9"},
		{"hold past retain", func(c *Config) { c.Runs.ResultHoldSeconds = c.Runs.RetainSeconds + 1 }, "runs.resultHoldSeconds: must be 10 to runs.retainSeconds (900), got 901"},
		{"memory budget too small", func(c *Config) { c.Runs.MemoryBudgetBytes = MinRunsMemoryBudget - 1 }, "runs.memoryBudgetBytes: must be 67108864 to 274877906944, got 67108863"},
		{"memory budget too big", func(c *Config) { c.Runs.MemoryBudgetBytes = MaxRunsMemoryBudget + 1 }, "runs.memoryBudgetBytes: must be 67108864 to 274877906944"},
		{"defaults over a lowered budget", func(c *Config) { c.Runs.MemoryBudgetBytes = 256 << 20 }, "over the 256 MiB the host keeps for runs (runs.memoryBudgetBytes"},
		// Issue 23 item 12: each key allowed alone, together over the unit.
		{"output at its maximum", func(c *Config) { c.Runs.MaxOutputBytes = MaxRunOutputBytes }, "runs.maxRetainedBytes (128 MiB) plus runs.maxInFlight (8) runs of up to 70.0 MiB each"},
		{"in flight at its maximum", func(c *Config) { c.Runs.MaxInFlight = MaxRunsInFlight }, "is 10368.0 MiB, over the 512 MiB the host keeps for runs"},
		{"artifacts at their maximum", func(c *Config) {
			c.Runs.MaxArtifactTotalBytes, c.Runs.MaxInFlight, c.Runs.MaxInFlightPerClient = MaxRunArtifactTotalBytes, 1, 1
			c.Runs.MaxRetainedBytes = c.Runs.RunRetainedBytes()
		}, "runs.maxRetainedBytes (262 MiB) plus runs.maxInFlight (1)"},
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

// TestRunsMemoryBoundsHoldAtEverySetting: whatever combination of the runs
// keys Validate accepts, the worst case of all runs together fits the
// host's memory for runs, and one finished run fits the retained bound.
func TestRunsMemoryBoundsHoldAtEverySetting(t *testing.T) {
	accepted := 0
	for _, out := range []int{MinRunOutputBytes, 1 << 20, 4 << 20, MaxRunOutputBytes} {
		for _, total := range []int64{1, 32 << 20, 128 << 20, MaxRunArtifactTotalBytes} {
			for _, inFlight := range []int{1, 4, 8, 32, MaxRunsInFlight} {
				for _, retained := range []int64{16 << 20, 128 << 20, 300 << 20, RunsMemoryBudget} {
					c := validBase(t)
					c.Runs.MaxOutputBytes, c.Runs.MaxArtifactBytes, c.Runs.MaxArtifactTotalBytes = out, min(total, MaxRunArtifactBytes), total
					c.Runs.MaxInFlight, c.Runs.MaxInFlightPerClient, c.Runs.MaxRetainedBytes = inFlight, 1, retained
					if c.Validate() != nil {
						continue
					}
					accepted++
					if w := c.Runs.RunsWorstCaseBytes(); w > RunsMemoryBudget || c.Runs.RunRetainedBytes() > retained {
						t.Errorf("accepted out %d total %d in flight %d retained %d: worst case %d, over %d", out, total, inFlight, retained, w, RunsMemoryBudget)
					}
				}
			}
		}
	}
	if accepted < 20 {
		t.Errorf("only %d combinations accepted: the check refuses too much", accepted)
	}
}

// TestRunsMemoryBudgetRaised: an operator who raised the unit's MemoryMax
// raises runs.memoryBudgetBytes, and settings over the shipped 512 MiB
// pass; the default stays 512 MiB.
func TestRunsMemoryBudgetRaised(t *testing.T) {
	c := validBase(t)
	if c.Runs.MemoryBudgetBytes != RunsMemoryBudget || c.Rich.ReplyBudgetBytes != DefaultRichReplyBudget || c.Runs.ResultHoldSeconds != 60 {
		t.Errorf("defaults: runs.memoryBudgetBytes %d, rich.replyBudgetBytes %d, runs.resultHoldSeconds %d", c.Runs.MemoryBudgetBytes, c.Rich.ReplyBudgetBytes, c.Runs.ResultHoldSeconds)
	}
	body := base + "runs:\n  maxInFlight: 16\n  maxRetainedBytes: 268435456\n"
	if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), "runs.memoryBudgetBytes") {
		t.Fatalf("16 runs in flight and 256 MiB retained at the shipped budget: %v, want a refusal naming runs.memoryBudgetBytes", err)
	}
	c, err := Load(write(t, body+"  memoryBudgetBytes: 1073741824\n  resultHoldSeconds: 300\nrich:\n  replyBudgetBytes: 301989888\n"))
	if err != nil || c.Runs.MemoryBudgetBytes != 1<<30 || c.Runs.ResultHoldSeconds != 300 || c.Rich.ReplyBudgetBytes != 288<<20 {
		t.Errorf("raised budgets: %v %+v", err, c)
	}
}

// validBase is the minimal config, loaded.
func validBase(t *testing.T) *Config {
	t.Helper()
	c, err := Load(write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRunsFromYAML: projects load as written; an unknown key under runs is
// named as written.
func TestRunsFromYAML(t *testing.T) {
	c, err := Load(write(t, base+"runs:\n  memoryMb: 1024\n  tmpfsMb: 128\n  outputMb: 64\n  projects:\n    - name: Demo.1\n      path: /srv/demo\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.Runs.ProjectPath("Demo.1"); !ok || p != "/srv/demo" || c.Runs.MemoryMB != 1024 || !c.Runs.Enabled || c.Runs.MaxArtifacts != 16 {
		t.Errorf("runs %+v", c.Runs)
	}
	if _, ok := c.Runs.ProjectPath("demo.1"); ok {
		t.Errorf("project names are case-sensitive")
	}
	c, err = Load(write(t, base+"runs:\n  maxRetainedBytes: 67108864\n  maxInFlight: 3\n  maxInFlightPerClient: 2\n"))
	if err != nil || c.Runs.MaxRetainedBytes != 64<<20 || c.Runs.MaxInFlight != 3 || c.Runs.MaxInFlightPerClient != 2 {
		t.Errorf("runs memory keys: %+v %v", c.Runs, err)
	}
	_, err = Load(write(t, base+"runs:\n  projekts: []\n"))
	if err == nil || !strings.Contains(err.Error(), "runs.projekts") {
		t.Errorf("unknown key: %v", err)
	}
}
