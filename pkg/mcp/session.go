package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// errFallback reports that session initialization failed in a way that
// suggests a stateless server (it answered, but not with a usable
// InitializeResult), so auto mode may try a single stateless POST.
var errFallback = errors.New("initialization refused")

// connect opens an SDK session on u: initialize with ProtocolVersion,
// notifications/initialized, then the SDK keeps the Mcp-Session-Id and
// MCP-Protocol-Version headers on later requests. The standalone GET stream
// and stream resumption are disabled: the broker only needs answers to its
// own POSTs, and every extra stream would be an unbudgeted channel.
func (c *Client) connect(ctx context.Context, u *upstream) (*sdk.ClientSession, error) {
	b := newBudget(c.opts.MaxResponseBytes, c.opts.MaxEvents)
	client := sdk.NewClient(
		&sdk.Implementation{Name: "roundtable-sandbox-broker", Version: version.Version},
		// No roots, sampling or elicitation: a server cannot ask anything of us.
		&sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}},
	)
	t := &sdk.StreamableClientTransport{
		Endpoint:             u.server.URL,
		HTTPClient:           u.http,
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
		MaxEventSize:         int(c.opts.MaxResponseBytes),
	}
	sess, err := client.Connect(withBudget(ctx, b), t, &sdk.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err == nil {
		c.log.Info("mcp session started", "server", u.server.Name)
		return sess, nil
	}
	violation, transport, status := b.snapshot()
	if u.server.Session != policy.SessionStateless && violation == nil && !transport && ctx.Err() == nil &&
		status != http.StatusUnauthorized && status != http.StatusForbidden {
		return nil, errFallback
	}
	return nil, classify(ctx, b, err, "initialize")
}

// sessionCall performs tools/call on u's session. A session that failed for
// any reason but a JSON-RPC error answer is ended and dropped, so the next
// call starts a fresh one. gone reports that the server refused the call
// because it does not know the session (see sessionRefused): the call did
// not run.
func (c *Client) sessionCall(ctx context.Context, u *upstream, tool string, args json.RawMessage) (_ json.RawMessage, gone bool, _ error) {
	b := newBudget(c.opts.MaxResponseBytes, c.opts.MaxEvents)
	res, err := u.sess.CallTool(withBudget(ctx, b), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err == nil && b.failed() != nil {
		err = b.failed()
	}
	if err != nil {
		cerr := classify(ctx, b, err, "tools/call")
		if b.unknownSession() {
			// The server no longer knows the session (restart, expiry): it
			// refused the call before running it. The guard has forgotten
			// the id, so ending the session sends nothing.
			c.endSession(u.sess)
			u.sess = nil
			return nil, true, cerr
		}
		if !errors.Is(cerr, ErrRPC) {
			c.log.Info("mcp session dropped after a failed call", "server", u.server.Name, "category", category(cerr))
			c.endSession(u.sess)
			u.sess = nil
		}
		return nil, false, cerr
	}
	raw, err := encodeResult(res, c.opts.MaxResponseBytes)
	return raw, false, err
}

// endSession closes a dropped session in the background; Close waits for it.
func (c *Client) endSession(s *sdk.ClientSession) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		_ = s.Close()
	}()
}

// sdkRPCCode extracts the code of a JSON-RPC error answer (never its text).
func sdkRPCCode(err error) (int64, bool) {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we != nil {
		return we.Code, true
	}
	return 0, false
}

// result is the only shape handed back: no _meta, no input requests, no
// request state, nothing session-related.
type result struct {
	Content           []sdk.Content `json:"content"`
	StructuredContent any           `json:"structuredContent,omitempty"`
	IsError           bool          `json:"isError,omitempty"`
}

// encodeResult normalizes a decoded CallToolResult and bounds its encoding.
func encodeResult(res *sdk.CallToolResult, max int64) (json.RawMessage, error) {
	if res == nil {
		return nil, fmt.Errorf("mcp: tools/call: empty result: %w", ErrProtocol)
	}
	if len(res.InputRequests) > 0 || res.RequestState != "" {
		// An input-required answer needs a second round the broker does not
		// offer; passing it on would hand the guest server state.
		return nil, fmt.Errorf("mcp: tools/call: input requested: %w", ErrProtocol)
	}
	out := result{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}
	if out.Content == nil {
		out.Content = []sdk.Content{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("mcp: tools/call: result not encodable: %w", ErrProtocol)
	}
	data := bytes.TrimRight(buf.Bytes(), "\n")
	if int64(len(data)) > max {
		return nil, fmt.Errorf("mcp: tools/call: %w", ErrTooLarge)
	}
	return json.RawMessage(data), nil
}

// category names an error's exported category for logs.
func category(err error) string {
	for _, e := range []error{ErrInvalid, ErrURL, ErrRedirect, ErrTooLarge, ErrTooManyEvents, ErrTimeout, ErrCanceled, ErrUnavailable, ErrRPC, ErrProtocol} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "unknown"
}
