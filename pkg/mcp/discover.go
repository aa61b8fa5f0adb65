package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// Bounds of a tools/list answer kept for operators.
const (
	maxListPages    = 16
	maxListedTools  = 1024
	maxToolNameLen  = 256
	maxCursorLength = 1024
)

// Tool is one tool a server offers, as tools/list describes it. Description
// is cut to protocol.MaxDescChars characters; InputSchema is nil when the
// server's schema is over protocol.MaxSchemaBytes.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// ListTools asks server s for its tools (operator help for `sandbox-host
// doctor` and `discover: true`; never reachable from a guest). It uses a
// session in auto mode (falling back to a stateless POST like CallTool) and
// a plain POST in stateless mode, follows at most 16 pages, and ends the
// session before returning. opts bounds each page like one call; Timeout
// bounds the whole listing.
func ListTools(ctx context.Context, s policy.MCPServer, credential string, opts Options) ([]Tool, error) {
	if err := checkServer(s); err != nil {
		return nil, err
	}
	if !validBearer(credential) {
		return nil, fmt.Errorf("mcp: credential not usable as a bearer token: %w", ErrInvalid)
	}
	c := NewClient(opts)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}()
	u, err := c.upstreamFor(s, credential)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.stateless {
		sess, err := c.connect(ctx, u)
		switch {
		case err == nil:
			u.sess = sess
		case err == errFallback:
			u.stateless = true
		default:
			return nil, err
		}
	}
	var tools []Tool
	cursor := ""
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, fmt.Errorf("mcp: tools/list: too many pages: %w", ErrTooLarge)
		}
		res, err := c.listPage(ctx, u, cursor)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if t == nil {
				continue
			}
			if len(tools) == maxListedTools {
				return nil, fmt.Errorf("mcp: tools/list: too many tools: %w", ErrTooLarge)
			}
			tools = append(tools, boundTool(t))
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		if len(res.NextCursor) > maxCursorLength || res.NextCursor == cursor {
			return nil, fmt.Errorf("mcp: tools/list: bad cursor: %w", ErrProtocol)
		}
		cursor = res.NextCursor
	}
}

func (c *Client) listPage(ctx context.Context, u *upstream, cursor string) (*sdk.ListToolsResult, error) {
	if u.sess != nil {
		b := newBudget(c.opts.MaxResponseBytes, c.opts.MaxEvents)
		res, err := u.sess.ListTools(withBudget(ctx, b), &sdk.ListToolsParams{Cursor: cursor})
		if err == nil && b.failed() != nil {
			err = b.failed()
		}
		if err != nil {
			return nil, classify(ctx, b, err, "tools/list")
		}
		return res, nil
	}
	var params any
	if cursor != "" {
		params = map[string]string{"cursor": cursor}
	}
	raw, err := c.rpc(ctx, u, "tools/list", params)
	if err != nil {
		return nil, err
	}
	var res sdk.ListToolsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("mcp: tools/list: result is not a tool list: %w", ErrProtocol)
	}
	return &res, nil
}

func boundTool(t *sdk.Tool) Tool {
	out := Tool{Name: cutRunes(t.Name, maxToolNameLen), Description: cutRunes(t.Description, protocol.MaxDescChars)}
	if t.InputSchema != nil {
		if data, err := json.Marshal(t.InputSchema); err == nil && len(data) <= protocol.MaxSchemaBytes {
			out.InputSchema = data
		}
	}
	return out
}

func cutRunes(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// Finding kinds reported by CompareTools.
const (
	// FindingMissing: a declared tool the server does not offer.
	FindingMissing = "missing"
	// FindingSchema: the declared parameters differ from the server's
	// inputSchema after JSON normalization.
	FindingSchema = "schema"
	// FindingSchemaUnknown: the server's inputSchema is absent or too large
	// to compare.
	FindingSchemaUnknown = "schema-unknown"
	// FindingUndeclared: a tool the server offers that the operator did not
	// declare (informational: it stays unreachable).
	FindingUndeclared = "undeclared"
)

// Finding is one difference between declared and offered tools.
type Finding struct {
	Tool   string
	Kind   string
	Detail string
}

// CompareTools reports declared tools the server does not offer, schema
// differences, and offered tools nobody declared, sorted by tool then kind.
func CompareTools(declared []protocol.ToolSpec, offered []Tool) []Finding {
	byName := make(map[string]Tool, len(offered))
	for _, t := range offered {
		byName[t.Name] = t
	}
	isDeclared := make(map[string]bool, len(declared))
	var out []Finding
	for _, d := range declared {
		isDeclared[d.Name] = true
		o, ok := byName[d.Name]
		if !ok {
			out = append(out, Finding{Tool: d.Name, Kind: FindingMissing, Detail: "declared but not offered by the server"})
			continue
		}
		if o.InputSchema == nil {
			out = append(out, Finding{Tool: d.Name, Kind: FindingSchemaUnknown, Detail: "the server's inputSchema is absent or too large to compare"})
			continue
		}
		dn, derr := normalizeSchema(d.Parameters)
		on, oerr := normalizeSchema(o.InputSchema)
		switch {
		case derr != nil:
			out = append(out, Finding{Tool: d.Name, Kind: FindingSchema, Detail: "declared parameters are not valid JSON"})
		case oerr != nil:
			out = append(out, Finding{Tool: d.Name, Kind: FindingSchemaUnknown, Detail: "the server's inputSchema is not valid JSON"})
		case !bytes.Equal(dn, on):
			out = append(out, Finding{Tool: d.Name, Kind: FindingSchema, Detail: schemaDiff(d.Parameters, o.InputSchema)})
		}
	}
	for _, o := range offered {
		if !isDeclared[o.Name] {
			out = append(out, Finding{Tool: o.Name, Kind: FindingUndeclared, Detail: "offered by the server but not declared (not callable)"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Tool != out[j].Tool {
			return out[i].Tool < out[j].Tool
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

// normalizeSchema re-encodes a schema with sorted keys and canonical numbers,
// without its root $schema (a dialect declaration: a server's schema that
// names draft-07 and the same schema declared without it do not differ); an
// absent or null schema stands for an empty object schema.
func normalizeSchema(raw json.RawMessage) ([]byte, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		t = []byte(`{"type":"object"}`)
	}
	var v any
	if err := json.Unmarshal(t, &v); err != nil {
		return nil, err
	}
	return json.Marshal(toolschema.WithoutDialect(v))
}

// schemaDiff names which top-level parts differ, for an operator to act on.
func schemaDiff(declared, offered json.RawMessage) string {
	var d, o map[string]any
	_ = json.Unmarshal(declared, &d)
	_ = json.Unmarshal(offered, &o)
	dp, _ := d["properties"].(map[string]any)
	op, _ := o["properties"].(map[string]any)
	var onlyD, onlyO, differ []string
	for k, v := range dp {
		ov, ok := op[k]
		switch {
		case !ok:
			onlyD = append(onlyD, k)
		case !jsonEqual(v, ov):
			differ = append(differ, k)
		}
	}
	for k := range op {
		if _, ok := dp[k]; !ok {
			onlyO = append(onlyO, k)
		}
	}
	var parts []string
	add := func(label string, names []string) {
		if len(names) == 0 {
			return
		}
		sort.Strings(names)
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = fmt.Sprintf("%q", cutRunes(n, 64))
		}
		parts = append(parts, label+" "+strings.Join(q, ", "))
	}
	add("properties only declared:", onlyD)
	add("properties only on the server:", onlyO)
	add("properties that differ:", differ)
	if !jsonEqual(d["required"], o["required"]) {
		parts = append(parts, "required differs")
	}
	for _, k := range []string{"type", "additionalProperties"} {
		if !jsonEqual(d[k], o[k]) {
			parts = append(parts, k+" differs")
		}
	}
	if len(parts) == 0 {
		return "declared parameters differ from the server's inputSchema"
	}
	return "declared parameters differ from the server's inputSchema: " + strings.Join(parts, "; ")
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
