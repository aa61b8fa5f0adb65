package anthropic

import (
	"bytes"
	"encoding/base64"
	"errors"
	"regexp"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// ceilingEffort is the highest output_config.effort a thinking ceiling
// (richproto.ThinkingLevels) admits; its budget is richproto.ThinkingBudget.
var ceilingEffort = map[string]string{"off": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}

// effortRank orders the provider's effort levels; "high" is its default.
var effortRank = map[string]int{"low": 1, "medium": 2, "high": 3, "xhigh": 4, "max": 5}

// Limits is what the policy fixes for one call.
type Limits struct {
	// Model is the profile's fixed model: a request naming another is refused.
	Model string
	// MaxOutputTokens bounds max_tokens (a request asking more gets this).
	MaxOutputTokens int
	// Thinking is the turn's ceiling, a richproto.ThinkingLevels value
	// ("" is "off"): the budget and effort a request may ask at most.
	Thinking string
}

// ErrLimits: the broker's own limits are unusable (a host bug: HTTP 500).
var ErrLimits = errors.New("anthropic: limits invalid")

func (l Limits) check() error {
	if l.Model == "" || l.MaxOutputTokens < 1 {
		return ErrLimits
	}
	if _, ok := ceilingEffort[l.ceiling()]; !ok {
		return ErrLimits
	}
	return nil
}

func (l Limits) ceiling() string {
	if l.Thinking == "" {
		return "off"
	}
	return l.Thinking
}

// Rebuilt is a checked request, ready for the upstream.
type Rebuilt struct {
	Body   []byte // the re-encoded request
	Stream bool   // the request asked for server-sent events
}

// Rebuild checks a guest's Messages request and returns the body the broker
// sends: see the package comment for what is admitted. max_tokens is set to
// the policy's limit when absent or above it; thinking budget and effort
// above the turn's ceiling are lowered to it (thinking dropped under
// "off"); adaptive thinking without an effort gets the ceiling's effort when
// that is below the provider's default (high).
func Rebuild(body []byte, l Limits) (Rebuilt, error) {
	out, stream, err := rebuild(body, l, false)
	return Rebuilt{Body: out, Stream: stream}, err
}

// RebuildCountTokens checks a count_tokens request (the fields of a Messages
// request that count: model, system, messages, tools, tool_choice, thinking)
// and returns the body the broker sends.
func RebuildCountTokens(body []byte, l Limits) ([]byte, error) {
	out, _, err := rebuild(body, l, true)
	return out, err
}

var countFields = map[string]bool{
	"model": true, "system": true, "messages": true, "tools": true, "tool_choice": true, "thinking": true,
}

var messageFields = map[string]bool{
	"model": true, "system": true, "messages": true, "tools": true, "tool_choice": true, "thinking": true,
	"max_tokens": true, "output_config": true, "stream": true, "stop_sequences": true, "temperature": true,
	"top_p": true, "top_k": true, "metadata": true,
}

// rebuilder carries the counts of one request.
type rebuilder struct {
	images, breakpoints int
}

func rebuild(body []byte, l Limits, count bool) ([]byte, bool, error) {
	if err := l.check(); err != nil {
		return nil, false, err
	}
	if len(body) > MaxRequestBytes {
		return nil, false, &refusal{"body over the limit", ErrTooLarge}
	}
	if err := strictjson.CountTokens(body, MaxJSONTokens); err != nil {
		return nil, false, err
	}
	req, err := strictjson.DecodeObject(body)
	if err != nil {
		return nil, false, err
	}
	fields := messageFields
	if count {
		fields = countFields
	}
	if err := only(req, fields); err != nil {
		return nil, false, err
	}
	var rb rebuilder
	out := map[string]any{"model": l.Model}
	if m, ok := req["model"]; ok {
		if s, ok := m.(string); !ok || s != l.Model {
			return nil, false, invalid("model is not the profile's")
		}
	}
	if v, ok := req["system"]; ok {
		s, err := rb.system(v)
		if err != nil {
			return nil, false, err
		}
		out["system"] = s
	}
	msgs, ok := req["messages"].([]any)
	if !ok || len(msgs) == 0 {
		return nil, false, invalid("messages must be a non-empty array")
	}
	rm := make([]any, 0, len(msgs))
	for _, m := range msgs {
		r, err := rb.message(m)
		if err != nil {
			return nil, false, err
		}
		rm = append(rm, r)
	}
	out["messages"] = rm
	toolNames := map[string]bool{}
	if v, ok := req["tools"]; ok {
		tools, ok := v.([]any)
		if !ok || len(tools) > MaxTools {
			return nil, false, invalid("tools must be an array of at most MaxTools custom tools")
		}
		rt := make([]any, 0, len(tools))
		for _, t := range tools {
			r, name, err := rb.tool(t)
			if err != nil {
				return nil, false, err
			}
			if toolNames[name] {
				return nil, false, invalid("duplicate tool name")
			}
			toolNames[name] = true
			rt = append(rt, r)
		}
		if len(rt) > 0 {
			out["tools"] = rt
		}
	}
	if v, ok := req["tool_choice"]; ok {
		r, err := toolChoice(v, toolNames)
		if err != nil {
			return nil, false, err
		}
		out["tool_choice"] = r
	}

	maxTokens := l.MaxOutputTokens
	if !count {
		if v, ok := req["max_tokens"]; ok {
			n, ok := strictjson.Integer(v)
			if !ok || n < 1 {
				return nil, false, invalid("max_tokens must be a positive integer")
			}
			maxTokens = int(min(n, int64(l.MaxOutputTokens)))
		}
		out["max_tokens"] = maxTokens
	}
	effort := ""
	if v, ok := req["output_config"]; ok {
		oc, err := object(v, "output_config", map[string]bool{"effort": true})
		if err != nil {
			return nil, false, err
		}
		if e, ok := oc["effort"]; ok {
			s, ok := e.(string)
			if !ok || effortRank[s] == 0 {
				return nil, false, invalid("output_config.effort must be low, medium, high, xhigh or max")
			}
			effort = s
		}
	}
	ceilEffort := ceilingEffort[l.ceiling()]
	budget, _ := richproto.ThinkingBudget(l.ceiling())
	if v, ok := req["thinking"]; ok {
		th, err := thinking(v, budget, maxTokens, count)
		if err != nil {
			return nil, false, err
		}
		if th != nil {
			out["thinking"] = th
			if th["type"] == ThinkingAdaptive && effort == "" && effortRank[ceilEffort] < effortRank["high"] && !count {
				// The provider's default effort (high) is above this ceiling.
				effort = ceilEffort
			}
		}
	}
	if effort != "" {
		if effortRank[effort] > effortRank[ceilEffort] {
			effort = ceilEffort
		}
		out["output_config"] = map[string]any{"effort": effort}
	}

	stream := false
	if v, ok := req["stream"]; ok {
		b, ok := v.(bool)
		if !ok {
			return nil, false, invalid("stream must be a boolean")
		}
		stream = b
		if b {
			out["stream"] = true
		}
	}
	if v, ok := req["stop_sequences"]; ok {
		a, ok := v.([]any)
		if !ok || len(a) > MaxStopSequences {
			return nil, false, invalid("stop_sequences must be an array of at most MaxStopSequences strings")
		}
		for _, s := range a {
			if s, ok := s.(string); !ok || s == "" || len(s) > MaxStopSequenceBytes {
				return nil, false, invalid("stop_sequences must hold short non-empty strings")
			}
		}
		out["stop_sequences"] = a
	}
	for _, k := range []string{"temperature", "top_p"} {
		if v, ok := req[k]; ok {
			f, ok := strictjson.Number(v)
			if !ok || f < 0 || f > 1 {
				return nil, false, invalid("temperature and top_p must be numbers in [0, 1]")
			}
			out[k] = v
		}
	}
	if v, ok := req["top_k"]; ok {
		n, ok := strictjson.Integer(v)
		if !ok || n < 1 || n > 1000 {
			return nil, false, invalid("top_k must be an integer in [1, 1000]")
		}
		out["top_k"] = v
	}
	if v, ok := req["metadata"]; ok {
		md, err := object(v, "metadata", map[string]bool{"user_id": true})
		if err != nil {
			return nil, false, err
		}
		if u, ok := md["user_id"]; ok {
			s, ok := u.(string)
			if !ok || len(s) > MaxUserIDBytes {
				return nil, false, invalid("metadata.user_id must be a short string")
			}
			out["metadata"] = map[string]any{"user_id": s}
		}
	}
	if rb.breakpoints > MaxCacheBreakpoints {
		return nil, false, invalid("more cache_control breakpoints than the provider allows")
	}
	enc, err := Encode(out)
	if err != nil {
		return nil, false, invalid("not encodable")
	}
	if len(enc) > MaxRequestBytes {
		return nil, false, &refusal{"rebuilt body over the limit", ErrTooLarge}
	}
	return enc, stream, nil
}

// thinking checks and clamps a thinking object; nil means "leave it out"
// (thinking asked under the "off" ceiling).
func thinking(v any, budget, maxTokens int, count bool) (map[string]any, error) {
	th, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("thinking must be an object")
	}
	typ, _ := th["type"].(string)
	allowed := map[string]bool{"type": true, "display": true}
	if typ == ThinkingEnabled {
		allowed["budget_tokens"] = true
	}
	if err := only(th, allowed); err != nil {
		return nil, err
	}
	out := map[string]any{"type": typ}
	if d, ok := th["display"]; ok {
		if s, ok := d.(string); !ok || (s != "summarized" && s != "omitted") || typ == ThinkingDisabled {
			return nil, invalid("thinking.display must be summarized or omitted")
		}
		out["display"] = d
	}
	switch typ {
	case ThinkingDisabled:
		return map[string]any{"type": typ}, nil
	case ThinkingAdaptive:
		if budget == 0 {
			return nil, nil
		}
		return out, nil
	case ThinkingEnabled:
		n, ok := strictjson.Integer(th["budget_tokens"])
		if !ok || n < MinThinkingBudget {
			return nil, invalid("thinking.budget_tokens must be an integer of at least MinThinkingBudget")
		}
		if budget == 0 {
			return nil, nil
		}
		n = min(n, int64(budget))
		if !count {
			n = min(n, int64(maxTokens-1))
		}
		if n < MinThinkingBudget {
			return nil, invalid("thinking.budget_tokens must be below max_tokens")
		}
		out["budget_tokens"] = n
		return out, nil
	}
	return nil, invalid("thinking.type must be enabled, adaptive or disabled")
}

func (rb *rebuilder) system(v any) (any, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []any:
		out := make([]any, 0, len(s))
		for _, b := range s {
			m, err := object(b, "system block", map[string]bool{"type": true, "text": true, "cache_control": true})
			if err != nil {
				return nil, err
			}
			if m["type"] != BlockText {
				return nil, invalid("system blocks must be text")
			}
			r, err := rb.text(m)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
	return nil, invalid("system must be a string or text blocks")
}

func (rb *rebuilder) message(v any) (any, error) {
	m, err := object(v, "message", map[string]bool{"role": true, "content": true})
	if err != nil {
		return nil, err
	}
	role, _ := m["role"].(string)
	if role != RoleUser && role != RoleAssistant {
		return nil, invalid("role must be user or assistant")
	}
	out := map[string]any{"role": role}
	switch c := m["content"].(type) {
	case string:
		out["content"] = c
	case []any:
		if len(c) == 0 {
			return nil, invalid("content must not be empty")
		}
		blocks := make([]any, 0, len(c))
		for _, b := range c {
			r, err := rb.block(b, role)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, r)
		}
		out["content"] = blocks
	default:
		return nil, invalid("content must be a string or an array of blocks")
	}
	return out, nil
}

var blockFields = map[string]map[string]bool{
	BlockText:             {"type": true, "text": true, "cache_control": true},
	BlockImage:            {"type": true, "source": true, "cache_control": true},
	BlockToolUse:          {"type": true, "id": true, "name": true, "input": true, "cache_control": true},
	BlockToolResult:       {"type": true, "tool_use_id": true, "content": true, "is_error": true, "cache_control": true},
	BlockThinking:         {"type": true, "thinking": true, "signature": true},
	BlockRedactedThinking: {"type": true, "data": true},
}

// blockRoles: which role may carry a block type.
var blockRoles = map[string]string{
	BlockImage: RoleUser, BlockToolResult: RoleUser,
	BlockToolUse: RoleAssistant, BlockThinking: RoleAssistant, BlockRedactedThinking: RoleAssistant,
}

func (rb *rebuilder) block(v any, role string) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("a content block must be an object")
	}
	typ, _ := m["type"].(string)
	fields, ok := blockFields[typ]
	if !ok {
		// document, search_result, server_tool_use, web_search_tool_result,
		// container_upload, mcp_tool_use and every other type.
		return nil, invalid("content block type not allowed")
	}
	if r, ok := blockRoles[typ]; ok && r != role {
		return nil, invalid("content block type not allowed in this role")
	}
	if err := only(m, fields); err != nil {
		return nil, err
	}
	switch typ {
	case BlockText:
		return rb.text(m)
	case BlockImage:
		return rb.image(m)
	case BlockToolUse:
		out := map[string]any{"type": typ}
		id, _ := m["id"].(string)
		name, _ := m["name"].(string)
		if !validID(id) || !toolName.MatchString(name) {
			return nil, invalid("tool_use needs a valid id and name")
		}
		input, ok := m["input"].(map[string]any)
		if !ok {
			return nil, invalid("tool_use input must be an object")
		}
		out["id"], out["name"], out["input"] = id, name, input
		return out, rb.cache(m, out)
	case BlockToolResult:
		out := map[string]any{"type": typ}
		id, _ := m["tool_use_id"].(string)
		if !validID(id) {
			return nil, invalid("tool_result needs a valid tool_use_id")
		}
		out["tool_use_id"] = id
		if e, ok := m["is_error"]; ok {
			if _, ok := e.(bool); !ok {
				return nil, invalid("is_error must be a boolean")
			}
			out["is_error"] = e
		}
		if c, ok := m["content"]; ok {
			switch c := c.(type) {
			case string:
				out["content"] = c
			case []any:
				blocks := make([]any, 0, len(c))
				for _, b := range c {
					bm, ok := b.(map[string]any)
					if !ok || (bm["type"] != BlockText && bm["type"] != BlockImage) {
						return nil, invalid("tool_result content must be text or image blocks")
					}
					r, err := rb.block(bm, RoleUser)
					if err != nil {
						return nil, err
					}
					blocks = append(blocks, r)
				}
				out["content"] = blocks
			default:
				return nil, invalid("tool_result content must be a string or blocks")
			}
		}
		return out, rb.cache(m, out)
	case BlockThinking:
		// The text is empty (or absent) when thinking was displayed
		// "omitted"; the signature is what the provider checks.
		t, ok1 := m["thinking"].(string)
		if _, has := m["thinking"]; !has {
			t, ok1 = "", true
		}
		s, ok2 := m["signature"].(string)
		if !ok1 || !ok2 || s == "" {
			return nil, invalid("a thinking block needs its signature (and text, when not omitted)")
		}
		return map[string]any{"type": typ, "thinking": t, "signature": s}, nil
	default: // BlockRedactedThinking
		d, ok := m["data"].(string)
		if !ok || d == "" {
			return nil, invalid("a redacted_thinking block needs its data")
		}
		return map[string]any{"type": typ, "data": d}, nil
	}
}

func (rb *rebuilder) text(m map[string]any) (any, error) {
	t, ok := m["text"].(string)
	if !ok {
		return nil, invalid("a text block needs text")
	}
	out := map[string]any{"type": BlockText, "text": t}
	return out, rb.cache(m, out)
}

// Image media types and their leading bytes.
var imageMagic = map[string][][]byte{
	"image/png":  {[]byte("\x89PNG\r\n\x1a\n")},
	"image/jpeg": {[]byte("\xff\xd8\xff")},
	"image/gif":  {[]byte("GIF87a"), []byte("GIF89a")},
	"image/webp": {[]byte("RIFF")}, // and "WEBP" at offset 8, checked below
}

func (rb *rebuilder) image(m map[string]any) (any, error) {
	src, ok := m["source"].(map[string]any)
	if !ok {
		return nil, invalid("an image needs a source")
	}
	if src["type"] != "base64" {
		// url, file and every other source: the broker never fetches.
		return nil, invalid("image source must be base64")
	}
	if err := only(src, map[string]bool{"type": true, "media_type": true, "data": true}); err != nil {
		return nil, err
	}
	mt, _ := src["media_type"].(string)
	magic, ok := imageMagic[mt]
	if !ok {
		return nil, invalid("image media type must be png, jpeg, webp or gif")
	}
	data, _ := src["data"].(string)
	if data == "" || len(data) > base64.StdEncoding.EncodedLen(MaxImageBytes) {
		return nil, invalid("image data empty or over the limit")
	}
	raw, n, ok := checkBase64(data)
	if !ok || n > MaxImageBytes {
		return nil, invalid("image data must be standard base64 within the limit")
	}
	match := false
	for _, p := range magic {
		match = match || bytes.HasPrefix(raw, p)
	}
	if mt == "image/webp" {
		match = match && len(raw) >= 12 && string(raw[8:12]) == "WEBP"
	}
	if !match {
		return nil, invalid("image bytes do not match the media type")
	}
	if rb.images++; rb.images > MaxImages {
		return nil, invalid("too many images")
	}
	out := map[string]any{"type": BlockImage, "source": map[string]any{"type": "base64", "media_type": mt, "data": data}}
	return out, rb.cache(m, out)
}

// checkBase64 validates standard padded base64 in chunks (never holding
// the decoded image) and returns its first decoded bytes and decoded length.
func checkBase64(data string) (head []byte, n int, ok bool) {
	if len(data)%4 != 0 || strings.IndexByte(data[:max(len(data)-2, 0)], '=') >= 0 {
		return nil, 0, false // padding only at the very end
	}
	const chunk = 64 << 10 // base64 characters, a multiple of 4
	buf := make([]byte, base64.StdEncoding.DecodedLen(chunk))
	enc := base64.StdEncoding.Strict()
	for off := 0; off < len(data); off += chunk {
		k, err := enc.Decode(buf, []byte(data[off:min(off+chunk, len(data))]))
		if err != nil {
			return nil, 0, false
		}
		if off == 0 {
			head = append([]byte(nil), buf[:min(k, 16)]...)
		}
		n += k
	}
	return head, n, true
}

// cache copies a valid cache_control of m into out.
func (rb *rebuilder) cache(m, out map[string]any) error {
	v, ok := m["cache_control"]
	if !ok {
		return nil
	}
	cc, err := object(v, "cache_control", map[string]bool{"type": true, "ttl": true})
	if err != nil {
		return err
	}
	if cc["type"] != "ephemeral" {
		return invalid("cache_control type must be ephemeral")
	}
	r := map[string]any{"type": "ephemeral"}
	if t, ok := cc["ttl"]; ok {
		if t != "5m" && t != "1h" {
			return invalid("cache_control ttl must be 5m or 1h")
		}
		r["ttl"] = t
	}
	rb.breakpoints++
	out["cache_control"] = r
	return nil
}

// toolName is the provider's custom tool name pattern.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validID: tool_use ids as the provider issues them (and the worker's own).
func validID(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (rb *rebuilder) tool(v any) (any, string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, "", invalid("a tool must be an object")
	}
	if t, ok := m["type"]; ok && t != "custom" {
		// web_search_*, web_fetch_*, code_execution_*, bash_*,
		// text_editor_*, computer_*, memory_*, mcp_toolset and every other
		// server or client-defined tool type.
		return nil, "", invalid("only custom tools are allowed")
	}
	if err := only(m, map[string]bool{"type": true, "name": true, "description": true, "input_schema": true, "cache_control": true}); err != nil {
		return nil, "", err
	}
	name, _ := m["name"].(string)
	if !toolName.MatchString(name) {
		return nil, "", invalid("tool name must match the provider's pattern")
	}
	out := map[string]any{"name": name}
	if d, ok := m["description"]; ok {
		if _, ok := d.(string); !ok {
			return nil, "", invalid("tool description must be a string")
		}
		out["description"] = d
	}
	schema, ok := m["input_schema"].(map[string]any)
	if !ok || schema["type"] != "object" {
		return nil, "", invalid("input_schema must be an object schema")
	}
	if err := toolschema.Check(schema); err != nil {
		return nil, "", err
	}
	out["input_schema"] = schema
	return out, name, rb.cache(m, out)
}

func toolChoice(v any, tools map[string]bool) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("tool_choice must be an object")
	}
	typ, _ := m["type"].(string)
	allowed := map[string]bool{"type": true, "disable_parallel_tool_use": true}
	switch typ {
	case "auto", "any":
	case "none":
		delete(allowed, "disable_parallel_tool_use")
	case "tool":
		allowed["name"] = true
		n, _ := m["name"].(string)
		if !tools[n] {
			return nil, invalid("tool_choice names no declared tool")
		}
	default:
		return nil, invalid("tool_choice type must be auto, any, none or tool")
	}
	if err := only(m, allowed); err != nil {
		return nil, err
	}
	if d, ok := m["disable_parallel_tool_use"]; ok {
		if _, ok := d.(bool); !ok {
			return nil, invalid("disable_parallel_tool_use must be a boolean")
		}
	}
	return m, nil
}

// only refuses a member of m not in allowed.
func only(m map[string]any, allowed map[string]bool) error {
	if !strictjson.Only(m, allowed) {
		return invalid("field not allowed")
	}
	return nil
}

func object(v any, what string, allowed map[string]bool) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalid(what + " must be an object")
	}
	return m, only(m, allowed)
}

// Encode writes v as JSON without HTML escaping and without a newline
// (strictjson.Encode).
func Encode(v any) ([]byte, error) { return strictjson.Encode(v) }
