package fleetconn

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestConnectRefusesBadSettings: each setting Connect refuses is refused
// before any dial, naming the key, and a URL's password never shows in the
// error.
func TestConnectRefusesBadSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"empty url", Options{}, "fleet.url is empty"},
		{"not a url", Options{URL: "tls://"}, "is not a URL"},
		{"credentials", Options{URL: "tls://box:s3cret@127.0.0.1:4222"}, "must not carry credentials"},
		{"plain nats", Options{URL: "tls://127.0.0.1:4222,nats://127.0.0.1:4223"}, "the scheme must be tls://"},
		{"cert without key", Options{URL: "tls://127.0.0.1:4222", CertFile: "c.pem"}, "fleet.tls.cert and fleet.tls.key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := Connect(tt.o)
			if nc != nil {
				nc.Close()
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalid naming %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows the URL's password: %v", err)
			}
		})
	}
}

// TestRedactedURLs: a URL's password never reaches a log line.
func TestRedactedURLs(t *testing.T) {
	got := redactedURLs("tls://a:pw@h1:4222, tls://h2:4222")
	if want := "tls://a:xxxxx@h1:4222,tls://h2:4222"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestDeadConnectionIsBelievedAtMostDeadAfter: the pings and a blocked
// write both give a dead connection up within DeadAfter. A cut link fills
// the socket's send buffer, and nats.go's default write timeout (a
// minute) then kept a frontend on a cut server for 70 s: the pings cannot
// tell while a write holds the connection.
func TestDeadConnectionIsBelievedAtMostDeadAfter(t *testing.T) {
	var got nats.Options
	for _, opt := range baseOptions(Options{Name: "t"}, slog.Default()) {
		if err := opt(&got); err != nil {
			t.Fatal(err)
		}
	}
	if got.FlusherTimeout <= 0 || got.FlusherTimeout > DeadAfter {
		t.Errorf("FlusherTimeout = %v, want within (0, %v]", got.FlusherTimeout, DeadAfter)
	}
	if pings := got.PingInterval * time.Duration(got.MaxPingsOut+1); pings > DeadAfter {
		t.Errorf("pings give a dead connection up after %v, want at most %v", pings, DeadAfter)
	}
}
