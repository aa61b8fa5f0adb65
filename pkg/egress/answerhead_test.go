package egress

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// answerView is what relay uses of an answer, with its body read whole.
type answerView struct {
	Status, Proto    string
	StatusCode       int
	ProtoMinor       int
	Header, Trailer  http.Header
	ContentLength    int64
	TransferEncoding []string
	Close            bool
	Body, Next       string
	BodyErr          bool
}

func viewAnswer(resp *http.Response, br *bufio.Reader) answerView {
	body, err := io.ReadAll(resp.Body)
	next, _ := io.ReadAll(br)
	return answerView{resp.Status, resp.Proto, resp.StatusCode, resp.ProtoMinor, resp.Header, resp.Trailer,
		resp.ContentLength, resp.TransferEncoding, resp.Close, string(body), string(next), err != nil}
}

// TestReadAnswerFast: which answers take the fast path (got/want), and
// that each is read as net/http reads it, the bytes after it left for the
// next answer.
func TestReadAnswerFast(t *testing.T) {
	get, head := &http.Request{Method: "GET"}, &http.Request{Method: "HEAD"}
	for _, tc := range []struct {
		name, raw string
		req       *http.Request
		fast      bool
	}{
		{"small", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1", get, true},
		{"own text, repeated field, pragma", "HTTP/1.1 404 Gone Away\r\nx-a: 1\r\nX-A:  2 \r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx", get, true},
		{"no text", "HTTP/1.1 299\r\nContent-Length: 2\r\n\r\nok", get, true},
		{"empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", get, true},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", head, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", get, false},
		{"103", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", get, false},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", get, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", get, false},
		{"no length", "HTTP/1.1 200 OK\r\n\r\nuntil close", get, false},
		{"Connection", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", get, false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", get, false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok", get, false},
		{"bare LF before the end", "HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\n\r\nok", get, false},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok", get, false},
		{"space before a colon", "HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 2\r\n\r\nok", get, false},
	} {
		br := bufio.NewReader(strings.NewReader(tc.raw))
		resp, fast := readAnswerFast(br, tc.req)
		if fast != tc.fast {
			t.Errorf("%s: fast path %v, want %v", tc.name, fast, tc.fast)
		}
		if !fast {
			if rest, _ := io.ReadAll(br); string(rest) != tc.raw {
				t.Errorf("%s: the fallback consumed bytes", tc.name)
			}
			continue
		}
		nbr := bufio.NewReader(strings.NewReader(tc.raw))
		want, err := http.ReadResponse(nbr, tc.req)
		if err != nil {
			t.Errorf("%s: net/http: %v", tc.name, err)
			continue
		}
		if got, want := viewAnswer(resp, br), viewAnswer(want, nbr); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, want)
		}
	}
}

// FuzzReadAnswerFast: every answer the fast path takes, net/http reads
// as the same answer (status, fields, framing, body, what follows).
//
//	go test ./pkg/egress -run '^$' -fuzz FuzzReadAnswerFast
func FuzzReadAnswerFast(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 404 Gone Away\r\nx-a: 1\r\nX-A:  2 \r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, isHead bool) {
		req := &http.Request{Method: "GET"}
		if isHead {
			req.Method = "HEAD"
		}
		br := bufio.NewReader(bytes.NewReader(raw))
		resp, fast := readAnswerFast(br, req)
		if !fast {
			if rest, _ := io.ReadAll(br); !bytes.Equal(rest, raw) {
				t.Fatalf("the fallback consumed bytes: %q", raw)
			}
			return
		}
		nbr := bufio.NewReader(bytes.NewReader(raw))
		want, err := http.ReadResponse(nbr, req)
		if err != nil {
			t.Fatalf("the fast path takes what net/http refuses (%v): %q", err, raw)
		}
		if got, want := viewAnswer(resp, br), viewAnswer(want, nbr); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast     %+v\nnet/http %+v", raw, got, want)
		}
	})
}
