// Package safefetch is the one way anything a guest influences reaches the
// network. Its guarantee: a connection made through it goes only to an
// address that was resolved once for that hop and found public (or named
// exactly in the operator's Allow list), and nowhere else.
//
//   - URLs are credential-free http or https with a DNS name or a canonical IP
//     literal; encoded IPv4 (decimal, octal, hex, short forms) is refused.
//   - Every hop resolves its host once; if any address is not public (private,
//     loopback, link-local, metadata, multicast, reserved, CGNAT, benchmarking,
//     documentation, transition forms embedding such addresses, ...) or is
//     an address of this box's own interfaces (kept current from rtnetlink;
//     while unknown, every public address is refused) the hop is refused.
//     See Classify and ClassifyLocal.
//   - The connection is pinned to a vetted address (3 s per address, fallback
//     only within the vetted list) while TLS verifies the original hostname;
//     no environment proxy, no second lookup.
//   - Every redirect is a new hop, vetted again; wire and decoded bodies
//     (gzip, deflate, brotli) are bounded; the whole request has a deadline.
//
// Dialer is the vetted dialer every egress path uses; Fetcher builds on it.
package safefetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The seed's defaults and allowed ranges.
const (
	DefaultTimeout      = 60 * time.Second
	MinTimeout          = time.Millisecond
	MaxTimeout          = 120 * time.Second
	DefaultMaxBytes     = 5 << 20
	MaxMaxBytes         = 32 << 20
	DefaultMaxRedirects = 5
	MaxMaxRedirects     = 10
)

// maxHeaderBytes bounds a response's header block.
const maxHeaderBytes = 64 << 10

// acceptEncoding is fixed: only codings we decode with a bound.
const acceptEncoding = "gzip, deflate, br"

// Options are one fetch's bounds. Start from DefaultOptions: the zero value
// is out of range on purpose, so a forgotten field fails loudly.
type Options struct {
	Timeout         time.Duration // whole request, every hop and the body; 1 ms-120 s
	MaxBytes        int64         // wire and decoded body each; 1 byte-32 MiB
	MaxRedirects    int           // 0-10
	FollowRedirects bool          // false: a redirect response is returned, not followed
	// Header holds trusted request headers set by the host, never guest
	// input. Accept-Encoding, Host and hop-by-hop headers cannot be set;
	// Authorization and Cookie are dropped when a redirect leaves the origin.
	Header http.Header
}

// DefaultOptions returns the seed's defaults: 60 s, 5 MiB, 5 redirects, followed.
func DefaultOptions() Options {
	return Options{Timeout: DefaultTimeout, MaxBytes: DefaultMaxBytes, MaxRedirects: DefaultMaxRedirects, FollowRedirects: true}
}

// Validate refuses options outside the allowed ranges, naming the field.
func (o Options) Validate() error {
	switch {
	case o.Timeout < MinTimeout || o.Timeout > MaxTimeout:
		return &Error{Kind: ErrOptions, msg: fmt.Sprintf("Timeout %s is outside %s-%s", o.Timeout, MinTimeout, MaxTimeout)}
	case o.MaxBytes < 1 || o.MaxBytes > MaxMaxBytes:
		return &Error{Kind: ErrOptions, msg: fmt.Sprintf("MaxBytes %d is outside 1-%d", o.MaxBytes, MaxMaxBytes)}
	case o.MaxRedirects < 0 || o.MaxRedirects > MaxMaxRedirects:
		return &Error{Kind: ErrOptions, msg: fmt.Sprintf("MaxRedirects %d is outside 0-%d", o.MaxRedirects, MaxMaxRedirects)}
	}
	for k, vs := range o.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return &Error{Kind: ErrOptions, msg: fmt.Sprintf("header name %q is invalid", k)}
		}
		switch http.CanonicalHeaderKey(k) {
		case "Accept-Encoding", "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer",
			"Upgrade", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Expect", "Range":
			return &Error{Kind: ErrOptions, msg: fmt.Sprintf("header %q cannot be set", k)}
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &Error{Kind: ErrOptions, msg: fmt.Sprintf("header %q has an invalid value", k)}
			}
		}
	}
	return nil
}

// Result is a fetched response: decoded body bytes, bounded, and where they
// came from. Hand the bytes to a parser; never hand the URL to a library that
// fetches again.
type Result struct {
	URL       string         // final URL, after redirects
	Status    int            // HTTP status of the final response
	Header    http.Header    // its headers
	Body      []byte         // decoded body, at most MaxBytes
	Redirects int            // redirects followed
	Addr      netip.AddrPort // the vetted address the final response came from
}

// Fetcher fetches URLs through its Dialer. The zero value is ready to use.
type Fetcher struct {
	// Dialer vets and pins every connection; nil means a zero Dialer.
	Dialer *Dialer
	// RootCAs replaces the system roots. A trusted test seam: never set from
	// configuration or guest input.
	RootCAs *x509.CertPool
	// UserAgent is sent unless Options.Header sets one.
	UserAgent string
}

var defaultFetcher = &Fetcher{}

// Fetch fetches rawURL with the zero Fetcher (public addresses only).
func Fetch(ctx context.Context, rawURL string, o Options) (*Result, error) {
	return defaultFetcher.Fetch(ctx, rawURL, o)
}

// AssertPublicURL checks rawURL with the zero Fetcher; see Fetcher.AssertPublicURL.
func AssertPublicURL(ctx context.Context, rawURL string) (string, error) {
	return defaultFetcher.AssertPublicURL(ctx, rawURL)
}

func (f *Fetcher) dialer() *Dialer {
	if f.Dialer != nil {
		return f.Dialer
	}
	return &Dialer{}
}

// ParseURL checks rawURL as Fetch does before any lookup and returns its
// normalized form (ASCII host, no fragment): what a log line may name.
func ParseURL(rawURL string) (*url.URL, error) {
	t, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	u := *t.u
	return &u, nil
}

// AssertPublicURL refuses a URL that is not credential-free http(s) or whose
// host does not resolve only to public addresses, and returns the URL in the
// normalized form it checked (ASCII host, no fragment): hand that form, not
// the original, to a third-party reader. It does not pin a later connection;
// fetches of the URL by this process should use Fetch.
func (f *Fetcher) AssertPublicURL(ctx context.Context, rawURL string) (string, error) {
	t, err := parseURL(rawURL)
	if err != nil {
		return "", err
	}
	if _, err := f.dialer().resolve(ctx, "tcp", t.host, t.literal, t.port); err != nil {
		return "", err
	}
	return t.u.String(), nil
}

// Fetch GETs rawURL within o's bounds, following (and vetting) redirects
// unless o.FollowRedirects is false. A non-2xx status is a Result, not an
// error.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	t, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	hdr := o.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	for hop := 0; ; hop++ {
		res, err := f.hop(ctx, t, hdr, o, hop)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrDeadline) && !errors.Is(err, ErrCanceled) {
				return nil, &Error{Kind: ctxKind(ctx.Err()), msg: fmt.Sprintf("request within %s", o.Timeout), err: err}
			}
			return nil, err
		}
		res.Redirects = hop
		loc := res.Header.Get("Location")
		if !isRedirect(res.Status) || loc == "" || !o.FollowRedirects {
			return res, nil
		}
		if hop >= o.MaxRedirects {
			return nil, &Error{Kind: ErrRedirect, msg: fmt.Sprintf("more than %d redirects", o.MaxRedirects)}
		}
		if err := checkRaw(loc); err != nil {
			return nil, &Error{Kind: ErrRedirect, msg: fmt.Sprintf("redirect %d Location", hop+1), err: err}
		}
		ref, err := url.Parse(loc)
		if err != nil {
			return nil, &Error{Kind: ErrRedirect, msg: "Location does not parse"}
		}
		next, err := parseURL(t.u.ResolveReference(ref).String())
		if err != nil {
			return nil, &Error{Kind: ErrRedirect, msg: fmt.Sprintf("redirect %d", hop+1), err: err}
		}
		if next.u.Scheme != t.u.Scheme || next.host != t.host || next.port != t.port {
			// Credentials the host set for one origin do not follow to another.
			hdr.Del("Authorization")
			hdr.Del("Cookie")
		}
		t = next
	}
}

// hopTransport is one hop's transport: its only ways to connect are the two
// pinned dial functions, and nothing about it comes from the environment.
func hopTransport(dial, dialTLS func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // never the environment's proxy
		DialContext:            dial,
		DialTLSContext:         dialTLS,
		DisableKeepAlives:      true, // the next hop resolves and dials anew
		DisableCompression:     true, // we decode, with a bound
		MaxResponseHeaderBytes: maxHeaderBytes,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// hop makes one request: resolve and vet t's host once, connect only to those
// addresses, read the bounded body unless the response will be followed.
func (f *Fetcher) hop(ctx context.Context, t *target, hdr http.Header, o Options, hop int) (*Result, error) {
	d := f.dialer()
	addrs, err := d.resolve(ctx, "tcp", t.host, t.literal, t.port)
	if err != nil {
		if hop > 0 {
			return nil, &Error{Kind: ErrRedirect, msg: fmt.Sprintf("redirect %d", hop), err: err}
		}
		return nil, err
	}
	want := net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	var used netip.AddrPort
	pinned := func(tlsConf *tls.Config) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != want {
				return nil, &Error{Kind: ErrAddress, msg: fmt.Sprintf("transport asked for %s, vetted %s", addr, want)}
			}
			c, ap, err := d.dialPinned(ctx, addrs, tlsConf)
			used = ap
			return c, err
		}
	}
	tr := hopTransport(pinned(nil), pinned(&tls.Config{
		ServerName: t.host,
		RootCAs:    f.RootCAs,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}))
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.u.String(), nil)
	if err != nil {
		return nil, &Error{Kind: ErrURL, msg: "request", err: err}
	}
	for k, vs := range hdr {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	req.Header.Set("Accept-Encoding", acceptEncoding)
	if req.Header.Get("User-Agent") == "" && f.UserAgent != "" {
		req.Header.Set("User-Agent", f.UserAgent)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, err
		}
		return nil, &Error{Kind: ErrHTTP, msg: t.host, err: err}
	}
	defer resp.Body.Close()
	res := &Result{URL: t.u.String(), Status: resp.StatusCode, Header: resp.Header, Addr: used}
	if isRedirect(resp.StatusCode) && resp.Header.Get("Location") != "" && o.FollowRedirects {
		return res, nil
	}
	body, err := readBody(resp, o.MaxBytes)
	if err != nil {
		return nil, err
	}
	res.Body = body
	return res, nil
}
