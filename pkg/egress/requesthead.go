package egress

// The intercepted path's request reader (docs/credentialed-egress.md,
// "Placeholders", the refusals; its cost in docs/BENCHMARKS.md, issue 37).
// The broker re-sends every intercepted request to a server that parses
// it again, so any head two parsers may read differently is a
// request-smuggling risk (the broker's parsing is strict for that reason,
// docs/threat-model.md): the code could frame a second request the broker
// never checked inside the first one's body. This reader accepts a
// strict subset of HTTP/1.1 (RFC 9112) and refuses everything ambiguous
// outright, where net/http's ReadRequest is lenient:
//
//   - lines end in CRLF only: a bare LF or a CR anywhere else is refused;
//   - no obs-fold (a line starting with SP or HTAB), no whitespace before
//     a field's colon, a field name of token characters only, a value of
//     visible characters, SP, HTAB and obs-text only;
//   - the request line is exactly a token method, one SP, a target of
//     visible ASCII, one SP and HTTP/1.1 or HTTP/1.0;
//   - at most one Host and one Content-Length field (even two equal ones
//     are refused), Content-Length of digits only; Transfer-Encoding only
//     on HTTP/1.1, only once and exactly "chunked", never with
//     Content-Length; a Trailer field never names a framing field, and
//     a chunked body's trailers are only those its Trailer declared;
//   - the head is at most MaxInterceptHeaderBytes, a chunked body's
//     trailers likewise.
//
// What it accepts, net/http's ReadRequest accepts and reads as the same
// request (FuzzReadRequestHead checks both verdicts and the result), so
// what follows (check, outgoing, Request.Write) sees what it saw before.
// It costs less than ReadRequest because the head is copied once into a
// buffer the session reuses and made one string, every method, target,
// name and value a piece of it (issue 37's per-request cost).

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// errRequestHead: an intercepted request's head is malformed or ambiguous
// (its detail is one of the fixed texts below, never the bytes).
var errRequestHead = errors.New("egress: a malformed or ambiguous intercepted request head")

type headError string

func (e headError) Error() string { return errRequestHead.Error() + ": " + string(e) }
func (e headError) Unwrap() error { return errRequestHead }

const (
	errHeadTooLong      = headError("longer than the bound")
	errHeadLineEnd      = headError("a line not ended by CRLF")
	errHeadRequestLine  = headError("a malformed request line")
	errHeadVersion      = headError("not HTTP/1.1 or HTTP/1.0")
	errHeadFold         = headError("an obs-fold line")
	errHeadField        = headError("a malformed field line")
	errHeadHost         = headError("more than one Host")
	errHeadLength       = headError("a malformed or repeated Content-Length")
	errHeadTE           = headError("a Transfer-Encoding other than one chunked")
	errHeadLengthAndTE  = headError("Content-Length with Transfer-Encoding")
	errHeadTrailerField = headError("a Trailer naming a framing field")
	errHeadUndeclared   = headError("a trailer its Trailer field did not declare")
	errHeadURI          = headError("an unparsable request target")
)

// headReader reads an intercepted connection's requests in turn; its
// buffer is reused across them.
type headReader struct {
	br  *bufio.Reader
	buf []byte
	// The last request's header block and its values' backing, reused
	// by the next (issue 37's per-request allocations): a request's
	// block is not read once the next one is.
	hdr  http.Header
	strs []string
}

// maxReusedFields bounds the header block a connection keeps for its
// next request (clearing a map costs what it once held).
const maxReusedFields = 32

// readLines reads a block of CRLF-ended lines up to and including the
// empty line into h.buf, at most max bytes. It returns io.EOF when the
// connection ends before the first byte, io.ErrUnexpectedEOF inside the
// block.
func (h *headReader) readLines(max int) error {
	h.buf = h.buf[:0]
	for {
		line, err := h.br.ReadSlice('\n')
		if len(h.buf)+len(line) > max {
			return errHeadTooLong
		}
		h.buf = append(h.buf, line...)
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(h.buf) == 0:
			return io.EOF
		case errors.Is(err, io.EOF):
			return io.ErrUnexpectedEOF
		default:
			return err
		}
		// A whole line: it ends in CRLF, and holds no other CR.
		n := len(h.buf)
		if n < 2 || h.buf[n-2] != '\r' {
			return errHeadLineEnd
		}
		start := n - 2
		for start > 0 && h.buf[start-1] != '\n' {
			start--
		}
		if start == n-2 {
			return nil // the empty line
		}
		for _, c := range h.buf[start : n-2] {
			if c == '\r' {
				return errHeadLineEnd
			}
		}
	}
}

// read reads one request: its head strictly, its body (by Content-Length,
// or chunked with its trailers) as the request's Body over h.br. io.EOF
// means the connection ended cleanly between requests.
func (h *headReader) read() (*http.Request, error) {
	if err := h.readLines(MaxInterceptHeaderBytes); err != nil {
		return nil, err
	}
	head := string(h.buf)
	line, rest, _ := strings.Cut(head, "\r\n")
	req, err := parseRequestLine(line)
	if err != nil {
		return nil, err
	}
	if len(h.hdr) > maxReusedFields {
		h.hdr, h.strs = nil, nil
	}
	if req.Header, h.strs, err = parseFieldsInto(h.hdr, h.strs, rest, fieldsRequest); err != nil {
		return nil, err
	}
	h.hdr = req.Header
	return req, frame(req, h)
}

// parseRequestLine parses "METHOD SP target SP HTTP/1.x".
func parseRequestLine(line string) (*http.Request, error) {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !httpguts.ValidHeaderFieldName(method) || target == "" {
		return nil, errHeadRequestLine
	}
	for i := range len(target) {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return nil, errHeadRequestLine
		}
	}
	req := &http.Request{Method: method, RequestURI: target, Proto: proto, ProtoMajor: 1}
	switch proto {
	case "HTTP/1.1":
		req.ProtoMinor = 1
	case "HTTP/1.0":
	default:
		return nil, errHeadVersion
	}
	raw := target
	authority := method == http.MethodConnect && !strings.HasPrefix(target, "/")
	if authority {
		raw = "http://" + target
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return nil, errHeadURI
	}
	if authority {
		u.Scheme = ""
	}
	req.URL = u
	return req, nil
}

// fieldsOf is what a block of field lines is.
type fieldsOf int

const (
	fieldsRequest fieldsOf = iota // a request's head: one Host at most
	fieldsTrailer                 // a chunked request body's trailers: no framing field, no Host
	fieldsAnswer                  // an answer's head (answerhead.go)
)

// parseFields parses CRLF-ended field lines (the last one the empty line)
// into a header block under canonical names, with the checks of what the
// block is.
func parseFields(block string, of fieldsOf) (http.Header, error) {
	h, _, err := parseFieldsInto(nil, nil, block, of)
	return h, err
}

// parseFieldsInto is parseFields into h, emptied first, with backing as
// the values' backing array when it is long enough (a connection's
// requests reuse both); nil ones are made. It returns the block and the
// backing array.
func parseFieldsInto(h http.Header, backing []string, block string, of fieldsOf) (http.Header, []string, error) {
	n := strings.Count(block, "\n")
	if h == nil {
		h = make(http.Header, n)
	} else {
		clear(h)
	}
	// One backing array for the values: most fields come once (as
	// net/http's reader does).
	if cap(backing) < n {
		backing = make([]string, n)
	}
	strs := backing[:n]
	for {
		line, rest, _ := strings.Cut(block, "\r\n")
		if line == "" {
			break
		}
		block = rest
		if line[0] == ' ' || line[0] == '\t' {
			return nil, backing, errHeadFold
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return nil, backing, errHeadField
		}
		value = strings.Trim(value, " \t")
		for i := range len(value) {
			if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
				return nil, backing, errHeadField
			}
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if vv, ok := h[key]; ok || len(strs) == 0 {
			h[key] = append(vv, value)
		} else {
			strs[0] = value
			h[key], strs = strs[:1:1], strs[1:]
		}
	}
	switch of {
	case fieldsAnswer:
		return h, backing, nil
	case fieldsTrailer:
		for _, k := range []string{"Content-Length", "Transfer-Encoding", "Trailer", "Host"} {
			if _, ok := h[k]; ok {
				return nil, backing, errHeadTrailerField
			}
		}
		return h, backing, nil
	}
	if len(h["Host"]) > 1 {
		return nil, backing, errHeadHost
	}
	return h, backing, nil
}

// frame reads the request's framing (Content-Length or chunked), sets its
// body over h.br, its Host and Close, as net/http's ReadRequest does.
func frame(req *http.Request, h *headReader) error {
	hd := req.Header
	req.Host = req.URL.Host
	if req.Host == "" && len(hd["Host"]) == 1 {
		req.Host = hd["Host"][0]
	}
	delete(hd, "Host") // req.Host is it, as net/http's ReadRequest does
	// net/http's own rewrite (fixPragmaCacheControl): the destination
	// got it before this reader, it gets it still.
	if p := hd["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
		if _, ok := hd["Cache-Control"]; !ok {
			hd["Cache-Control"] = []string{"no-cache"}
		}
	}
	conn := hd["Connection"]
	if req.ProtoMinor == 0 {
		req.Close = httpguts.HeaderValuesContainsToken(conn, "close") || !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	} else {
		req.Close = httpguts.HeaderValuesContainsToken(conn, "close")
	}
	cl, hasCL := hd["Content-Length"]
	te, hasTE := hd["Transfer-Encoding"]
	switch {
	case hasCL && hasTE:
		return errHeadLengthAndTE
	case hasTE:
		if len(te) != 1 || !asciiEqualFold(te[0], "chunked") || req.ProtoMinor == 0 {
			return errHeadTE
		}
		delete(hd, "Transfer-Encoding")
		req.TransferEncoding = []string{"chunked"}
		req.ContentLength = -1
		if err := declaredTrailer(req); err != nil {
			return err
		}
		req.Body = &chunkedBody{h: h, req: req, r: httputil.NewChunkedReader(h.br)}
		return nil
	case hasCL:
		n, ok := contentLength(cl)
		if !ok {
			return errHeadLength
		}
		req.ContentLength = n
		if n > 0 {
			req.Body = &lengthBody{r: io.LimitedReader{R: h.br, N: n}}
			return nil
		}
	}
	req.Body = http.NoBody
	return nil
}

// contentLength is the value of exactly one Content-Length field of
// digits only (no sign, no list, no spaces), without overflow.
func contentLength(v []string) (int64, bool) {
	if len(v) != 1 || v[0] == "" || len(v[0]) > 18 {
		return 0, false
	}
	for i := range len(v[0]) {
		if c := v[0][i]; c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	return n, err == nil
}

// declaredTrailer sets req.Trailer's keys from the Trailer fields, as
// net/http does, refusing a framing field there.
func declaredTrailer(req *http.Request) error {
	vs, ok := req.Header["Trailer"]
	if !ok {
		return nil
	}
	t := http.Header{}
	for _, v := range vs {
		for k := range strings.SplitSeq(v, ",") {
			k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k))
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return errHeadTrailerField
			case "":
			default:
				t[k] = nil
			}
		}
	}
	delete(req.Header, "Trailer")
	if len(t) > 0 {
		req.Trailer = t
	}
	return nil
}

// asciiEqualFold is strings.EqualFold for ASCII only: strings.EqualFold
// folds Unicode (U+212A KELVIN SIGN matches 'k'), so "chun\u212aed"
// would read as chunked here while net/http refuses it (found in review).
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// lengthBody is a body of Content-Length bytes: the connection's end
// before them is io.ErrUnexpectedEOF; Close reads to its end (the next
// request starts after it), as net/http's body does.
type lengthBody struct{ r io.LimitedReader }

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.r.N <= 0 {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) && b.r.N > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error {
	_, err := io.Copy(io.Discard, b)
	return err
}

// chunkedBody is a chunked body (net/http's chunk decoder); at its last
// chunk the trailers are read strictly into the request's Trailer (as
// net/http merges them) before io.EOF.
type chunkedBody struct {
	h    *headReader
	req  *http.Request
	r    io.Reader
	done bool
	err  error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.done, b.err = true, b.trailers()
		return n, b.err
	}
	if err != nil {
		b.done, b.err = true, err
	}
	return n, err
}

func (b *chunkedBody) trailers() error {
	if err := b.h.readLines(MaxInterceptHeaderBytes); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	t, err := parseFields(string(b.h.buf), fieldsTrailer)
	if err != nil {
		return err
	}
	// Only declared trailers: the checks before forwarding (the
	// credential header's aliases) read the declared names, so one that
	// arrives undeclared is refused rather than forwarded unchecked
	// (found in review; net/http would merge it).
	for k := range t {
		if _, ok := b.req.Trailer[k]; !ok {
			return errHeadUndeclared
		}
	}
	for k, v := range t {
		b.req.Trailer[k] = v
	}
	return io.EOF
}

func (b *chunkedBody) Close() error {
	_, err := io.Copy(io.Discard, b)
	return err
}
