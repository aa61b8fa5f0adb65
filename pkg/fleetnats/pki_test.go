package fleetnats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// testPKI is a CA made for one test and one box certificate it signed for
// 127.0.0.1 (server and client use, as routes need both), all as PEM
// files in dir.
type testPKI struct {
	dir   string
	files TLSFiles
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test fleet CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	boxKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	boxTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "box"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	boxDER, err := x509.CreateCertificate(rand.Reader, boxTmpl, ca, &boxKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(boxKey)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{dir: dir, files: TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "box.pem"), Key: filepath.Join(dir, "box.key")}}
	writePEM(t, p.files.CA, "CERTIFICATE", caDER)
	writePEM(t, p.files.Cert, "CERTIFICATE", boxDER)
	writePEM(t, p.files.Key, "EC PRIVATE KEY", keyDER)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newUser makes a user nkey, writes its seed to dir (0600) and returns the
// public key and the seed file.
func newUser(t *testing.T, dir, name string) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile = filepath.Join(dir, name+".nkey")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, seedFile
}

// testFleet is a fleet of one box on loopback with a random client port.
func testFleet(t *testing.T, p testPKI, boxes ...config.FleetBox) config.Fleet {
	return config.Fleet{
		Enabled: true, Box: "box-a", Partitions: 4, Replicas: 1,
		TLS: config.FleetTLS{CA: p.files.CA, Cert: p.files.Cert, Key: p.files.Key},
		Server: config.FleetServer{
			Listen: "127.0.0.1:-1", ClusterListen: "127.0.0.1:-1",
			StoreDir: filepath.Join(t.TempDir(), "js"), Boxes: boxes,
		},
	}
}
