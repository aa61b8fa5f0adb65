package livesession

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// TestIntegrationSessionAPI drives a session on a real Docker daemon
// through its routes and the Go client over a socket: 1 MiB of random
// bytes in and out through the raw file routes (what the client uses)
// with their mode, the same file through the JSON routes; a put past
// sessions.maxFileBytes refused with 413 naming the key and the file
// before it left whole. It logs, side by side, an exec of true through the
// API and through the kind, and a 1 MiB put and get through the raw and
// the JSON routes (SANDBOX_IT_SESSION_API_REPORT when set; its rounds
// SANDBOX_IT_SESSION_API_ROUNDS, default 10); nothing is timed in an
// assertion.
func TestIntegrationSessionAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const bound = 2 << 20
	k := itKind(t, ctx, func(c *config.Config) { c.Sessions.MaxFileBytes = bound }).k
	dir, err := os.MkdirTemp("/tmp", "sess")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "h.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sandboxtest.Handler(Registration, k.Routes(), peerauth.RoleClient, 1000)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := client.New(filepath.Join(dir, "h.sock"))
	st, err := c.CreateSession(ctx, apiwire.SessionCreate{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseSession(context.Background(), st.ID)
	s, err := k.Lookup(st.ID, 1000, false)
	if err != nil {
		t.Fatal(err)
	}

	data := make([]byte, 1<<20)
	rand.Read(data)
	if f, err := c.PutFile(ctx, st.ID, "out/r.bin", 0o640, data); err == nil || f.Size != 0 {
		t.Fatalf("put under a missing directory: %+v %v, want a refusal", f, err)
	}
	if f, err := c.PutFile(ctx, st.ID, "r.bin", 0o640, data); err != nil || f.Size != int64(len(data)) {
		t.Fatalf("raw put: %+v %v", f, err)
	}
	if f, err := c.GetFile(ctx, st.ID, "r.bin", false); err != nil || !bytes.Equal(f.Data, data) || f.Mode != 0o640 || f.Size != int64(len(data)) {
		t.Fatalf("raw get: size %d mode %o %v", len(f.Data), f.Mode, err)
	}
	if f, err := k.Get(ctx, s, "r.bin", false); err != nil || !bytes.Equal(f.Data, data) {
		t.Fatalf("the raw put, read by the kind: %d bytes %v", len(f.Data), err)
	}
	// Past the bound: 413 naming the key, the file as it was.
	_, err = c.PutFile(ctx, st.ID, "r.bin", 0, make([]byte, bound+1))
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Status != http.StatusRequestEntityTooLarge || !bytes.Contains([]byte(ce.Reason), []byte("sessions.maxFileBytes")) {
		t.Fatalf("put over the bound: %v, want 413 naming sessions.maxFileBytes", err)
	}
	if f, err := c.GetFile(ctx, st.ID, "r.bin", false); err != nil || !bytes.Equal(f.Data, data) {
		t.Fatalf("after a refused put: %d bytes %v, want the file whole", len(f.Data), err)
	}

	rounds := 10
	if n, err := strconv.Atoi(os.Getenv("SANDBOX_IT_SESSION_API_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	series := func(name string, f func() error) string {
		var ds []time.Duration
		for i := -2; i < rounds; i++ { // two warm-up rounds
			t0 := time.Now()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i >= 0 {
				ds = append(ds, time.Since(t0))
			}
		}
		slices.Sort(ds)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		return fmt.Sprintf("%s: median %.2f ms, p95 %.2f ms (n %d)\n", name, ms(ds[len(ds)/2]), ms(ds[min(len(ds)-1, (len(ds)*95+99)/100-1)]), len(ds))
	}
	execTrue := func(run func() (*apiwire.SessionExecResult, error)) func() error {
		return func() error {
			res, err := run()
			if err == nil && (res == nil || res.ExitCode != 0) {
				err = fmt.Errorf("result %+v", res)
			}
			return err
		}
	}
	report := series("exec of true, API and client", execTrue(func() (*apiwire.SessionExecResult, error) {
		r, err := c.Exec(ctx, st.ID, apiwire.SessionExec{Executable: "true"}, nil)
		return &r, err
	}))
	report += series("exec of true, the kind", execTrue(func() (*apiwire.SessionExecResult, error) {
		var res *apiwire.SessionExecResult
		err := k.Exec(ctx, s, apiwire.SessionExec{Executable: "true"}, func(ev apiwire.SessionExecEvent) error {
			if ev.Type == apiwire.ExecResult {
				res = ev.Result
			}
			return nil
		})
		return res, err
	}))
	report += series("1 MiB put, raw route", func() error {
		_, err := c.PutFile(ctx, st.ID, "p.bin", 0, data)
		return err
	})
	report += series("1 MiB get, raw route", func() error {
		f, err := c.GetFile(ctx, st.ID, "p.bin", false)
		if err == nil && len(f.Data) != len(data) {
			err = fmt.Errorf("%d bytes", len(f.Data))
		}
		return err
	})
	base := "/v1/sessions/" + st.ID + "/files/"
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, "h.sock"))
	}}}
	jsonCall := func(op string, body any, out any) error {
		b, _ := json.Marshal(body)
		resp, err := hc.Post("http://h"+base+op, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	report += series("1 MiB put, JSON route", func() error {
		return jsonCall("put", apiwire.SessionPut{Path: "p.bin", Data: data}, &apiwire.SessionFile{})
	})
	report += series("1 MiB get, JSON route", func() error {
		var f apiwire.SessionFile
		err := jsonCall("get", apiwire.SessionPath{Path: "p.bin"}, &f)
		if err == nil && !bytes.Equal(f.Data, data) {
			err = errors.New("the JSON get differs from the put")
		}
		return err
	})
	t.Log("\n" + report)
	if p := os.Getenv("SANDBOX_IT_SESSION_API_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}
