package supervisor

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

func testCAPEM(t *testing.T) string {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "run CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// fakeRunEnvBroker answers wire.RunEnvPath on a unix socket with status
// and body, every connection.
func fakeRunEnvBroker(t *testing.T, sock string, status int, body []byte) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil || req.URL.Path != wire.RunEnvPath {
					c.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
					return
				}
				resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(body)),
					Body: http.NoBody, Header: http.Header{}}
				if len(body) > 0 {
					resp.Body = readCloser{strings.NewReader(string(body))}
				}
				resp.Close = true
				resp.Write(c)
			}()
		}
	}()
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

// TestRunEnvPlaceholdersAndBundle: a job with credentialed hosts gets each
// placeholder in its variable, one bundle (system roots, then the run CA)
// named by every CA variable, and no NO_PROXY: nothing bypasses the bridge.
func TestRunEnvPlaceholdersAndBundle(t *testing.T) {
	d := newDirs(t)
	ca := testCAPEM(t)
	os.WriteFile(filepath.Join(d.base, "roots.pem"), []byte("SYSTEM-ROOTS\n"), 0o644)
	body, _ := json.Marshal(wire.RunEnv{CA: ca, Env: map[string]string{"GITHUB_TOKEN": "rtsbx_ph_00112233445566778899aabbccddeeff"}})
	sock := filepath.Join(d.base, "broker.sock")
	fakeRunEnvBroker(t, sock, 200, body)
	j := baseJob()
	j.Proxy = true
	j.Placeholders = true
	j.Command = `echo "$GITHUB_TOKEN"; for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS GIT_SSL_CAINFO CURL_CA_BUNDLE PIP_CERT; do printenv $v; done; echo "[$NO_PROXY$no_proxy]"; cat "$SSL_CERT_FILE"`
	o := run(t, j, runConfig{d: d, broker: sock})
	if o.code != 0 || o.result.ExitCode != 0 {
		t.Fatalf("exit %d, result %+v, stderr %q (log: %s)", o.code, o.result, o.out["stderr/main"], o.log)
	}
	bundle := filepath.Join(d.base, "egress", "ca-bundle.pem")
	want := "rtsbx_ph_00112233445566778899aabbccddeeff\n" + strings.Repeat(bundle+"\n", 6) + "[]\nSYSTEM-ROOTS\n\n" + ca
	if got := o.out["stdout/main"]; got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(bundle); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle: %v %v", fi, err)
	}
}

// TestRunEnvRefusals: a broker without placeholders (404) gives none and
// the run goes on; an answer naming a variable the supervisor sets, or no
// broker at all, fails the run before any command.
func TestRunEnvRefusals(t *testing.T) {
	ca := testCAPEM(t)
	for _, tc := range []struct {
		name   string
		status int
		env    map[string]string
		ok     bool
	}{
		{"no placeholders", 404, nil, true},
		{"PATH", 200, map[string]string{"PATH": "rtsbx_ph_00112233445566778899aabbccddeeff"}, false},
		{"proxy", 200, map[string]string{"https_proxy": "x"}, false},
		{"CA variable", 200, map[string]string{"SSL_CERT_FILE": "x"}, false},
		{"broker error", 500, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			var body []byte
			if tc.status == 200 {
				body, _ = json.Marshal(wire.RunEnv{CA: ca, Env: tc.env})
			}
			sock := filepath.Join(d.base, "broker.sock")
			fakeRunEnvBroker(t, sock, tc.status, body)
			j := baseJob()
			j.Proxy = true
			j.Placeholders = true
			j.Command = "echo ran"
			o := run(t, j, runConfig{d: d, broker: sock})
			if tc.ok && (o.code != 0 || o.out["stdout/main"] != "ran\n") {
				t.Errorf("exit %d, result %+v, output %q", o.code, o.result, o.out)
			}
			if !tc.ok && (o.result.Error != errBridge || o.out["stdout/main"] != "") {
				t.Errorf("exit %d, result %+v, output %q, want %q and nothing run", o.code, o.result, o.out, errBridge)
			}
		})
	}
}
