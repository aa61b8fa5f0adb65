// Package everything runs the official MCP reference server,
// @modelcontextprotocol/server-everything (pinned in test/peers/package.json),
// for integration tests, in Streamable HTTP mode.
//
// Guarantee: the server is reachable only from the test that started it.
// It listens on every interface and cannot be told otherwise (it reads only
// PORT), so the test re-runs itself in a network namespace of its own
// (unshare --net, loopback up, nothing else): the server can neither be
// reached from nor reach anything outside. Every server process is killed
// when the test ends.
package everything

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Switch names the environment variable that enables the tests: the path to
// the server's node_modules/.bin entry, or to a directory holding it
// (test/peers, test/peers/node_modules or its .bin).
const Switch = "SANDBOX_IT_MCP_EVERYTHING"

// SkipReason names the environment variable in which test/integration.sh
// says why it left Switch unset (this machine's Node.js is too old for the
// server), so the skip line names the cause.
const SkipReason = "SANDBOX_IT_MCP_EVERYTHING_SKIP"

// inNetns marks the re-run of a test inside its private network namespace.
const inNetns = "SANDBOX_IT_MCP_EVERYTHING_NETNS"

const binName = "mcp-server-everything"

// Bin returns the server's executable, skipping the test when Switch is
// unset and failing it when Switch names nothing usable.
func Bin(t *testing.T) string {
	t.Helper()
	v := os.Getenv(Switch)
	if why := os.Getenv(SkipReason); v == "" && why != "" {
		t.Skipf("reference MCP server test skipped: %s", why)
	}
	if v == "" {
		t.Skipf("reference MCP server test skipped: set %s to test/peers/node_modules/.bin/%s (npm ci --prefix test/peers; test/integration.sh does both)", Switch, binName)
	}
	for _, p := range []string{v, filepath.Join(v, binName), filepath.Join(v, ".bin", binName), filepath.Join(v, "node_modules", ".bin", binName)} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatalf("%s: %v", Switch, err)
			}
			return abs
		}
	}
	t.Fatalf("%s=%q: no %s there (run npm ci --prefix test/peers)", Switch, v, binName)
	return ""
}

// InPrivateNetwork reports whether the test already runs in its own network
// namespace. When it does not, it runs the test (t.Name(), a top-level test)
// again in a fresh one, reports that run's outcome on t, and returns false:
// the caller then returns at once.
func InPrivateNetwork(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inNetns) == "1" {
		ifs, err := net.Interfaces()
		if err != nil {
			t.Fatalf("listing interfaces: %v", err)
		}
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback == 0 {
				t.Fatalf("interface %s in the private network namespace: the reference server would be reachable", i.Name)
			}
		}
		return true
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("InPrivateNetwork must be called from a top-level test, not %s", t.Name())
	}
	args := []string{"--net"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user") // an unprivileged user namespace
	}
	args = append(args, "--", "sh", "-c", `ip link set lo up && exec "$@"`, "sh",
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = append(os.Environ(), inNetns+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a private network namespace (unshare --net):\n%s", out)
	if err != nil {
		t.Fatalf("the run in a private network namespace failed: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the run in a private network namespace did not pass %s", t.Name())
	}
	return false
}

// Server is one reference server on a fixed loopback port, restartable.
type Server struct {
	t    *testing.T
	bin  string
	port int
	home string

	mu   sync.Mutex
	out  bytes.Buffer // output of every incarnation
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the server in Streamable HTTP mode and waits until it
// accepts connections. Call it only after InPrivateNetwork returned true.
func Start(t *testing.T, bin string) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, bin: bin, port: port, home: t.TempDir()}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("reference server output:\n%s", s.Output())
		}
	})
	s.start()
	return s
}

// URL is the server's MCP endpoint.
func (s *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d/mcp", s.port) }

// Restart stops the server (SIGTERM, as a service manager would) and starts
// a new process on the same port: it knows none of the old sessions.
func (s *Server) Restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// Output is what every incarnation printed so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// WaitOutput reports whether the server printed want within timeout. The
// server's stdout reaches us through a pipe, so a line about a request it
// has already answered can arrive a little after the answer.
func (s *Server) WaitOutput(want string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(s.Output(), want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, "streamableHttp")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.home, "PORT=" + strconv.Itoa(s.port), "NODE_ENV=production"}
	cmd.Stdout, cmd.Stderr = s, s
	// Its own process group, killed with the test process if that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			s.t.Fatalf("reference server exited at start:\n%s", s.Output())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("reference server did not listen on port %d within 30 s:\n%s", s.port, s.Output())
		}
	}
}

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}
