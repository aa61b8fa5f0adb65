package main

import (
	"io"
	"log/slog"
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
