package fleetnats

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// ConnectTimeout bounds one connection attempt (TCP, TLS, login).
const ConnectTimeout = 5 * time.Second

// ErrClient is the category of a box's connection that cannot even be
// tried: unreadable or unsafe TLS or nkey files.
var ErrClient = errors.New("fleet connection")

// ClientOptions are the nats.go options of a box's connection: TLS 1.2+
// verifying the server against fleet.tls.ca and presenting the box's
// certificate (fleet.tls.cert and .key), the user of
// fleet.nkeySeedFile (the seed file must be unreadable by others), a
// bounded connect and the box's name.
func ClientOptions(f config.Fleet) ([]nats.Option, error) {
	pem, err := os.ReadFile(f.TLS.CA)
	if err != nil {
		return nil, fmt.Errorf("fleet.tls.ca: %w: %w", err, ErrClient)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("fleet.tls.ca: %s holds no PEM certificate: %w", f.TLS.CA, ErrClient)
	}
	pair, err := tls.LoadX509KeyPair(f.TLS.Cert, f.TLS.Key)
	if err != nil {
		return nil, fmt.Errorf("fleet.tls.cert and fleet.tls.key: %w: %w", err, ErrClient)
	}
	st, err := os.Stat(f.NkeySeedFile)
	if err != nil {
		return nil, fmt.Errorf("fleet.nkeySeedFile: %w: %w", err, ErrClient)
	}
	if st.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("fleet.nkeySeedFile: %s is readable by others (mode %v): chmod o-rwx it: %w", f.NkeySeedFile, st.Mode().Perm(), ErrClient)
	}
	nk, err := nats.NkeyOptionFromSeed(f.NkeySeedFile)
	if err != nil {
		// nats.go's message names the file, never its content.
		return nil, fmt.Errorf("fleet.nkeySeedFile: %v: %w", err, ErrClient)
	}
	return []nats.Option{
		nats.Secure(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}),
		nk,
		nats.Name("sandbox " + f.Box),
		nats.Timeout(ConnectTimeout),
		nats.RetryOnFailedConnect(false),
	}, nil
}

// Connect opens a box's connection to fleet.url.
func Connect(f config.Fleet, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := ClientOptions(f)
	if err != nil {
		return nil, err
	}
	return nats.Connect(strings.Join(f.FleetURLs(), ","), append(opts, extra...)...)
}
