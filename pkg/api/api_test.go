package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
)

// TestDecodeBody: one strict object within the bound, or a refusal of the
// right category whose reason quotes nothing but a field name.
func TestDecodeBody(t *testing.T) {
	type doc struct {
		A string `json:"a"`
	}
	tests := []struct {
		name, body string
		max        int64
		want       error
		reason     string
	}{
		{"object", `{"a":"x"}`, 100, nil, ""},
		{"unknown field", `{"a":"x","b":1}`, 100, ErrBadRequest, `unknown field "b"`},
		{"trailing data", `{"a":"x"} {}`, 100, ErrBadRequest, "trailing data"},
		{"not an object", `["a"]`, 100, ErrBadRequest, "one JSON object"},
		{"over the bound", `{"a":"` + strings.Repeat("x", 100) + `"}`, 50, ErrTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			var d doc
			err := DecodeBody(w, r, &d, tt.max)
			if (err == nil) != (tt.want == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want == nil && d.A != "x" {
				t.Errorf("decoded %+v", d)
			}
			var re *RequestError
			if tt.reason != "" && (!errors.As(err, &re) || !strings.Contains(re.Reason, tt.reason)) {
				t.Errorf("reason %v, want one containing %q", err, tt.reason)
			}
		})
	}
}

// TestRoleOf: a request carries the role the router gave it; none is
// RoleNone, never an admin.
func TestRoleOf(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if RoleOf(r) != peerauth.RoleNone || IsAdmin(r) {
		t.Errorf("a request without a role: %v, admin %v", RoleOf(r), IsAdmin(r))
	}
	for _, role := range []peerauth.Role{peerauth.RoleClient, peerauth.RoleAdmin} {
		rr := r.WithContext(WithRole(context.Background(), role))
		if RoleOf(rr) != role || IsAdmin(rr) != (role == peerauth.RoleAdmin) {
			t.Errorf("role %v: RoleOf %v, IsAdmin %v", role, RoleOf(rr), IsAdmin(rr))
		}
	}
}
