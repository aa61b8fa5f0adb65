// Package api is what every route of the host API shares, the host's own
// and each kind's (DESIGN.md section 16): an endpoint (method, path
// pattern, least role), its handler, bounded strict JSON bodies, JSON and
// NDJSON answers, the caller and its role, the error categories a
// route answers with, and the API's OpenAPI document (openapi.json). The router and the one mapping of errors to status
// are pkg/host's; a kind hands its routes to the host and never sees it.
// Guarantee: a decoded body is one JSON object of the documented shape
// within its bound, read within BodyReadTimeout; a route's caller is the
// peer the router authorized, with the role it was given.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
)

// An Endpoint is one route of the host API: its method, its path pattern
// (literal segments and at most one parameter, {channel}, {run} or {job})
// and the least role it needs.
type Endpoint struct {
	Method, Pattern string
	Role            peerauth.Role
}

// Handler serves one route; param is the path's parameter, unescaped and
// checked by the router ("" when the pattern has none). An error is
// answered by the router with its category's status and generic reason.
type Handler func(w http.ResponseWriter, r *http.Request, param string) error

// A Route is an endpoint and its handler.
type Route struct {
	Endpoint
	// Admits marks a route that starts work: once the host stops it is
	// refused (ErrShuttingDown's status) before its body is read.
	Admits bool
	Fn     Handler
}

// Error categories every route may answer with; the host maps them (and
// each kind's own) to a status.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNotFound   = errors.New("not found")
	ErrTooLarge   = errors.New("request body too large")
)

// RequestError carries a reason about the caller's own input.
type RequestError struct {
	Kind   error
	Reason string
}

func (e *RequestError) Error() string { return e.Reason }
func (e *RequestError) Unwrap() error { return e.Kind }

// BadRequest is ErrBadRequest with a reason the caller reads.
func BadRequest(reason string) error { return &RequestError{ErrBadRequest, reason} }

// A Status is one row of the host's error-to-status table: an error
// category (matched with errors.Is), its status and the reason its caller
// reads ("" = the error's own text: a reason about the caller's input).
// A kind hands the rows of its categories to the host; the table and its
// order stay the host's.
type Status struct {
	Err    error
	Code   int
	Reason string
}

// StatusOf maps err to a status and reason by rows, in their order: a
// RequestError answers its kind's status with its own reason; a row's
// empty Reason answers the error's own text; nothing matched is 500
// "internal error". The host keeps the one table (its rows and order);
// this is how it is read.
func StatusOf(err error, rows []Status) (int, string) {
	var re *RequestError
	if errors.As(err, &re) {
		status, _ := StatusOf(re.Kind, rows)
		return status, re.Reason
	}
	for _, m := range rows {
		if errors.Is(err, m.Err) {
			if m.Reason == "" {
				return m.Code, err.Error()
			}
			return m.Code, m.Reason
		}
	}
	return http.StatusInternalServerError, "internal error"
}

// A Param is a path parameter of a route pattern ("{run}"): each is one
// URL-escaped segment, checked by Valid before any handler runs; a bad one
// is refused with Reason.
type Param struct {
	Name   string
	Valid  func(string) bool
	Reason string
}

// MaxBodyBytes bounds every request body without a bound of its own:
// 32,000 characters of text escaped as JSON (up to 6 bytes each) plus the
// speaker fields fit.
const MaxBodyBytes = 256 << 10

// BodyReadTimeout bounds reading one request body (a variable for tests).
var BodyReadTimeout = 30 * time.Second

// WriteTimeout bounds writing one answer, or one event of a stream, to a
// client that stopped reading (a variable for tests).
var WriteTimeout = 2 * time.Minute

// DecodeBody reads one strict JSON object of at most max bytes into v.
func DecodeBody(w http.ResponseWriter, r *http.Request, v any, max int64) error {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	rc.SetReadDeadline(time.Time{}) // the work may run for minutes
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return ErrTooLarge
		}
		return BadRequest("could not read the request body")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return BadRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return BadRequest("bad JSON: the body must be one JSON object of the documented shape")
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("bad JSON: trailing data after the object")
	}
	return nil
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// StartStream answers 200 with an NDJSON stream; the caller writes each
// line within its own write deadline through the controller.
func StartStream(w http.ResponseWriter) *http.ResponseController {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}

type roleKey struct{}

// WithRole records the role the router gave the request's caller.
func WithRole(ctx context.Context, role peerauth.Role) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// RoleOf is the role the router gave the caller (RoleNone when none).
func RoleOf(r *http.Request) peerauth.Role {
	role, _ := r.Context().Value(roleKey{}).(peerauth.Role)
	return role
}

// IsAdmin reports whether the caller is an admin.
func IsAdmin(r *http.Request) bool { return RoleOf(r) >= peerauth.RoleAdmin }

// CallerUID is the caller's uid (its peer credentials).
func CallerUID(r *http.Request) int { return peerauth.From(r.Context()).UID }
