package broker

// The run's placeholders and CA (docs/credentialed-egress.md): minted when
// the broker starts, for the granted credentials that declare a variable;
// the CA's key stays in this process's memory (pkg/runca), the
// placeholders and the CA certificate are handed to the run's supervisor
// on wire.RunEnvPath, and the proxy route intercepts exactly those
// destinations (pkg/egress intercept.go).

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/egress"
	"github.com/roundtable-sandbox/sandbox/pkg/placeholder"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runca"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// caMargin keeps the run CA valid a little past the run's deadline.
const caMargin = time.Hour

// runEnv is what the run's supervisor reads: the answer is built once.
type runEnv struct{ body []byte }

// withInterception mints the run's placeholders and CA for the grant's
// credentials that declare a variable and has proxy intercept them; nil
// runEnv when none does.
func withInterception(proxy *egress.Proxy, g *policy.Egress, creds Credentials, now time.Time, deadline time.Time) (*egress.Proxy, *runEnv, error) {
	proxy, e, err := mintInterception(proxy, g, creds, now, deadline)
	if err != nil || e == nil {
		return proxy, nil, err
	}
	body, err := json.Marshal(*e)
	if err != nil {
		return nil, nil, err
	}
	return proxy, &runEnv{body: body}, nil
}

// mintInterception mints placeholders and a CA valid until deadline (a
// run's, or one session exec's grant: grant.go) for g's credentials that
// declare a variable and has proxy intercept them; nil RunEnv when none
// does. The CA's key stays in the returned proxy.
func mintInterception(proxy *egress.Proxy, g *policy.Egress, creds Credentials, now time.Time, deadline time.Time) (*egress.Proxy, *wire.RunEnv, error) {
	phs := map[string]placeholder.Placeholder{}
	env := map[string]string{}
	var hosts []string
	for _, c := range g.Credentials {
		if c.Env == "" {
			continue
		}
		ph, err := placeholder.New()
		if err != nil {
			return nil, nil, err
		}
		phs[c.Name], env[c.Env] = ph, ph.Reveal()
		hosts = append(hosts, c.Host)
	}
	if len(phs) == 0 {
		return proxy, nil, nil
	}
	ca, err := runca.New(hosts, now, deadline.Sub(now)+caMargin)
	if err != nil {
		return nil, nil, err
	}
	proxy, err = proxy.WithInterception(ca, egressInjector{creds}, phs)
	if err != nil {
		return nil, nil, err
	}
	return proxy, &wire.RunEnv{CA: string(ca.CertPEM()), Env: env}, nil
}

// serveRunEnv answers wire.RunEnvPath when the run has placeholders.
func (b *Broker) serveRunEnv(w http.ResponseWriter, r *http.Request) bool {
	if b.runEnv == nil || r.URL.Path != wire.RunEnvPath {
		return false
	}
	b.runEnv.serve(w, r)
	return true
}

// serve answers wire.RunEnvPath (GET only).
func (e *runEnv) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet {
		h.Set("Connection", "close")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(e.body)
}

// OpenRaw is egress.Interceptor's: the raw value and the checks of an
// answer against it (in every form the reflection rules know).
func (e egressInjector) OpenRaw(c policy.EgressCredential) (string, egress.Injection, error) {
	s, err := e.creds.Load(c.Credential)
	if err != nil {
		return "", nil, err
	}
	return s.Reveal(), injection{m: credential.NewMatcher(s)}, nil
}

// Screen is egress.Interceptor's: a matcher of texts as secrets.
func (e egressInjector) Screen(texts ...string) egress.Screen {
	s := make([]credential.Secret, len(texts))
	for i, t := range texts {
		s[i] = credential.NewSecret(t)
	}
	return screen{credential.NewMatcher(s...)}
}

type screen struct{ m *credential.Matcher }

func (s screen) HeaderReflects(h http.Header) bool { return s.m.HeaderReflects(h) }
func (s screen) TextReflects(v string) bool        { return s.m.TextReflects(v) }
func (s screen) Guard(r io.Reader) io.Reader       { return reflectedAs{s.m.Guard(r)} }
