package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcID is the id of the one request a stateless exchange carries.
const rpcID = 1

// statelessCall performs tools/call as one plain JSON-RPC POST, with no
// initialization and no session.
func (c *Client) statelessCall(ctx context.Context, u *upstream, tool string, args json.RawMessage) (json.RawMessage, error) {
	params := struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{tool, args}
	raw, err := c.rpc(ctx, u, "tools/call", params)
	if err != nil {
		return nil, err
	}
	var res sdk.CallToolResult
	// The SDK's decoder gives both paths the same content validation.
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("mcp: tools/call: result is not a CallToolResult: %w", ErrProtocol)
	}
	return encodeResult(&res, c.opts.MaxResponseBytes)
}

type rpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int    `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code int64 `json:"code"`
	} `json:"error"`
}

// rpc POSTs one request and returns its result object. The answer may be
// application/json or an event stream; in a stream, notifications and
// server requests before our response are skipped (they count against the
// event and byte budget) and cannot be answered without a session.
func (c *Client) rpc(ctx context.Context, u *upstream, method string, params any) (json.RawMessage, error) {
	b := newBudget(c.opts.MaxResponseBytes, c.opts.MaxEvents)
	body, err := json.Marshal(rpcRequest{JSONRPC: "2.0", ID: rpcID, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("mcp: %s: %w", method, ErrInvalid)
	}
	req, err := http.NewRequestWithContext(withBudget(ctx, b), http.MethodPost, u.server.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", ErrURL)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := u.http.Do(req)
	if err != nil {
		return nil, classify(ctx, b, err, method)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, classify(ctx, b, nil, method)
	}
	var msg []byte
	switch baseMediaType(resp.Header.Get("Content-Type")) {
	case "application/json":
		msg, err = io.ReadAll(resp.Body)
		if err != nil {
			return nil, classify(ctx, b, err, method)
		}
		res, err := decodeResponse(msg)
		if err != nil {
			return nil, classify(ctx, b, err, method)
		}
		return res, nil
	case "text/event-stream":
		res, err := readStream(resp.Body, c.opts.MaxResponseBytes)
		if err != nil {
			return nil, classify(ctx, b, err, method)
		}
		return res, nil
	}
	return nil, fmt.Errorf("mcp: %s: unexpected content type: %w", method, ErrProtocol)
}

// errNotOurs marks a well-formed message that is not the response to our
// request (a notification or server request in a stream).
var errNotOurs = fmt.Errorf("not the awaited response: %w", ErrProtocol)

// decodeResponse checks one JSON-RPC response to request rpcID and returns
// its result object.
func decodeResponse(data []byte) (json.RawMessage, error) {
	var r rpcResponse
	if err := json.Unmarshal(data, &r); err != nil || r.JSONRPC != "2.0" {
		return nil, fmt.Errorf("not a JSON-RPC response: %w", ErrProtocol)
	}
	if r.Method != "" {
		return nil, errNotOurs
	}
	var id int64
	if err := json.Unmarshal(r.ID, &id); err != nil || id != rpcID {
		return nil, fmt.Errorf("response id mismatch: %w", ErrProtocol)
	}
	if r.Error != nil {
		return nil, &sdkRPCError{code: r.Error.Code}
	}
	res := bytes.TrimLeft(r.Result, " \t\r\n")
	if len(res) == 0 || res[0] != '{' {
		return nil, fmt.Errorf("result is not an object: %w", ErrProtocol)
	}
	return r.Result, nil
}

// readStream reads server-sent events until the response to our request.
// The guard below already bounds bytes and events; max only sizes the line
// buffer.
func readStream(r io.Reader, max int64) (json.RawMessage, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), int(max)+1)
	sc.Split(scanLines)
	var data bytes.Buffer
	var name string
	hasData := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if hasData && (name == "" || name == "message") {
				res, err := decodeResponse(data.Bytes())
				if err == nil {
					return res, nil
				}
				if err != errNotOurs {
					return nil, err
				}
			}
			data.Reset()
			name, hasData = "", false
			continue
		}
		if line[0] == ':' {
			continue // comment / keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "event":
			name = string(value)
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, errTooLarge
		}
		return nil, err
	}
	// An unterminated last event is discarded, as the SSE spec says.
	return nil, fmt.Errorf("stream ended without a response: %w", ErrProtocol)
}

// scanLines splits on "\r\n", "\n" or "\r", the SSE line endings.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // need one more byte to know
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
