package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// TestIntegrationDockerImageRunsSealed runs the built worker image under the DESIGN.md
// section 4 security flags with a fake broker on a Unix socket in a
// bind-mounted directory, and gets a reply.
// Enable with SANDBOX_IT_DOCKER=unix:///path/docker.sock (after `make image`
// or `docker load -i dist/worker-image.tar`); SANDBOX_IT_IMAGE overrides the
// image, SANDBOX_IT_USER the uid:gid (default 65534:65534).
func TestIntegrationDockerImageRunsSealed(t *testing.T) {
	host := os.Getenv("SANDBOX_IT_DOCKER")
	if host == "" {
		t.Skip("integration test: set SANDBOX_IT_DOCKER=unix:///path/docker.sock to run the worker image in a real dockerd")
	}
	img := os.Getenv("SANDBOX_IT_IMAGE")
	if img == "" {
		img = os.Getenv("SANDBOX_IT_WORKER_IMAGE") // set by test/integration.sh
	}
	if img == "" {
		img = "roundtable-sandbox-worker:latest"
	}
	user := os.Getenv("SANDBOX_IT_USER")
	if user == "" {
		user = "65534:65534"
	}
	var uid, gid int
	if _, err := fmtSscan(user, &uid, &gid); err != nil || uid == 0 {
		t.Fatalf("SANDBOX_IT_USER %q must be a non-root uid:gid", user)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		t.Fatalf("image %s missing (run make image): %v", img, err)
	}

	// Fake broker on brokerDir/broker.sock.
	brokerDir := t.TempDir()
	os.Chmod(brokerDir, 0o755)
	sock := filepath.Join(brokerDir, "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o666)
	var mu sync.Mutex
	var routes []string
	steps := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		routes = append(routes, r.Method+" "+r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer "+protocol.DummyAPIKey {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		io.Copy(io.Discard, r.Body)
		steps++
		if steps == 1 {
			io.WriteString(w, `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"memory_set","arguments":"{\"scope\":\"channel\",\"key\":\"it\",\"text\":\"stored\"}"}}]}}]}`)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"integration ok"}}]}`)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	workspace := t.TempDir()
	if err := os.Chown(workspace, uid, gid); err != nil {
		t.Fatalf("chown workspace (the test runs as root or as that uid): %v", err)
	}

	mem := int64(512 << 20)
	cfg := &container.Config{
		Image:        img,
		User:         user,
		Env:          []string{protocol.EnvBrokerSocket + "=" + protocol.BrokerSocketPath, protocol.EnvAPIKey + "=" + protocol.DummyAPIKey},
		OpenStdin:    true,
		StdinOnce:    true,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	}
	pids := int64(64)
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Binds:          []string{workspace + ":/workspace:rw,rprivate", brokerDir + ":/run/broker:ro,rprivate"},
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=16m"},
		Resources:      container.Resources{Memory: mem, MemorySwap: mem, NanoCPUs: 1e9, PidsLimit: &pids},
		LogConfig:      container.LogConfig{Type: "none"},
	}
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	att, err := cli.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	turn, _ := json.Marshal(protocol.Turn{Text: "hi", Speaker: protocol.Speaker{ID: "u", Name: "n"}, Model: "m", Prompt: "p", TimeZone: "Europe/Berlin"})
	att.Conn.Write(turn)
	att.CloseWrite()
	var stdout, stderr bytes.Buffer
	stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(att.Reader, 1<<20))
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	var code int64
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		t.Fatal(err)
	}
	reply, err := protocol.DecodeReply(stdout.Bytes())
	if err != nil || code != 0 || !reply.OK || reply.Text != "integration ok" {
		t.Fatalf("exit %d reply %q err %v\nstderr: %s", code, stdout.String(), err, stderr.String())
	}
	mu.Lock()
	if got := strings.Join(routes, ","); got != "POST /model,POST /model" {
		t.Errorf("broker saw %s", got)
	}
	mu.Unlock()
	if b, err := os.ReadFile(filepath.Join(workspace, "memory.json")); err != nil || !strings.Contains(string(b), `"it"`) {
		t.Errorf("memory.json = %s, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(workspace, HistoryFile)); err != nil {
		t.Errorf("history.json: %v", err)
	}
	if strings.Contains(stderr.String(), "integration ok") || !strings.Contains(stderr.String(), `"msg":"turn finished"`) {
		t.Errorf("worker stderr: %s", stderr.String())
	}
}

func fmtSscan(s string, uid, gid *int) (int, error) {
	return fmt.Sscanf(s, "%d:%d", uid, gid)
}
