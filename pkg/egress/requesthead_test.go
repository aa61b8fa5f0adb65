package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// readOne reads one request and its whole body with the strict reader.
func readOne(raw string) (*http.Request, string, error) {
	hr := headReader{br: bufio.NewReader(strings.NewReader(raw))}
	req, err := hr.read()
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(req.Body)
	return req, string(body), err
}

// TestReadRequestHead: what the strict reader accepts, as net/http reads
// it (method, target, Host, fields, framing, body, trailers).
func TestReadRequestHead(t *testing.T) {
	type want struct {
		method, uri, host string
		header            http.Header
		cl                int64
		te                []string
		close             bool
		body              string
		trailer           http.Header
	}
	for _, tc := range []struct {
		name, raw string
		want      want
	}{
		{"get", "GET /p?q=1 HTTP/1.1\r\nHost: h.test\r\nAuthorization: Bearer x\r\n\r\n",
			want{"GET", "/p?q=1", "h.test", http.Header{"Authorization": {"Bearer x"}}, 0, nil, false, "", nil}},
		{"names canonical, values trimmed, repeated fields", "GET / HTTP/1.1\r\nhost: h\r\nx-a:  1 \t\r\nX-A:2\r\n\r\n",
			want{"GET", "/", "h", http.Header{"X-A": {"1", "2"}}, 0, nil, false, "", nil}},
		{"content-length", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
			want{"POST", "/p", "h", http.Header{"Content-Length": {"5"}}, 5, nil, false, "hello", nil}},
		{"chunked with a trailer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\nTrailer: x-t\r\n\r\n2\r\nhi\r\n0\r\nX-T: v\r\n\r\n",
			want{"POST", "/p", "h", http.Header{}, -1, []string{"chunked"}, false, "hi", http.Header{"X-T": {"v"}}}},
		{"connection close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n",
			want{"GET", "/", "h", http.Header{"Connection": {"keep-alive, Close"}}, 0, nil, true, "", nil}},
		{"http/1.0 closes", "GET / HTTP/1.0\r\nHost: h\r\n\r\n",
			want{"GET", "/", "h", http.Header{}, 0, nil, true, "", nil}},
		{"pragma as net/http", "GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
			want{"GET", "/", "h", http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"no-cache"}}, 0, nil, false, "", nil}},
		{"options *", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
			want{"OPTIONS", "*", "h", http.Header{}, 0, nil, false, "", nil}},
		{"obs-text in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: caf\xc3\xa9\r\n\r\n",
			want{"GET", "/", "h", http.Header{"X-A": {"caf\xc3\xa9"}}, 0, nil, false, "", nil}},
	} {
		req, body, err := readOne(tc.raw)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := want{req.Method, req.RequestURI, req.Host, req.Header, req.ContentLength, req.TransferEncoding, req.Close, body, req.Trailer}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestReadRequestHeadRefuses: every ambiguous or malformed head is refused
// (docs/credentialed-egress.md, request smuggling), including what
// net/http's ReadRequest accepts (marked lenient, as of Go 1.26).
func TestReadRequestHeadRefuses(t *testing.T) {
	long := strings.Repeat("a", MaxInterceptHeaderBytes)
	for _, tc := range []struct {
		name, raw string
		want      error
		lenient   bool // net/http accepts it
	}{
		{"bare LF ending a line", "GET / HTTP/1.1\nHost: h\r\n\r\n", errHeadLineEnd, true},
		{"bare LF ending the head", "GET / HTTP/1.1\r\nHost: h\r\n\n", errHeadLineEnd, true},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n", errHeadLineEnd, false},
		{"bare CR in the request line", "GET /\r HTTP/1.1\r\nHost: h\r\n\r\n", errHeadLineEnd, false},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", errHeadFold, true},
		{"space before the colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", errHeadField, true},
		{"no colon", "GET / HTTP/1.1\r\nHost h\r\n\r\n", errHeadField, false},
		{"empty name", "GET / HTTP/1.1\r\n: h\r\n\r\n", errHeadField, false},
		{"invalid name byte", "GET / HTTP/1.1\r\nX(A): 1\r\n\r\n", errHeadField, false},
		{"NUL in a value", "GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", errHeadField, false},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", errHeadHost, false},
		{"two equal Content-Lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", errHeadLength, true},
		{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", errHeadLength, false},
		{"a Content-Length list", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\nx", errHeadLength, false},
		{"a signed Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", errHeadLength, false},
		{"an empty Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", errHeadLength, false},
		{"Content-Length with Transfer-Encoding", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", errHeadLengthAndTE, true},
		{"Transfer-Encoding gzip, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", errHeadTE, false},
		{"Transfer-Encoding identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", errHeadTE, false},
		{"Transfer-Encoding chunked with a Unicode-folding K", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chun\u212aed\r\n\r\n0\r\n\r\n", errHeadTE, false},
		{"Transfer-Encoding twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", errHeadTE, false},
		{"Transfer-Encoding on HTTP/1.0", "POST / HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", errHeadTE, true},
		{"a Trailer naming Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", errHeadTrailerField, false},
		{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: h\r\n\r\n", errHeadVersion, true},
		{"HTTP/2.0", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", errHeadVersion, true},
		{"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", errHeadRequestLine, false},
		{"a tab in the request line", "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", errHeadRequestLine, false},
		{"non-ASCII target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", errHeadRequestLine, true},
		{"a leading empty line", "\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", errHeadRequestLine, false},
		{"a head over the bound", "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + long + "\r\n\r\n", errHeadTooLong, true},
		{"ended inside the head", "GET / HTTP/1.1\r\nHost: h\r\n", io.ErrUnexpectedEOF, false},
	} {
		_, _, err := readOne(tc.raw)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		// What Go's reader does is noted, not required: a Go release
		// may tighten it.
		_, nerr := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
		if got := nerr == nil; got != tc.lenient {
			t.Logf("%s: net/http accepts it: %v, the table says %v (%v)", tc.name, got, tc.lenient, nerr)
		}
	}
}

// TestReadRequestHeadBodies: a body cut short is an error, a trailer
// field of a framing name is refused, and the next request of the
// connection starts after a body closed unread.
func TestReadRequestHeadBodies(t *testing.T) {
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhel"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v", err)
	}
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nContent-Length: 9\r\n\r\n"); !errors.Is(err, errHeadTrailerField) {
		t.Errorf("Content-Length as a trailer: %v", err)
	}
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-T: a\nb\r\n\r\n"); !errors.Is(err, errHeadLineEnd) {
		t.Errorf("bare LF in a trailer: %v", err)
	}
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: v\r\nX-Other: w\r\n\r\n"); !errors.Is(err, errHeadUndeclared) {
		t.Errorf("a trailer not declared: %v", err)
	}
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-Other: w\r\n\r\n"); !errors.Is(err, errHeadUndeclared) {
		t.Errorf("a trailer with no Trailer field: %v", err)
	}
	if req, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: v\r\n\r\n"); err != nil || req.Trailer.Get("X-T") != "v" {
		t.Errorf("a declared trailer: %v", err)
	}
	big := "X-T: " + strings.Repeat("a", MaxInterceptHeaderBytes) + "\r\n"
	if _, _, err := readOne("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\n" + big + "\r\n"); !errors.Is(err, errHeadTooLong) {
		t.Errorf("trailers over the bound: %v", err)
	}
	for _, first := range []string{
		"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nGET /",
		"POST /1 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\n",
	} {
		hr := headReader{br: bufio.NewReader(strings.NewReader(first + "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n"))}
		req, err := hr.read()
		if err != nil {
			t.Fatal(err)
		}
		if err := req.Body.Close(); err != nil {
			t.Fatal(err)
		}
		req, err = hr.read()
		if err != nil || req.RequestURI != "/2" {
			t.Errorf("the request after a closed body: %v %v", req, err)
		}
	}
}

// TestReadRequestHeadReuse: a connection's requests share one header
// block and its values' backing; each request read holds its own fields
// only, whatever the one before held (more, fewer, the same names).
func TestReadRequestHeadReuse(t *testing.T) {
	many := "GET /m HTTP/1.1\r\nHost: h\r\n"
	for i := range maxReusedFields + 2 {
		many += "X-F" + strconv.Itoa(i) + ": v\r\n"
	}
	many += "\r\n"
	heads := []struct {
		raw  string
		want http.Header
	}{
		{"GET /1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer a\r\nX-A: 1\r\nX-A: 2\r\n\r\n",
			http.Header{"Authorization": {"Bearer a"}, "X-A": {"1", "2"}}},
		{"GET /2 HTTP/1.1\r\nHost: h\r\nX-B: b\r\n\r\n", http.Header{"X-B": {"b"}}},
		{"GET /3 HTTP/1.1\r\nHost: h\r\n\r\n", http.Header{}},
		{many, nil},
		{"GET /5 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer e\r\nAccept-Encoding: gzip\r\n\r\n",
			http.Header{"Authorization": {"Bearer e"}, "Accept-Encoding": {"gzip"}}},
	}
	var raw string
	for _, h := range heads {
		raw += h.raw
	}
	hr := headReader{br: bufio.NewReader(strings.NewReader(raw))}
	for _, h := range heads {
		req, err := hr.read()
		if err != nil {
			t.Fatalf("%q: %v", h.raw, err)
		}
		if h.want == nil {
			if got := len(req.Header); got != maxReusedFields+2 {
				t.Errorf("%q: got %d fields, want %d", req.RequestURI, got, maxReusedFields+2)
			}
			continue
		}
		if got := req.Header; !reflect.DeepEqual(got, h.want) {
			t.Errorf("%q: got %v, want %v", req.RequestURI, got, h.want)
		}
		// What the next read must not see: the block changed in place,
		// as check and outgoing change it.
		req.Header["X-Stale"] = []string{"x"}
		for _, vs := range req.Header {
			vs[0] = "stale"
		}
	}
}

// FuzzReadRequestHead is a differential fuzz against net/http's
// ReadRequest: what the strict reader accepts, net/http accepts too and
// reads as the same request (method, target, URL, Host, fields, framing,
// Close, body and trailers).
//
//	go test ./pkg/egress -run '^$' -fuzz FuzzReadRequestHead
func FuzzReadRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET /p?q=1 HTTP/1.1\r\nHost: h.test\r\nAuthorization: Bearer x\r\nAccept-Encoding: gzip\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
		"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: v\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nhost: h\r\nx-a: 1\r\nX-A: 2\r\nPragma: no-cache\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
		"GET http://h/x HTTP/1.1\r\nHost: other\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n",
		"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chun\u212aed\r\n\r\n1\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	// The input is read after a request on the same connection (its
	// header block is reused: nothing of it may show in the input's).
	const before = "GET /0 HTTP/1.1\r\nHost: h0\r\nAuthorization: Bearer 0\r\nX-A: 0\r\nX-Z: 0\r\nCookie: 0\r\nCookie: 1\r\n\r\n"
	f.Fuzz(func(t *testing.T, raw []byte) {
		hr := headReader{br: bufio.NewReader(io.MultiReader(strings.NewReader(before), bytes.NewReader(raw)))}
		if _, err := hr.read(); err != nil {
			t.Fatal(err)
		}
		mine, err := hr.read()
		if err != nil {
			return
		}
		theirs, nerr := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if nerr != nil {
			t.Fatalf("the strict reader accepts what net/http refuses (%v): %q", nerr, raw)
		}
		mb, merr := io.ReadAll(mine.Body)
		tb, terr := io.ReadAll(theirs.Body)
		if (merr == nil) != (terr == nil) {
			// A body net/http refuses, the strict reader must too; a
			// trailer net/http accepts may still be refused here.
			if merr == nil {
				t.Fatalf("body: strict accepts, net/http %v: %q", terr, raw)
			}
			return
		}
		if merr != nil {
			return
		}
		type view struct {
			Method, RequestURI, URL, Proto, Host string
			Header, Trailer                      http.Header
			ContentLength                        int64
			TransferEncoding                     []string
			Close                                bool
			Body                                 string
		}
		v := func(r *http.Request, body []byte) view {
			return view{r.Method, r.RequestURI, r.URL.String(), r.Proto, r.Host, r.Header, r.Trailer,
				r.ContentLength, r.TransferEncoding, r.Close, string(body)}
		}
		if got, want := v(mine, mb), v(theirs, tb); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nstrict   %+v\nnet/http %+v", raw, got, want)
		}
	})
}
