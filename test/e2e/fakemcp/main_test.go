package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWebPage(t *testing.T) {
	h := webPage(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tests := []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/notes", 200, "<title>Roundtable demo notes</title>"},
		{http.MethodGet, "/", 200, "the meeting moved to Thursday"},
		{http.MethodPost, "/notes", 405, "GET only"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
		if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.body) {
			t.Errorf("%s %s = %d %q, want %d with %q", tt.method, tt.path, w.Code, w.Body, tt.status, tt.body)
		}
	}
}

func TestDemoAPI(t *testing.T) {
	const token = "demo-api-0123456789abcdef"
	cert, certPEM, err := selfSigned(net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(demoAPI(slog.New(slog.NewTextHandler(io.Discard, nil)), token))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("the certificate PEM does not parse")
	}
	// Verified against its own certificate only, for 127.0.0.1.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	tests := []struct {
		auth   string
		status int
		body   string
	}{
		{"Bearer " + token, 200, "the bearer token was accepted (GET /v1/me)"},
		{"", 401, "a bearer token is required"},
		{"Bearer " + token + "x", 401, "a bearer token is required"},
		{"token " + token, 401, "a bearer token is required"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/me", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", tt.auth, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.body) || strings.Contains(string(body), token) {
			t.Errorf("%q: got %d %q, want %d with %q and never the token", tt.auth, resp.StatusCode, body, tt.status, tt.body)
		}
	}
}
