package grantctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// answering is a broker socket whose every request runs h.
func answering(t *testing.T, h http.HandlerFunc) Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return Client{Socket: sock}
}

func grant() policy.Grant {
	return policy.Grant{Exec: "exec-1", Revision: 3, DeadlineUnixMs: 1, Egress: policy.DefaultEgress()}
}

// TestClientAnswers: each broker answer maps to its category, and an
// answer about another grant, a malformed or oversized one is the
// broker's failure, never success.
func TestClientAnswers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		code   int
		body   string
		bind   error
		revoke error
	}{
		{"ok", 200, `{"exec":"exec-1","revision":3,"connections":0,"requests":0}`, nil, nil},
		{"refused", 400, `{"error":"request refused"}`, ErrRefused, ErrRefused},
		{"not the host", 404, `{"error":"not found"}`, ErrRefused, ErrRefused},
		{"conflict", 409, `{"error":"grant conflict"}`, ErrConflict, ErrConflict},
		{"unknown grant", 410, `{"error":"no such grant"}`, ErrUnknownGrant, ErrUnknownGrant},
		{"unavailable", 503, `{"error":"unavailable"}`, ErrBroker, ErrBroker},
		{"another exec", 200, `{"exec":"exec-2","revision":3}`, ErrBroker, ErrBroker},
		{"unknown field", 200, `{"exec":"exec-1","revision":3,"x":1}`, ErrBroker, ErrBroker},
		{"over the bound", 200, `{"exec":"exec-1","pad":"` + strings.Repeat("x", maxAnswerBytes) + `"}`, ErrBroker, ErrBroker},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var routes []string
			c := answering(t, func(w http.ResponseWriter, r *http.Request) {
				routes = append(routes, r.URL.Path)
				w.WriteHeader(tt.code)
				if tt.name == "ok" && r.URL.Path == policy.RouteControlGrant {
					fmt.Fprint(w, `{"exec":"exec-1","revision":3}`)
					return
				}
				fmt.Fprint(w, tt.body)
			})
			if _, err := c.Bind(context.Background(), grant()); !errors.Is(err, tt.bind) || (tt.bind == nil) != (err == nil) {
				t.Errorf("Bind: %v, want %v", err, tt.bind)
			}
			a, err := c.Revoke(context.Background(), "exec-1")
			if !errors.Is(err, tt.revoke) || (tt.revoke == nil) != (err == nil) {
				t.Errorf("Revoke: %v, want %v", err, tt.revoke)
			}
			if err == nil && a.Exec != "exec-1" {
				t.Errorf("Revoke answer %+v", a)
			}
			if len(routes) != 2 || routes[0] != policy.RouteControlGrant || routes[1] != policy.RouteControlRevoke {
				t.Errorf("routes %v", routes)
			}
		})
	}
}

// TestClientBindPlaceholders: a bind's answer hands back the exec's
// placeholders and CA; an answer the exec could not carry (placeholders
// without a CA, a variable the runtime sets, a value with a space) is the
// broker's failure, never success; the answer prints without them.
func TestClientBindPlaceholders(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	const ph = "rtsbx_ph_0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		name, body string
		want       error
	}{
		{"ok", `{"exec":"exec-1","revision":3,"ca":` + fmt.Sprintf("%q", ca) + `,"env":{"GITHUB_TOKEN":"` + ph + `"}}`, nil},
		{"no CA", `{"exec":"exec-1","revision":3,"env":{"GITHUB_TOKEN":"` + ph + `"}}`, ErrBroker},
		{"runtime variable", `{"exec":"exec-1","revision":3,"ca":` + fmt.Sprintf("%q", ca) + `,"env":{"PATH":"` + ph + `"}}`, ErrBroker},
		{"value with a space", `{"exec":"exec-1","revision":3,"ca":` + fmt.Sprintf("%q", ca) + `,"env":{"GITHUB_TOKEN":"a b"}}`, ErrBroker},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := answering(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tt.body) })
			a, err := c.Bind(context.Background(), grant())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Bind: %v, want %v", err, tt.want)
			}
			if err != nil {
				if len(a.Env) != 0 || a.CA != "" {
					t.Errorf("a refused answer still carries placeholders")
				}
				return
			}
			if a.Env["GITHUB_TOKEN"] != ph || a.CA != ca {
				t.Errorf("answer %v lost its placeholder or CA", a.Env)
			}
			for _, shown := range []string{fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a)} {
				if strings.Contains(shown, ph) || !strings.Contains(shown, "GITHUB_TOKEN") {
					t.Errorf("answer printed as %q", shown)
				}
			}
		})
	}
}

// TestClientNoBroker: a socket nobody serves is ErrBroker at once.
func TestClientNoBroker(t *testing.T) {
	c := Client{Socket: filepath.Join(t.TempDir(), "absent.sock")}
	if _, err := c.Bind(context.Background(), grant()); !errors.Is(err, ErrBroker) {
		t.Errorf("Bind: %v, want ErrBroker", err)
	}
	if _, err := c.Revoke(context.Background(), "exec-1"); !errors.Is(err, ErrBroker) {
		t.Errorf("Revoke: %v, want ErrBroker", err)
	}
}

// TestClientDeadline: a broker that never answers ends the call at the
// caller's deadline with ErrBroker (the caller must then end the broker).
func TestClientDeadline(t *testing.T) {
	arrived := make(chan struct{}, 1)
	c := answering(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	if _, err := c.Revoke(ctx, "exec-1"); !errors.Is(err, ErrBroker) {
		t.Errorf("Revoke past the deadline: %v, want ErrBroker", err)
	}
	// A call without a deadline gets DefaultTimeout's.
	if DefaultTimeout <= 0 || DefaultTimeout > time.Minute {
		t.Errorf("DefaultTimeout %s", DefaultTimeout)
	}
}

// TestRevisionsGrow: revisions grow with the clock, and by one when it
// stands still or steps back.
func TestRevisionsGrow(t *testing.T) {
	var r Revisions
	at := time.Unix(100, 0)
	a := r.Next(at)
	b := r.Next(at)
	c := r.Next(at.Add(-time.Hour))
	d := r.Next(at.Add(time.Second))
	if !(a == at.UnixNano() && b == a+1 && c == b+1 && d == at.Add(time.Second).UnixNano()) {
		t.Errorf("revisions %d %d %d %d", a, b, c, d)
	}
}
