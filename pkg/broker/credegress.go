package broker

import (
	"errors"
	"io"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/egress"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// egressInjector gives the proxy route a granted destination's credential
// for one request (egress.Injector): loaded afresh each time (a rotated
// file takes effect at once), revealed only as the header is written, and
// the answer checked with the model route's reflection rules against both
// the value and the header built from it.
type egressInjector struct{ creds Credentials }

func (e egressInjector) Open(c policy.EgressCredential) (egress.Injection, error) {
	s, err := e.creds.Load(c.Credential)
	if err != nil {
		return nil, err
	}
	value := credential.NewSecret(c.HeaderValue(s.Reveal()))
	return injection{value: value, m: credential.NewMatcher(s, value)}, nil
}

type injection struct {
	value credential.Secret
	m     *credential.Matcher
}

func (i injection) Value() string                     { return i.value.Reveal() }
func (i injection) HeaderReflects(h http.Header) bool { return i.m.HeaderReflects(h) }
func (i injection) Guard(r io.Reader) io.Reader       { return reflectedAs{i.m.Guard(r)} }

// reflectedAs reports credential.ErrReflected as the proxy's sentinel.
type reflectedAs struct{ r io.Reader }

func (g reflectedAs) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	if errors.Is(err, credential.ErrReflected) {
		err = egress.ErrReflected
	}
	return n, err
}
