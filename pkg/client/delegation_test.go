package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// TestDelegateRefusalText: a refusal reaches the caller word for word.
func TestDelegateRefusalText(t *testing.T) {
	var got delegation.Request
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/channels/c/delegations" || r.Method != "POST" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":"this channel already has 2 delegated tasks running; wait for one to report back"}`))
	})
	_, err := c.Delegate(context.Background(), "c", "T", "task", apiwire.Speaker{ID: "a", Name: "Ann", PrincipalID: "p"})
	var e *Error
	if !errors.As(err, &e) || e.Status != 429 || e.Reason != "this channel already has 2 delegated tasks running; wait for one to report back" {
		t.Errorf("err = %v", err)
	}
	if got.Title != "T" || got.Task != "task" || got.Author.ID != "a" || got.Author.PrincipalID != "p" {
		t.Errorf("request %+v", got)
	}
}

// TestFollowJobs: job lines reach fn, keepalives do not; a stream silent
// for longer than idle fails with ErrTimeout instead of hanging.
func TestFollowJobs(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"type":"keepalive"}` + "\n" + `{"type":"job","job":{"id":"j1","state":"done","report":"r"}}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then silence
	})
	var got []delegation.Status
	start := time.Now()
	err := c.FollowJobs(context.Background(), "c", 100*time.Millisecond, func(st delegation.Status) error {
		got = append(got, st)
		return nil
	})
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %v, want ErrTimeout", err, time.Since(start))
	}
	if len(got) != 1 || got[0].ID != "j1" || got[0].Report != "r" {
		t.Errorf("jobs %+v", got)
	}
	stop := errors.New("enough")
	c2 := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"type":"job","job":{"id":"j2","state":"failed","error":"the worker ran out of time"}}` + "\n"))
	})
	err = c2.FollowJobs(context.Background(), "c", time.Second, func(st delegation.Status) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("fn's error: %v", err)
	}
}

// TestWaitJob polls until the job finished.
func TestWaitJob(t *testing.T) {
	n := 0
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		n++
		st := delegation.Status{ID: "j", State: delegation.StateRunning, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
		if n >= 3 {
			st.State, st.Report = delegation.StateDone, "r"
		}
		json.NewEncoder(w).Encode(st)
	})
	st, err := c.WaitJob(context.Background(), "j", 10*time.Millisecond)
	if err != nil || st.Report != "r" || n != 3 {
		t.Errorf("st %+v err %v polls %d", st, err, n)
	}
}
