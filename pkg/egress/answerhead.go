package egress

// A fast path for the intercepted path's answers (issue 37's per-request
// cost, docs/BENCHMARKS.md): the common small answer, a head wholly in the
// reader's buffer with one Content-Length, is parsed from the buffered
// bytes without net/http's general reader. Anything else (1xx, chunked,
// no length, a Connection field, a line net/http would read differently)
// leaves the bytes where they are and net/http's ReadResponse reads them,
// so what is accepted and how it is read does not change
// (FuzzReadAnswerFast compares the two on every input the fast path takes).

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
)

// readAnswer reads one answer to req from br: the fast path when it
// applies, net/http's ReadResponse otherwise.
func readAnswer(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if resp, ok := readAnswerFast(br, req); ok {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

var crlf2 = []byte("\r\n\r\n")

// readAnswerFast parses an answer whose head is already buffered in br:
// HTTP/1.1, a status of 200 to 599 but 204 and 304, to a request other
// than HEAD, exactly one Content-Length of digits, no Transfer-Encoding,
// Connection or Trailer field, every line ended by CRLF and a field line
// of a token name. false leaves br as it was.
func readAnswerFast(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	if req == nil || req.Method == http.MethodHead {
		return nil, false
	}
	if _, err := br.Peek(1); err != nil {
		return nil, false
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, crlf2)
	if end < 0 {
		return nil, false
	}
	raw := buf[:end+4]
	for i, c := range raw {
		if c == '\n' && (i == 0 || raw[i-1] != '\r') || c == '\r' && (i+1 == len(raw) || raw[i+1] != '\n') {
			return nil, false
		}
	}
	head := string(raw)
	line, rest, _ := strings.Cut(head, "\r\n")
	status, ok := strings.CutPrefix(line, "HTTP/1.1 ")
	if !ok || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return nil, false
	}
	code := 0
	for _, c := range []byte(status[:3]) {
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	h, err := parseFields(rest, fieldsAnswer)
	if err != nil {
		return nil, false
	}
	cl, okCL := contentLength(h["Content-Length"])
	if !okCL {
		return nil, false
	}
	for _, k := range []string{"Transfer-Encoding", "Connection", "Trailer"} {
		if _, ok := h[k]; ok {
			return nil, false
		}
	}
	if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	_, _ = br.Discard(len(raw))
	resp := &http.Response{Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: cl, Request: req, Body: http.NoBody}
	if cl > 0 {
		resp.Body = &lengthBody{r: io.LimitedReader{R: br, N: cl}}
	}
	return resp, true
}
