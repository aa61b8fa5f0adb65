// Package fleettest runs a real NATS JetStream cluster inside a test
// process: servers on loopback, file storage under the test's temporary
// directory, stopped by the test's cleanup. Guarantee: Start returns only
// once the cluster has a JetStream meta leader and every server is ready
// for clients, or fails the test; nothing listens beyond 127.0.0.1.
package fleettest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	Servers []*server.Server
	t       testing.TB
}

// readyTimeout bounds one server's start and the meta leader's election;
// on a loaded two-core machine an election takes a few seconds.
const readyTimeout = 30 * time.Second

// Option changes the servers' options.
type Option func(*server.Options)

// SyncAlways syncs every write before its acknowledgement, as the fleet's
// servers do (sync_interval: always, docs/fleet.md): for measuring what a
// turn costs; tests need not pay for it.
func SyncAlways() Option {
	return func(o *server.Options) { o.SyncAlways = true }
}

// Start runs n clustered JetStream servers (n >= 1; n == 1 is a plain
// JetStream server) and stops them when the test ends.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	var lastErr error
	// Free ports are taken by binding :0 and releasing them; another process
	// may grab one in between, so a failed start is retried on new ports.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := start(t, n, opts)
		if err == nil {
			t.Cleanup(c.Shutdown)
			return c
		}
		lastErr = err
	}
	t.Fatalf("fleettest: start %d servers: %v", n, lastErr)
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func start(t testing.TB, n int, opts []Option) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	var routes []*url.URL
	for i := 0; i < n; i++ {
		routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(ports[n+i])})
	}
	c := &Cluster{t: t}
	for i := 0; i < n; i++ {
		o := &server.Options{
			ServerName: "s" + strconv.Itoa(i+1),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   filepath.Join(dir, "s"+strconv.Itoa(i+1)),
			NoLog:      true,
			NoSigs:     true,
		}
		for _, opt := range opts {
			opt(o)
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "fleettest", Host: "127.0.0.1", Port: ports[n+i]}
			o.Routes = routes
		}
		s, err := server.NewServer(o)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		go s.Start()
		if !s.ReadyForConnections(readyTimeout) {
			s.Shutdown()
			c.Shutdown()
			return nil, fmt.Errorf("server %s not ready within %s", o.ServerName, readyTimeout)
		}
		c.Servers = append(c.Servers, s)
	}
	if err := c.waitMetaLeader(); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// waitMetaLeader waits until a client can use the JetStream API: the meta
// group has a leader (a steady state, so polling cannot miss it).
func (c *Cluster) waitMetaLeader() error {
	nc, err := nats.Connect(c.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	backoff := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no JetStream meta leader within %s: %w", readyTimeout, err)
		}
		time.Sleep(backoff) // retrying a steady condition, not waiting out a race
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// URL is every server's client URL, comma-separated (what nats.Connect takes).
func (c *Cluster) URL() string {
	u := ""
	for i, s := range c.Servers {
		if i > 0 {
			u += ","
		}
		u += s.ClientURL()
	}
	return u
}

// Shutdown stops every server and waits for it.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
}

// Connect returns a plain (test-only, no TLS) client connection to the
// cluster, closed when the test ends.
func (c *Cluster) Connect(name string) *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.URL(), nats.Name(name), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		c.t.Fatalf("fleettest: connect %s: %v", name, err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}
