package fakeupstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := &Handler{Key: "k"}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tests := []struct {
		name, method, auth string
		want               int
	}{
		{"post with key", http.MethodPost, "Bearer k", http.StatusOK},
		{"wrong key", http.MethodPost, "Bearer sandbox-dummy-key", http.StatusUnauthorized},
		{"get refused", http.MethodGet, "Bearer k", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("Authorization", tt.auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
		if tt.want == http.StatusOK {
			var v struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(body, &v); err != nil || len(v.Choices) != 1 || v.Choices[0].Message.Content == "" {
				t.Errorf("%s: reply %s is not a one-choice completion (%v)", tt.name, body, err)
			}
		}
	}
	if h.Calls() != 1 || h.BadAuth() != 1 {
		t.Errorf("calls=%d badAuth=%d, want 1 and 1", h.Calls(), h.BadAuth())
	}
}
