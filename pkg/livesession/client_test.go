package livesession

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// TestClientDrivesTheKind: the Go client against the kind's routes over a
// socket: create, exec with streamed output and the command's status,
// files in and out, list, pause, resume, close; an exec the host refuses
// is the host's status.
func TestClientDrivesTheKind(t *testing.T) {
	r := newRig(t, nil)
	dir, err := os.MkdirTemp("/tmp", "sess")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sandboxtest.Handler(Registration, r.k.Routes(), peerauth.RoleClient, alice)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := client.New(sock)
	ctx := context.Background()

	st, err := c.CreateSession(ctx, apiwire.SessionCreate{})
	if err != nil || st.State != apiwire.SessionRunning || st.OwnerUID != alice {
		t.Fatalf("create: %+v %v", st, err)
	}
	var out []byte
	var types []string
	res, err := c.Exec(ctx, st.ID, apiwire.SessionExec{Command: "echo hello"}, func(ev apiwire.SessionExecEvent) error {
		types = append(types, ev.Type)
		out = append(out, ev.Data...)
		return nil
	})
	if err != nil || res.ExitCode != 0 || string(out) != "hello\n" || len(types) != 3 || types[0] != apiwire.ExecStarted {
		t.Fatalf("exec: %+v %v %q %v", res, err, out, types)
	}
	if res, err := c.Exec(ctx, st.ID, apiwire.SessionExec{Command: "exit 3"}, nil); err != nil || res.ExitCode != 3 {
		t.Errorf("exit 3: %+v %v", res, err)
	}
	_, err = c.Exec(ctx, st.ID, apiwire.SessionExec{Command: "x", Network: true}, nil)
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Status != http.StatusBadRequest {
		t.Errorf("network exec in a session without network: %v, want 400", err)
	}
	if _, err := c.PutFile(ctx, st.ID, "f.txt", 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if f, err := c.GetFile(ctx, st.ID, "f.txt", false); err != nil || string(f.Data) != "data" {
		t.Errorf("get: %+v %v", f, err)
	}
	if l, err := c.ListFiles(ctx, st.ID, "."); err != nil || len(l.Entries) != 1 {
		t.Errorf("list: %+v %v", l, err)
	}
	if st, err := c.PauseSession(ctx, st.ID); err != nil || st.State != apiwire.SessionPaused {
		t.Errorf("pause: %+v %v", st, err)
	}
	if st, err := c.ResumeSession(ctx, st.ID); err != nil || st.State != apiwire.SessionRunning {
		t.Errorf("resume: %+v %v", st, err)
	}
	if all, err := c.Sessions(ctx); err != nil || len(all) != 1 {
		t.Errorf("list sessions: %v %v", all, err)
	}
	if _, err := c.CloseSession(ctx, st.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Session(ctx, st.ID); !errors.Is(err, &client.Error{Status: http.StatusNotFound}) {
		t.Errorf("closed session: %v", err)
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestExecsShareAConnection: the exec stream's last event goes out with
// the stream's end and the client reads it to that end, so consecutive
// execs (and a file put between them) reuse one connection: a new one
// costs the host an accept and its peer's credentials and groups.
func TestExecsShareAConnection(t *testing.T) {
	r := newRig(t, nil)
	dir, err := os.MkdirTemp("/tmp", "sess")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "h.sock"))
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := &http.Server{Handler: sandboxtest.Handler(Registration, r.k.Routes(), peerauth.RoleClient, alice)}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	c := client.New(filepath.Join(dir, "h.sock"))
	ctx := context.Background()
	st, err := c.CreateSession(ctx, apiwire.SessionCreate{})
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range slices.Repeat([]string{"echo one", "exit 3", "echo two"}, 30) {
		if _, err := c.Exec(ctx, st.ID, apiwire.SessionExec{Command: cmd}, nil); err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		if _, err := c.PutFile(ctx, st.ID, "f", 0, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := cl.n.Load(); n != 1 {
		t.Errorf("%d connections for a create, 90 execs and 90 puts, want 1", n)
	}
}
