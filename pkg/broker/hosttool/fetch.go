package hosttool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"

	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// FetchBounds are one fetch tool's operator-set bounds.
type FetchBounds struct {
	Timeout      time.Duration // whole fetch, redirects included (1 ms-120 s)
	MaxBytes     int64         // wire and decoded body (1 B-32 MiB)
	MaxTextBytes int           // the text the guest receives
}

// FetchLog is what the broker may log about a fetch: the normalized host
// (empty when the URL did not parse), the final status (0 when no response
// was read) and the refusal category in the package's own words. Never the
// URL's path or query, never a body.
type FetchLog struct {
	Host   string
	Status int
	Reason string
}

// TruncatedMarker ends a text cut at MaxTextBytes.
const TruncatedMarker = "\n[truncated]"

// fetchAccept is what a fetch asks for; anything else is refused anyway.
const fetchAccept = "text/html, application/xhtml+xml, application/json, text/plain;q=0.9"

// Fetch performs a guest's fetch: input is the guest's JSON object
// {"url": "..."} and nothing else; the URL goes through f (vetted, pinned,
// bounded); a 2xx answer of HTML (reduced to text), JSON or plain text
// becomes at most b.MaxTextBytes of UTF-8 text. Every other outcome is an
// error of this package's categories, with a FetchLog for the broker's line.
func Fetch(ctx context.Context, f *safefetch.Fetcher, input []byte, b FetchBounds) (string, FetchLog, error) {
	var in struct {
		URL string `json:"url"`
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.URL == "" {
		return "", FetchLog{Reason: "input is not {\"url\": string}"}, fmt.Errorf("hosttool: fetch input: %w", ErrFailed)
	}
	var lg FetchLog
	u, err := safefetch.ParseURL(in.URL)
	if err != nil {
		lg.Reason = fetchReason(err)
		return "", lg, fmt.Errorf("hosttool: fetch %s: %w", lg.Reason, ErrFailed)
	}
	lg.Host = u.Hostname()
	o := safefetch.DefaultOptions()
	o.Timeout, o.MaxBytes = b.Timeout, b.MaxBytes
	o.Header = map[string][]string{"Accept": {fetchAccept}}
	res, err := f.Fetch(ctx, in.URL, o)
	if err != nil {
		lg.Reason = fetchReason(err)
		switch {
		case errors.Is(err, safefetch.ErrDeadline):
			return "", lg, fmt.Errorf("hosttool: fetch %s: %w", lg.Reason, ErrTimeout)
		case errors.Is(err, safefetch.ErrTooLarge):
			return "", lg, fmt.Errorf("hosttool: fetch %s: %w", lg.Reason, ErrTooLarge)
		}
		return "", lg, fmt.Errorf("hosttool: fetch %s: %w", lg.Reason, ErrFailed)
	}
	lg.Status = res.Status
	if fu, err := safefetch.ParseURL(res.URL); err == nil {
		lg.Host = fu.Hostname()
	}
	if res.Status < 200 || res.Status > 299 {
		lg.Reason = "status not 2xx"
		return "", lg, fmt.Errorf("hosttool: fetch %s: %w", lg.Reason, ErrFailed)
	}
	text, reason := bodyText(res.Header.Get("Content-Type"), res.Body, b.MaxTextBytes)
	if reason != "" {
		lg.Reason = reason
		return "", lg, fmt.Errorf("hosttool: fetch %s: %w", reason, ErrFailed)
	}
	return text, lg, nil
}

// fetchReason names a safefetch refusal by its kind only: the error's own
// text carries guest-chosen host names and paths.
func fetchReason(err error) string {
	for _, k := range []error{safefetch.ErrOptions, safefetch.ErrRedirect, safefetch.ErrURL, safefetch.ErrAddress,
		safefetch.ErrResolve, safefetch.ErrConnect, safefetch.ErrDeadline, safefetch.ErrCanceled, safefetch.ErrTooLarge,
		safefetch.ErrEncoding, safefetch.ErrHTTP} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "failed"
}

// bodyText turns a body into the guest's text by its media type; reason is
// non-empty on refusal.
func bodyText(contentType string, body []byte, max int) (text string, reason string) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", "content type missing or invalid"
	}
	var isHTML bool
	switch {
	case mt == "text/html", mt == "application/xhtml+xml":
		isHTML = true
	case mt == "text/plain", mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
	default:
		return "", "content type not allowed"
	}
	var r io.Reader = bytes.NewReader(body)
	if cs := strings.ToLower(params["charset"]); cs != "" && cs != "utf-8" && cs != "utf8" && cs != "us-ascii" {
		enc, _ := charset.Lookup(cs)
		if enc == nil {
			return "", "charset not supported"
		}
		r = enc.NewDecoder().Reader(r)
	}
	w := &textWriter{max: max}
	if isHTML {
		htmlText(r, w)
	} else {
		// Bounded: the output stops at max; a charset decoder reads on only
		// as far as it is asked to.
		_, _ = io.Copy(w, r)
	}
	return w.String(), ""
}

// textWriter collects at most max bytes of valid UTF-8 without control
// characters (tab and newline kept) and then refuses more, marking the cut.
type textWriter struct {
	b         strings.Builder
	max       int
	truncated bool
}

var errFull = errors.New("text full")

func (w *textWriter) Write(p []byte) (int, error) {
	if w.truncated {
		return 0, errFull
	}
	total := len(p)
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && n <= 1:
			r = utf8.RuneError
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0:
			r = ' '
		}
		if w.b.Len()+utf8.RuneLen(r) > w.max {
			w.truncated = true
			return 0, errFull
		}
		w.b.WriteRune(r)
		p = p[n:]
	}
	return total, nil
}

func (w *textWriter) String() string {
	if w.truncated {
		return strings.TrimRight(w.b.String(), " \n\t") + TruncatedMarker
	}
	return w.b.String()
}

// skipped elements contribute no text.
var skipped = map[string]bool{
	"script": true, "style": true, "noscript": true, "template": true, "svg": true, "math": true,
	"iframe": true, "object": true, "embed": true, "canvas": true, "select": true, "head": true,
}

// blocks end a line.
var blocks = map[string]bool{
	"p": true, "div": true, "br": true, "li": true, "ul": true, "ol": true, "tr": true, "table": true,
	"h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true, "section": true, "article": true,
	"header": true, "footer": true, "nav": true, "main": true, "aside": true, "pre": true, "blockquote": true,
	"hr": true, "dd": true, "dt": true, "dl": true, "figure": true, "figcaption": true, "title": true,
	"form": true, "fieldset": true, "address": true, "details": true, "summary": true, "body": true, "html": true,
}

// htmlText writes the visible text of an HTML document: script, style and
// the like dropped, entities decoded, whitespace collapsed, one line per
// block. The title (inside head) is kept. It stops when w is full.
func htmlText(r io.Reader, w *textWriter) {
	z := html.NewTokenizer(r)
	skip := 0 // depth inside skipped elements
	inTitle := false
	pendingSpace, pendingLine, atLineStart := false, false, true
	emit := func(s string) bool {
		if pendingLine && !atLineStart {
			if _, err := w.Write([]byte("\n")); err != nil {
				return false
			}
			atLineStart = true
		} else if pendingSpace && !atLineStart {
			if _, err := w.Write([]byte(" ")); err != nil {
				return false
			}
		}
		pendingSpace, pendingLine = false, false
		if _, err := w.Write([]byte(s)); err != nil {
			return false
		}
		atLineStart = false
		return true
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, _ := z.TagName()
			tag := string(name)
			if tag == "title" {
				inTitle = tt == html.StartTagToken
			}
			if skipped[tag] && tt != html.SelfClosingTagToken {
				if tt == html.StartTagToken {
					skip++
				} else if skip > 0 {
					skip--
				}
			}
			if blocks[tag] {
				pendingLine = true
			}
		case html.TextToken:
			if skip > 0 && !inTitle {
				continue
			}
			t := string(z.Text())
			if t != "" && isSpace(t[0]) {
				pendingSpace = true
			}
			for i, word := range strings.Fields(t) {
				if i > 0 {
					pendingSpace = true
				}
				if !emit(word) {
					return
				}
			}
			if t != "" && isSpace(t[len(t)-1]) {
				pendingSpace = true
			}
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' }
