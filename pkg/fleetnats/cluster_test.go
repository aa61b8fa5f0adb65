package fleetnats

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats/serve"
)

// freePorts binds n loopback ports and releases them (another process may
// take one in between: startCluster retries on new ports).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// startCluster runs three boxes' sandbox-nats from their generated
// configurations (routes over mutual TLS) and returns them with the
// fleet of box-a (R3, fleet.url all three).
func startCluster(t *testing.T) ([]*server.Server, config.Fleet) {
	t.Helper()
	p := newPKI(t)
	names := []string{"box-a", "box-b", "box-c"}
	var boxes []config.FleetBox
	var seedA string
	for _, n := range names {
		pub, seed := newUser(t, p.dir, n)
		boxes = append(boxes, config.FleetBox{Name: n, NKey: pub})
		if n == "box-a" {
			seedA = seed
		}
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		ports := freePorts(t, 6)
		var routes, urls []string
		for i := range names {
			routes = append(routes, "tls://127.0.0.1:"+strconv.Itoa(ports[3+i]))
			urls = append(urls, "tls://127.0.0.1:"+strconv.Itoa(ports[i]))
		}
		var servers []*server.Server
		ok := true
		for i, n := range names {
			f := testFleet(t, p, boxes...)
			f.Box, f.Replicas = n, 3
			f.Server.Listen = "127.0.0.1:" + strconv.Itoa(ports[i])
			f.Server.ClusterListen = "127.0.0.1:" + strconv.Itoa(ports[3+i])
			f.Server.Routes = routes
			conf, err := ServerConfig(f, p.files)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600)
			os.WriteFile(filepath.Join(dir, "k"), []byte(testKey), 0o600)
			opts, err := serve.Options(filepath.Join(dir, "nats.conf"), filepath.Join(dir, "k"))
			if err != nil {
				t.Fatal(err)
			}
			opts.NoSigs, opts.NoLog = true, true
			s, err := serve.Start(opts, 20*time.Second)
			if err != nil {
				last, ok = err, false
				break
			}
			servers = append(servers, s)
		}
		if ok {
			t.Cleanup(func() {
				for _, s := range servers {
					s.Shutdown()
					s.WaitForShutdown()
				}
			})
			f := testFleet(t, p, boxes...)
			f.Replicas, f.NkeySeedFile, f.URL = 3, seedA, strings.Join(urls, ",")
			return servers, f
		}
		for _, s := range servers {
			s.Shutdown()
		}
	}
	t.Fatalf("cluster did not start: %v", last)
	return nil, config.Fleet{}
}

// waitStream waits until cond holds for the stream's info: a steady state
// of the cluster (a leader elected, a replica caught up or declared
// offline), which a poll cannot miss.
func waitStream(t *testing.T, js jetstream.JetStream, name string, cond func(*jetstream.StreamInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, name)
		cancel()
		if err == nil && cond(s.CachedInfo()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: condition not reached in 30 s (%v)", name, err)
		}
		time.Sleep(50 * time.Millisecond) // retrying a steady condition
	}
}

// TestClusterHealth: three servers from generated configurations form a
// cluster over their TLS routes; R3 family streams are healthy for doctor;
// with one server gone every stream names it.
func TestClusterHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server cluster")
	}
	servers, f := startCluster(t)
	nc, err := Connect(f)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(30 * time.Second)
	for { // the meta leader: a steady state
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamTurns, Subjects: []string{"sandbox.turns.>"}, Replicas: 3})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no R3 stream in 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	allCurrent := func(i *jetstream.StreamInfo) bool {
		if i.Cluster == nil || i.Cluster.Leader == "" || len(i.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range i.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	}
	waitStream(t, js, StreamTurns, allCurrent)
	ctx := context.Background()
	c := findings(Health(ctx, f))["stream "+StreamTurns]
	if c.Status != StatusOK || !strings.Contains(c.Detail, "3 replicas, leader box-") {
		t.Errorf("healthy R3: %+v", c)
	}
	// The stream's leader and the meta leader stay (the API answers);
	// one other server goes.
	s, _ := js.Stream(ctx, StreamTurns)
	leader := s.CachedInfo().Cluster.Leader
	var gone string
	for _, srv := range servers {
		if srv.Name() != leader && !srv.JetStreamIsLeader() {
			gone = srv.Name()
			srv.Shutdown()
			srv.WaitForShutdown()
			break
		}
	}
	waitStream(t, js, StreamTurns, func(i *jetstream.StreamInfo) bool {
		for _, r := range i.Cluster.Replicas {
			if r.Name == gone && (r.Offline || !r.Current) {
				return true
			}
		}
		return false
	})
	all := Health(ctx, f)
	c = findings(all)["stream "+StreamTurns]
	if c.Status != StatusFail || !strings.Contains(c.Detail, gone) {
		t.Errorf("one server gone (%s): %+v (all: %+v)", gone, c, all)
	}
}
