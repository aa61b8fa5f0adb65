package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// The broker's seam, copied here so a drift in either signature fails the build.
type mcpUpstream interface {
	CallTool(ctx context.Context, s policy.MCPServer, credential, tool string, args json.RawMessage) (json.RawMessage, error)
	Close(ctx context.Context) error
}

var _ mcpUpstream = (*Client)(nil)

const (
	testCred   = "tok-9f8e7d6c5b4a-SECRET"
	bodyMarker = "UPSTREAM-BODY-TEXT-7731"
)

// recorder wraps a handler and records what the upstream saw.
type recorder struct {
	mu          sync.Mutex
	auth        []string // Authorization of every request
	httpMethods []string
	rpcMethods  []string
	sessionHdr  []string // Mcp-Session-Id sent by the client, per request
	protoHdr    []string // MCP-Protocol-Version sent by the client, per request
	issued      []string // Mcp-Session-Id issued by the server
	deletes     []string // session ids of DELETE requests
	callCT      []string // Content-Type of tools/call answers
	cookies     int
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		rec.mu.Lock()
		rec.auth = append(rec.auth, r.Header.Get("Authorization"))
		rec.httpMethods = append(rec.httpMethods, r.Method)
		if m.Method != "" {
			rec.rpcMethods = append(rec.rpcMethods, m.Method)
		}
		rec.sessionHdr = append(rec.sessionHdr, r.Header.Get("Mcp-Session-Id"))
		rec.protoHdr = append(rec.protoHdr, r.Header.Get("Mcp-Protocol-Version"))
		if r.Method == http.MethodDelete {
			rec.deletes = append(rec.deletes, r.Header.Get("Mcp-Session-Id"))
		}
		if r.Header.Get("Cookie") != "" {
			rec.cookies++
		}
		rec.mu.Unlock()
		// Record what the answer's headers say when they are written, not after
		// the handler returns: the client may act on the answer (and the test
		// read the recorder) before ServeHTTP has returned.
		hw := &headerWatch{ResponseWriter: w, onHeader: func(hdr http.Header) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if id := hdr.Get("Mcp-Session-Id"); id != "" && m.Method == "initialize" {
				rec.issued = append(rec.issued, id)
			}
			if m.Method == "tools/call" {
				rec.callCT = append(rec.callCT, hdr.Get("Content-Type"))
			}
		}}
		h.ServeHTTP(hw, r)
		hw.header() // a handler that wrote nothing still answered (200, empty)
	})
}

// headerWatch calls onHeader once, right before the response headers go out.
type headerWatch struct {
	http.ResponseWriter
	onHeader func(http.Header)
	done     bool
}

func (h *headerWatch) header() {
	if !h.done {
		h.done = true
		h.onHeader(h.ResponseWriter.Header())
	}
}

func (h *headerWatch) WriteHeader(code int) {
	h.header()
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerWatch) Write(p []byte) (int, error) {
	h.header()
	return h.ResponseWriter.Write(p)
}

func (h *headerWatch) Flush() {
	h.header()
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (h *headerWatch) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (rec *recorder) count(method string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := 0
	for _, m := range rec.rpcMethods {
		if m == method {
			n++
		}
	}
	return n
}

func (rec *recorder) requests() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.httpMethods)
}

var echoSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"what to echo"}},"required":["text"],"additionalProperties":false}`)

// newSDKServer is a real Streamable HTTP server from the official SDK.
func newSDKServer(t testing.TB, opts *sdk.StreamableHTTPOptions) (*httptest.Server, *sdk.Server, *recorder) {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test-server", Version: "1.0.0"},
		&sdk.ServerOptions{Instructions: "SERVER-INSTRUCTIONS-DO-NOT-LEAK"})
	srv.AddTool(&sdk.Tool{Name: "echo", Description: "Echo text back", InputSchema: echoSchema},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var in struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}},
				StructuredContent: map[string]any{"echoed": in.Text},
				Meta:              sdk.Meta{"sessionHint": "META-DO-NOT-LEAK"},
			}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "add", Description: "Add numbers", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "3"}}}, nil
		})
	rec := &recorder{}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, opts)
	ts := httptest.NewServer(rec.wrap(h))
	t.Cleanup(ts.Close)
	return ts, srv, rec
}

func server(url, session string) policy.MCPServer {
	return policy.MCPServer{Name: "srv", URL: url, Session: session, Tools: []string{"echo"}, AllowHTTP: true}
}

func testOptions() Options {
	return Options{MaxResponseBytes: 64 << 10, Timeout: 5 * time.Second, MaxEvents: 32}
}

func closeClient(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// assertClean fails when an error text carries anything upstream-derived.
func assertClean(t *testing.T, err error, forbidden ...string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, f := range append(forbidden, testCred, bodyMarker, "127.0.0.1", "http://", "Bearer", "SESSION") {
		if f != "" && strings.Contains(msg, f) {
			t.Errorf("error %q contains %q", msg, f)
		}
	}
}

// fake is a hand-written Streamable HTTP server whose answers tests shape.
type fake struct {
	// refuseInit answers initialize with a JSON-RPC error; ignoreInit
	// answers it like any other call (a stateless server that ignores methods).
	refuseInit bool
	ignoreInit bool
	call       func(w http.ResponseWriter, r *http.Request, id json.RawMessage)
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	switch {
	case req.ID == nil: // notification
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "initialize" && f.refuseInit:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"%s no sessions here"}}`, req.ID, bodyMarker)
	case req.Method == "initialize" && !f.ignoreInit:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "SESSION-FAKE-1")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"},"instructions":"%s"}}`, req.ID, bodyMarker)
	default:
		f.call(w, r, req.ID)
	}
}

func jsonAnswer(body string) func(http.ResponseWriter, *http.Request, json.RawMessage) {
	return func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, body, id)
	}
}

func okResult(text string) string {
	return `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"` + text + `"}]}}`
}

func sseStart(w http.ResponseWriter) http.Flusher {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	f.Flush()
	return f
}

func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

func newFake(t *testing.T, f *fake) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	return newServer(t, rec.wrap(f)), rec
}

func newServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}
