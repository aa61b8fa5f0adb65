// Package envelope is what every route of a turn's broker shares, the
// sealed turn's (pkg/broker) and the rich channel's (pkg/broker/richroute):
// the error categories every refusal wraps, the request header rules, the
// caller's peer uid as the kernel gave it, and the upstream HTTP client.
//
// Guarantees: a refusal wraps exactly one category and its text is built
// from the broker's own words (pkg/broker maps categories to a status and
// a generic public text in one table); CheckHeaders passes only HTTP/1.1,
// the small header set each once, the dummy bearer, a JSON body with a
// Content-Length; an upstream client follows no redirect, uses no proxy
// from the environment, keeps no cookie and decompresses nothing.
package envelope

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Error categories of the broker. Every refusal wraps exactly one category
// (of this package or of one of the broker's route packages); pkg/broker
// maps categories to an HTTP status and a generic public text in one place.
var (
	ErrMethod         = errors.New("method not allowed")
	ErrNotFound       = errors.New("not found")
	ErrRefused        = errors.New("request refused")
	ErrUnauthorized   = errors.New("unauthorized")
	ErrLengthRequired = errors.New("length required")
	ErrTooLarge       = errors.New("request too large")
	ErrMediaType      = errors.New("unsupported media type")
	ErrCallLimit      = errors.New("call limit reached")
	ErrBusy           = errors.New("call in flight")
	ErrTurnOver       = errors.New("turn over")
	ErrUnavailable    = errors.New("unavailable")
	ErrUpstream       = errors.New("upstream failed")
	ErrUpstreamTime   = errors.New("upstream timed out")
	ErrToolFailed     = errors.New("tool failed")
	// ErrClientGone: the caller (the worker) closed its connection mid-call;
	// nothing upstream failed. The answer cannot reach anyone: its status
	// is for the log.
	ErrClientGone = errors.New("client closed the request")
	// ErrRefusalLimit: the turn spent its MaxRefusals.
	ErrRefusalLimit = errors.New("refusal limit reached")
)

// StatusClientClosed is the status logged for ErrClientGone (nginx's 499:
// not an HTTP status any client sees).
const StatusClientClosed = 499

// Refused is a refusal of category with the broker's own words msg.
func Refused(msg string, category error) error { return fmt.Errorf("broker: %s: %w", msg, category) }

// allowedHeaders may appear at most once each. Host is not in r.Header.
var allowedHeaders = map[string]bool{
	"Authorization":   true,
	"Content-Type":    true,
	"Content-Length":  true,
	"Accept":          true,
	"Accept-Encoding": true,
	"User-Agent":      true,
}

// DummyAuthorization is the only caller credential the broker accepts.
const DummyAuthorization = "Bearer " + protocol.DummyAPIKey

// CheckHeaders allows only the small header set, each once, HTTP/1.1 only,
// the dummy bearer, a JSON content type and a Content-Length body (no
// Transfer-Encoding, so no chunked body and no CL+TE ambiguity).
func CheckHeaders(r *http.Request) error {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return Refused("only HTTP/1.1", ErrRefused)
	}
	for name, values := range r.Header {
		if !allowedHeaders[name] {
			// Hop-by-hop (Connection, Keep-Alive, TE, Trailer, Upgrade),
			// Proxy-*, Forwarded, X-Forwarded-*, X-Real-IP, Via, Cookie,
			// Expect and every other header.
			return Refused("header not allowed", ErrRefused)
		}
		if len(values) != 1 {
			return Refused("repeated header", ErrRefused)
		}
	}
	if len(r.Trailer) != 0 || len(r.TransferEncoding) != 0 {
		return Refused("transfer encoding not allowed", ErrLengthRequired)
	}
	if r.Header.Get("Authorization") != DummyAuthorization {
		return Refused("caller credential is not the dummy key", ErrUnauthorized)
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return Refused("content type must be application/json", ErrMediaType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return Refused("content type parameter not allowed", ErrMediaType)
		}
	}
	if r.ContentLength < 0 {
		return Refused("Content-Length required", ErrLengthRequired)
	}
	return nil
}

// peerKey holds a connection's peer uid in its requests' contexts.
type peerKey struct{}

// WithPeerUID records the peer uid of a connection (SO_PEERCRED: the
// kernel's word, not the client's) in its context.
func WithPeerUID(ctx context.Context, uid int) context.Context {
	return context.WithValue(ctx, peerKey{}, uid)
}

// PeerUID is the peer uid WithPeerUID recorded; false when none was.
func PeerUID(ctx context.Context) (int, bool) {
	uid, ok := ctx.Value(peerKey{}).(int)
	return uid, ok
}

// ErrRedirect is what an upstream client answers a redirect with.
var ErrRedirect = errors.New("redirect refused")

// NewUpstreamClient: no redirects, no cookie jar, no proxy from the
// environment, no transparent compression, bounded headers and time.
func NewUpstreamClient(timeout time.Duration) *http.Client {
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
		MaxIdleConns:           4,
		IdleConnTimeout:        30 * time.Second,
	}
	return &http.Client{
		Transport:     t,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect },
	}
}

// IsTimeout reports a deadline or a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
