package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// BenchmarkCallTool measures one tools/call on loopback per path. Numbers
// are for reports only; no test asserts on time.
func BenchmarkCallTool(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts *sdk.StreamableHTTPOptions
		mode string
	}{
		{"session-sse", nil, policy.SessionAuto},
		{"session-json", &sdk.StreamableHTTPOptions{JSONResponse: true}, policy.SessionAuto},
		{"stateless-json", &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true}, policy.SessionStateless},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ts, _, _ := newSDKServer(b, tc.opts)
			c := NewClient(testOptions())
			defer func() { _ = c.Close(b.Context()) }()
			s := server(ts.URL, tc.mode)
			args := json.RawMessage(`{"text":"bench"}`)
			for b.Loop() {
				if _, err := c.CallTool(b.Context(), s, testCred, "echo", args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSessionSetup measures a whole session per iteration: initialize,
// notifications/initialized, one tools/call, DELETE.
func BenchmarkSessionSetup(b *testing.B) {
	ts, _, _ := newSDKServer(b, nil)
	s := server(ts.URL, policy.SessionAuto)
	args := json.RawMessage(`{"text":"bench"}`)
	for b.Loop() {
		c := NewClient(testOptions())
		if _, err := c.CallTool(b.Context(), s, testCred, "echo", args); err != nil {
			b.Fatal(err)
		}
		if err := c.Close(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
