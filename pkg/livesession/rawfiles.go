package livesession

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
)

// The raw file routes (docs/api.md, Sessions): PUT and GET
// /v1/sessions/{session}/files/raw?path=P carry a file's bytes as the
// request or answer body (application/octet-stream) instead of base64 in
// JSON, which cost a 1 MiB transfer about 20 ms of encoding and decoding in
// the host and the client (docs/BENCHMARKS.md). What reaches the session is
// what the JSON routes send: the same Put and Get, bounds, path checks and
// atomic write.

// Headers of a raw get's answer: the file's permission bits (octal), and
// whether it changed while read; a tar's count of entries skipped.
const (
	HeaderFileMode    = "X-Sandbox-File-Mode"
	HeaderFileChanged = "X-Sandbox-File-Changed"
	HeaderFileSkipped = "X-Sandbox-File-Skipped"
)

// rawContentType is the one body type a raw put takes.
const rawContentType = "application/octet-stream"

// RawQuery is the query of a raw file route.
type RawQuery struct {
	Path string
	Mode uint32 // a put's permission bits (0: 0644)
	Tar  bool   // a get's: the directory at Path as a tar
}

// ParseRawQuery reads a raw route's query: path (required, once), mode
// (octal, a put's only), tar (true or false, a get's only). An unknown or
// repeated parameter, a bad escape or an empty path is refused with a
// reason naming the parameter, never quoting its value.
func ParseRawQuery(raw string, put bool) (RawQuery, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return RawQuery{}, errors.New("the query is not a valid URL query")
	}
	var q RawQuery
	for name, vals := range v {
		if len(vals) != 1 {
			return RawQuery{}, fmt.Errorf("the query parameter %q is given %d times", name, len(vals))
		}
		val := vals[0]
		switch {
		case name == "path":
			q.Path = val
		case name == "mode" && put:
			m, err := strconv.ParseUint(val, 8, 32)
			if err != nil || m > 0o777 {
				return RawQuery{}, errors.New("mode must be octal permission bits, at most 0777")
			}
			q.Mode = uint32(m)
		case name == "tar" && !put:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return RawQuery{}, errors.New("tar must be true or false")
			}
			q.Tar = b
		default:
			return RawQuery{}, fmt.Errorf("unknown query parameter %.64q", name)
		}
	}
	if q.Path == "" {
		return RawQuery{}, errors.New("the query parameter path is required")
	}
	return q, nil
}

// handlePutRaw writes the request body at ?path in s. A body over
// sessions.maxFileBytes is refused (413 naming the key) before it is
// read when its length is announced, else once it passes the bound.
func (k *Kind) handlePutRaw(w http.ResponseWriter, r *http.Request, s *Session) error {
	q, err := ParseRawQuery(r.URL.RawQuery, true)
	if err != nil {
		return invalidf("%s", err)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != rawContentType {
			return invalidf("Content-Type must be %s", rawContentType)
		}
	}
	if err := filePath(q.Path); err != nil {
		return err
	}
	bound := int64(k.cfg.Sessions.MaxFileBytes)
	if r.ContentLength > bound {
		return tooLarge(bound)
	}
	// The body is read under the session's transfer lock, so the host
	// holds one transfer's bytes per session at a time (sessions.maxFileBytes).
	s.files.Lock()
	defer s.files.Unlock()
	// Presized from the announced length (bounded above), so the body is
	// read with no copy; a chunked body grows as it comes.
	buf := make([]byte, 0, max(r.ContentLength, 0)+1)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(api.BodyReadTimeout))
	data, err := readBounded(r.Body, buf, bound)
	_ = rc.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, errOverBound):
		return tooLarge(bound)
	case err != nil:
		return invalidf("could not read the request body")
	}
	f, err := k.putLocked(r.Context(), s, q.Path, q.Mode, data)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, f)
	return nil
}

var errOverBound = errors.New("over the bound")

// tooLarge refuses a file over sessions.maxFileBytes (413).
func tooLarge(bound int64) error {
	return refused(ErrTooLarge, fmt.Sprintf("the file is over %d bytes (sessions.maxFileBytes)", bound))
}

// readBounded appends r's bytes to buf until EOF; errOverBound once they
// pass max bytes (it reads at most max+1).
func readBounded(r io.Reader, buf []byte, max int64) ([]byte, error) {
	lr := io.LimitReader(r, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return nil, errOverBound
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// handleGetRaw answers the file at ?path in s (?tar=true: the directory
// as a tar) as the body, its length in Content-Length and its mode,
// changed and skipped in the X-Sandbox-File-* headers.
func (k *Kind) handleGetRaw(w http.ResponseWriter, r *http.Request, s *Session) error {
	q, err := ParseRawQuery(r.URL.RawQuery, false)
	if err != nil {
		return invalidf("%s", err)
	}
	f, err := k.Get(r.Context(), s, q.Path, q.Tar)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", rawContentType)
	h.Set("Content-Length", strconv.Itoa(len(f.Data)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(HeaderFileMode, fmt.Sprintf("%04o", f.Mode))
	if f.Changed {
		h.Set(HeaderFileChanged, "true")
	}
	if q.Tar {
		h.Set(HeaderFileSkipped, strconv.Itoa(f.Skipped))
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(api.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(f.Data)
	return nil
}
