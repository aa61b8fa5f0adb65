package safefetch

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
)

// readBody reads at most max wire bytes, then decodes the one content coding
// the response names into at most max bytes. Anything over either bound is
// refused, not truncated: a decompression bomb stops at max+1 decoded bytes.
func readBody(resp *http.Response, max int64) ([]byte, error) {
	if resp.ContentLength > max {
		return nil, &Error{Kind: ErrTooLarge, msg: fmt.Sprintf("Content-Length %d exceeds %d bytes", resp.ContentLength, max)}
	}
	coding, err := contentCoding(resp.Header)
	if err != nil {
		return nil, err
	}
	wire, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, &Error{Kind: ErrHTTP, msg: "reading body", err: err}
	}
	if int64(len(wire)) > max {
		return nil, &Error{Kind: ErrTooLarge, msg: fmt.Sprintf("wire body exceeds %d bytes", max)}
	}
	return decode(coding, wire, max)
}

// contentCoding returns the response's single content coding ("" for none).
// Stacked codings are refused: no server needs them and each layer multiplies
// a bomb's ratio.
func contentCoding(h http.Header) (string, error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return "", nil
	case len(codings) > 1:
		return "", &Error{Kind: ErrEncoding, msg: fmt.Sprintf("stacked content codings %q", codings)}
	}
	switch codings[0] {
	case "gzip", "x-gzip":
		return "gzip", nil
	case "deflate", "br":
		return codings[0], nil
	}
	return "", &Error{Kind: ErrEncoding, msg: fmt.Sprintf("content coding %q is not gzip, deflate or br", codings[0])}
}

// decode decodes wire with coding into at most max bytes.
func decode(coding string, wire []byte, max int64) ([]byte, error) {
	var r io.Reader
	switch coding {
	case "":
		return wire, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(wire))
		if err != nil {
			return nil, &Error{Kind: ErrEncoding, msg: "gzip header", err: err}
		}
		defer zr.Close()
		r = zr
	case "deflate":
		// HTTP's "deflate" is zlib (RFC 9110); some servers send raw
		// DEFLATE. Decide from the zlib header, as browsers do.
		if len(wire) >= 2 && wire[0]&0x0f == 8 && (uint16(wire[0])<<8|uint16(wire[1]))%31 == 0 {
			zr, err := zlib.NewReader(bytes.NewReader(wire))
			if err != nil {
				return nil, &Error{Kind: ErrEncoding, msg: "zlib header", err: err}
			}
			defer zr.Close()
			r = zr
		} else {
			fr := flate.NewReader(bytes.NewReader(wire))
			defer fr.Close()
			r = fr
		}
	case "br":
		r = brotli.NewReader(bytes.NewReader(wire))
	default:
		return nil, &Error{Kind: ErrEncoding, msg: coding}
	}
	out, err := io.ReadAll(io.LimitReader(r, max+1))
	if int64(len(out)) > max {
		return nil, &Error{Kind: ErrTooLarge, msg: fmt.Sprintf("decoded %s body exceeds %d bytes", coding, max)}
	}
	if err != nil {
		return nil, &Error{Kind: ErrEncoding, msg: "corrupt " + coding + " body", err: err}
	}
	return out, nil
}
