package broker

import (
	"errors"
	"io"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/egress"
)

// egressInjector gives the interception a granted destination's
// credential for one request (egress.Interceptor, intercept.go): loaded
// afresh each time (a rotated file takes effect at once), and the answer
// checked with the model route's reflection rules.
type egressInjector struct{ creds Credentials }

type injection struct{ m *credential.Matcher }

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
