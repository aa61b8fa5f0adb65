package coderun

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// TestHeldResultsRefuseNewRuns: finished runs within Hold are not
// forgotten for the byte bound; while they and a reservation per
// unfinished run fill what the retained and active bounds allow together,
// Create refuses (ErrBusy) naming the keys, with a Retry-After of when
// the first held run may go; past the hold the oldest are forgotten, each
// logged with its id, reason, age and bytes, and a new run is admitted.
func TestHeldResultsRefuseNewRuns(t *testing.T) {
	var logs bytes.Buffer
	g, c := newTestRegistry(t, RegistryLimits{
		MaxRetainedBytes: 10000, RunBytes: 10000, MaxActive: 2, Hold: time.Minute,
		RetainedKeys: "runs.maxRetainedBytes", Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	first := c.Now()
	var held []*Run
	for {
		r, err := g.Create(runs.Params{Command: "x", Artifacts: []string{"a"}}, 1000)
		if err != nil {
			if !errors.Is(err, runs.ErrBusy) || !strings.Contains(err.Error(), "runs.maxRetainedBytes") {
				t.Fatalf("Create with results held: %v, want ErrBusy naming runs.maxRetainedBytes", err)
			}
			var hint interface{ RetryAfter() time.Duration }
			if !errors.As(err, &hint) || hint.RetryAfter() != first.Add(time.Minute).Sub(c.Now()) {
				t.Errorf("refusal's Retry-After: %v, want %v (when the first held run may go)", hint, first.Add(time.Minute).Sub(c.Now()))
			}
			break
		}
		r.Start()
		r.Finish(Finish{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a", Size: 5000, Data: make([]byte, 5000)}}})
		held = append(held, r)
		c.Advance(time.Second)
		if len(held) > 10 {
			t.Fatal("10 runs of 6 KB held under a 30 KB budget: nothing refused")
		}
	}
	// 4 x 6 KB held (over the 10 KB retained bound), 10 KB reserved for the next.
	if len(held) != 4 {
		t.Errorf("%d runs admitted before the refusal, want 4", len(held))
	}
	for i, r := range held {
		if _, err := g.Get(r.ID()); err != nil {
			t.Errorf("held run %d forgotten within the hold: %v", i, err)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("logged within the hold: %s", logs.String())
	}
	c.Advance(time.Minute)
	if _, err := g.Create(shell, 1000); err != nil {
		t.Fatalf("Create past the hold: %v", err)
	}
	type line struct {
		Msg    string `json:"msg"`
		Run    string `json:"run"`
		Reason string `json:"reason"`
		AgeS   int64  `json:"age_s"`
		Bytes  int64  `json:"bytes"`
	}
	var got []line
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var ln line
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		got = append(got, ln)
	}
	// The three oldest go for bytes (the newest alone fits 10 KB).
	if len(got) != 3 {
		t.Fatalf("logged %d forgotten runs, want 3: %s", len(got), logs.String())
	}
	for i, ln := range got {
		if ln.Msg != "run forgotten" || ln.Run != held[i].ID() || ln.Reason != "maxRetainedBytes" || ln.AgeS != int64(64-i) || ln.Bytes < 5000 {
			t.Errorf("log line %d: %+v, want run %s, reason maxRetainedBytes, age %d s, bytes >= 5000", i, ln, held[i].ID(), 64-i)
		}
	}
}
