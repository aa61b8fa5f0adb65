package broker

import (
	"fmt"
	"strings"
	"testing"
)

const goodModel = `{"model":"policy-model","messages":[{"role":"user","content":"hi"}]}`

// msg wraps one message object in an otherwise valid model request.
func msg(m string) string { return `{"messages":[` + m + `]}` }

// withTool wraps one tool definition in an otherwise valid model request.
func withTool(tool string) string {
	return `{"messages":[{"role":"user","content":"hi"}],"tools":[` + tool + `]}`
}

// withParams wraps a parameters schema in a function tool.
func withParams(schema string) string {
	return withTool(`{"type":"function","function":{"name":"f","parameters":` + schema + `}}`)
}

type hostileCase struct {
	name   string
	method string // for reading the response; default POST
	raw    string
	want   int // 0: connection closed without an answer
}

func hostileCases() []hostileCase {
	var cs []hostileCase
	add := func(name string, want int, raw string) {
		cs = append(cs, hostileCase{name: name, raw: raw, want: want})
	}
	addM := func(name, method string, want int, raw string) {
		cs = append(cs, hostileCase{name: name, method: method, raw: raw, want: want})
	}
	std := func(target, body string, extra ...string) string { return rawPost(target, body, extra) }

	// Wrong methods.
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD"} {
		addM("method "+m, m, 405, rawReq(m, "/model", "HTTP/1.1", goodModel, nil))
	}
	addM("method OPTIONS *", "OPTIONS", 405, rawReq("OPTIONS", "*", "HTTP/1.1", "", nil))
	addM("method CONNECT", "CONNECT", 405, rawReq("CONNECT", "broker:443", "HTTP/1.1", "", nil))

	// Queries.
	add("query on /model", 400, std("/model?x=1", goodModel))
	add("empty query on /model", 400, std("/model?", goodModel))
	add("query on tool", 400, std("/tools/clock?tz=x", `{}`))
	add("query on mcp", 400, std("/mcp/docs?a=b", `{}`))

	// Extra, encoded and dot segments.
	for _, target := range []string{
		"/model/", "//model", "/./model", "/tools/../model", "/model/..", "/%6dodel",
		"/tools%2Fclock", "/tools/clock%2F", "/tools/cl%6Fck", "/MODEL", "/Model", "/model;x", "/model#frag",
		"/model%00", "/tools/clock/", "/tools//clock", "/mcp//docs",
		"http://broker/model", "*", "/model%20", "/tools/clock%3F",
	} {
		add("target "+target, 400, std(target, goodModel))
	}

	// Unknown routes, tools and servers.
	for _, target := range []string{
		"/unknown", "/v1/chat/completions", "/tools", "/tools/nope", "/tools/host_clock", "/mcp", "/mcp/nope",
		"/mcp/search", "/models", "/model/x", "/tools/clock/extra", "/mcp/docs/extra",
	} {
		add("unknown "+target, 404, std(target, `{}`))
	}

	// Hop-by-hop, proxy, forwarded, cookie and unknown headers.
	for _, h := range []string{
		"Connection: close", "Connection: keep-alive", "Connection: Authorization",
		"Connection: Content-Type, Authorization", "Keep-Alive: timeout=5", "Proxy-Authorization: Basic Zm9vOmJhcg==",
		"Proxy-Connection: keep-alive", "TE: trailers", "Trailer: X-Foo", "Upgrade: websocket",
		"Forwarded: for=192.0.2.1", "X-Forwarded-For: 192.0.2.1", "X-Forwarded-Host: evil.example",
		"X-Forwarded-Proto: https", "X-Real-IP: 192.0.2.1", "Via: 1.1 proxy", "Cookie: session=abc",
		"X-Custom: 1", "Origin: http://evil.example", "Referer: http://evil.example/", "Expect: 100-continue",
		"X-Api-Key: sk-other", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA", "Accept-Language: en",
		"X-Http-Method-Override: GET", "Content-Encoding: gzip", "Range: bytes=0-1",
	} {
		add("header "+h, 400, std("/model", goodModel, h))
	}
	add("Upgrade h2c", 400, std("/model", goodModel, "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"))
	add("Upgrade h2c alone", 400, std("/model", goodModel, "Upgrade: h2c"))
	add("repeated Accept", 400, std("/model", goodModel, "Accept: */*", "Accept: application/json"))
	add("repeated Authorization", 400, std("/model", goodModel, "Authorization: Bearer sandbox-dummy-key"))
	add("content type text/plain", 415, rawPost("/model", goodModel, []string{"Content-Type: text/plain"}, "Content-Type"))
	add("content type latin1", 415, rawPost("/model", goodModel, []string{"Content-Type: application/json; charset=latin1"}, "Content-Type"))
	add("content type missing", 415, rawPost("/model", goodModel, nil, "Content-Type"))
	add("content type form", 415, rawPost("/model", goodModel, []string{"Content-Type: application/x-www-form-urlencoded"}, "Content-Type"))

	// Caller credentials other than the dummy.
	for i, a := range []string{
		"Basic c2FuZGJveDpkdW1teQ==", "Bearer other-key", "Bearer " + realModelKey, "Bearer " + realMCPKey,
		"bearer sandbox-dummy-key", "Bearer  sandbox-dummy-key", "Bearer sandbox-dummy-key2", "sandbox-dummy-key",
		"Token sandbox-dummy-key",
	} {
		add(fmt.Sprintf("authorization %d %s", i, strings.SplitN(a, " ", 2)[0]), 401,
			rawPost("/model", goodModel, []string{"Authorization: " + a}, "Authorization"))
	}
	add("authorization missing", 401, rawPost("/model", goodModel, nil, "Authorization"))

	// Transfer-Encoding tricks, Content-Length with Transfer-Encoding, framing.
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(goodModel), goodModel)
	add("chunked body", 411, rawPost("/model", chunked, []string{"Transfer-Encoding: chunked"}, "Content-Length"))
	add("CL and TE", 411, rawPost("/model", chunked, []string{"Content-Length: 5", "Transfer-Encoding: chunked"}, "Content-Length"))
	add("TE Chunked mixed case", 411, rawPost("/model", chunked, []string{"Transfer-Encoding: Chunked"}, "Content-Length"))
	add("TE gzip, chunked", 501, rawPost("/model", chunked, []string{"Transfer-Encoding: gzip, chunked"}, "Content-Length"))
	add("TE identity", 501, rawPost("/model", goodModel, []string{"Transfer-Encoding: identity"}))
	add("TE twice", 501, rawPost("/model", chunked, []string{"Transfer-Encoding: chunked", "Transfer-Encoding: chunked"}, "Content-Length"))
	add("TE space before colon", 400, rawPost("/model", chunked, []string{"Transfer-Encoding : chunked"}, "Content-Length"))
	add("TE with trailer", 411, rawPost("/model", fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n", len(goodModel), goodModel), []string{"Transfer-Encoding: chunked", "Trailer: X-Trailer"}, "Content-Length"))
	add("two different Content-Length", 400, rawPost("/model", goodModel, []string{"Content-Length: 3", fmt.Sprintf("Content-Length: %d", len(goodModel))}, "Content-Length"))
	add("Content-Length plus sign", 400, rawPost("/model", goodModel, []string{fmt.Sprintf("Content-Length: +%d", len(goodModel))}, "Content-Length"))
	add("Content-Length negative", 400, rawPost("/model", goodModel, []string{"Content-Length: -1"}, "Content-Length"))
	add("obs-fold header", 400, std("/model", goodModel, "X-Folded: a", " b"))
	add("HTTP/1.0", 400, rawReq("POST", "/model", "HTTP/1.0", goodModel, nil))
	add("HTTP/2.0 request line", 505, rawReq("POST", "/model", "HTTP/2.0", goodModel, nil))
	add("h2 prior knowledge preface", 405, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	add("missing Host", 400, rawPost("/model", goodModel, nil, "Host"))

	// Bodies.
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 256<<10) + `"}]}`
	add("oversized body", 413, std("/model", big))
	add("oversized tool body", 413, std("/tools/clock", `{"a":"`+strings.Repeat("a", 256<<10)+`"}`))
	add("Content-Length over limit, short body", 413, rawPost("/model", goodModel, []string{fmt.Sprintf("Content-Length: %d", 300<<10)}, "Content-Length"))
	for name, body := range map[string]string{
		"non-JSON": "hello", "empty body": "", "trailing object": goodModel + `{}`, "trailing garbage": goodModel + ` x`,
		"array body": `[` + goodModel + `]`, "null body": `null`, "string body": `"hi"`, "truncated JSON": `{"messages":[`,
		"duplicate key": `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream":false}`,
		"deep nesting":  strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100),
	} {
		add("body "+name, 400, std("/model", body))
	}
	// Text that is not valid Unicode is refused, never repaired to U+FFFD
	// and forwarded with the real key.
	for name, body := range map[string]string{
		"invalid UTF-8 in content":     msg("{\"role\":\"user\",\"content\":\"hi \xff there\"}"),
		"truncated UTF-8 in content":   msg("{\"role\":\"user\",\"content\":\"caf\xc3\"}"),
		"UTF-8 encoded surrogate":      msg("{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}"),
		"overlong UTF-8":               msg("{\"role\":\"user\",\"content\":\"\xc0\xaf\"}"),
		"invalid UTF-8 in a key":       "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\xff\":1}",
		"lone high surrogate escape":   msg(`{"role":"user","content":"\ud800"}`),
		"lone low surrogate escape":    msg(`{"role":"user","content":"a\udfff"}`),
		"reversed surrogate pair":      msg(`{"role":"user","content":"\ude00\ud83d"}`),
		"invalid UTF-8 in tool schema": withParams("{\"type\":\"object\",\"description\":\"\xfe\"}"),
	} {
		add("body "+name, 400, std("/model", body))
	}
	add("tool body invalid UTF-8", 400, std("/tools/web", "{\"q\":\"\xff\"}"))
	add("tool body lone surrogate", 400, std("/tools/echo", `{"q":"\udbff"}`))
	add("mcp body invalid UTF-8", 400, std("/mcp/docs", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"search\",\"arguments\":{\"q\":\"\x80\"}}}"))
	add("tool body array", 400, std("/tools/clock", `[]`))
	add("tool body non-JSON", 400, std("/tools/echo", `run it`))
	add("tool body trailing data", 400, std("/tools/web", `{} {}`))

	// Messages.
	for name, m := range map[string]string{
		"role developer":             `{"role":"developer","content":"x"}`,
		"role function":              `{"role":"function","name":"f","content":"x"}`,
		"role empty":                 `{"role":"","content":"x"}`,
		"role missing":               `{"content":"x"}`,
		"role number":                `{"role":1,"content":"x"}`,
		"content text part array":    `{"role":"user","content":[{"type":"text","text":"hi"}]}`,
		"content number":             `{"role":"user","content":42}`,
		"content object":             `{"role":"user","content":{"text":"hi"}}`,
		"content null user":          `{"role":"user","content":null}`,
		"content missing":            `{"role":"system"}`,
		"image_url part":             `{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}`,
		"input_audio part":           `{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}`,
		"file part":                  `{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}`,
		"assistant null no calls":    `{"role":"assistant","content":null}`,
		"assistant audio field":      `{"role":"assistant","content":"x","audio":{"id":"audio_1"}}`,
		"assistant refusal field":    `{"role":"assistant","content":"x","refusal":"no"}`,
		"tool call custom type":      `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"custom","custom":{"name":"f","input":"x"}}]}`,
		"tool call bad name":         `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Bad Name","arguments":"{}"}}]}`,
		"tool call object arguments": `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]}`,
		"tool call extra field":      `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"},"x":1}]}`,
		"tool message no call id":    `{"role":"tool","content":"x"}`,
		"user with tool_calls":       `{"role":"user","content":"x","tool_calls":[]}`,
		"message not object":         `"hi"`,
		"user file reference field":  `{"role":"user","content":"x","file_id":"file-abc"}`,
	} {
		add("message "+name, 400, std("/model", msg(m)))
	}
	add("messages empty", 400, std("/model", `{"messages":[]}`))
	add("messages missing", 400, std("/model", `{"model":"policy-model"}`))
	add("messages object", 400, std("/model", `{"messages":{"role":"user","content":"x"}}`))

	// Native provider tools and malformed function tools.
	for _, typ := range []string{"web_search_preview", "web_search", "code_interpreter", "file_search", "computer_use_preview", "mcp", "custom"} {
		add("native tool "+typ, 400, std("/model", withTool(`{"type":"`+typ+`"}`)))
	}
	add("function tool bad name", 400, std("/model", withTool(`{"type":"function","function":{"name":"Bad-Name"}}`)))
	add("function tool extra field", 400, std("/model", withTool(`{"type":"function","function":{"name":"f"},"server_url":"https://x"}`)))
	add("function tool parameters array", 400, std("/model", withParams(`[]`)))

	// Top-level fields.
	add("stream true", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`))
	add("stream string", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"stream":"false"}`))
	add("model override", 400, std("/model", `{"model":"gpt-expensive","messages":[{"role":"user","content":"hi"}]}`))
	add("model not string", 400, std("/model", `{"model":1,"messages":[{"role":"user","content":"hi"}]}`))
	add("max_tokens above limit", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4097}`))
	add("max_completion_tokens above limit", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100000}`))
	add("max_tokens zero", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`))
	add("max_tokens fraction", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10.5}`))
	add("max_tokens string", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":"10"}`))
	add("temperature out of range", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"temperature":3}`))
	for _, f := range []string{`"audio":{"voice":"x"}`, `"modalities":["audio"]`, `"web_search_options":{}`, `"n":2`,
		`"response_format":{"type":"json_schema"}`, `"functions":[]`, `"store":true`, `"metadata":{}`, `"user":"x"`,
		`"prediction":{}`, `"stream_options":{}`, `"logprobs":true`} {
		add("top-level "+strings.SplitN(f, ":", 2)[0], 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],`+f+`}`))
	}
	add("tool_choice native", 400, std("/model", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"web_search_preview"}}`))

	// Remote references at schema positions.
	for name, s := range map[string]string{
		"$ref root":                 `{"$ref":"https://evil.example/s.json"}`,
		"$ref property":             `{"type":"object","properties":{"a":{"$ref":"https://evil.example/a"}}}`,
		"$ref items":                `{"type":"array","items":{"$ref":"http://evil.example/i"}}`,
		"$ref tuple items":          `{"type":"array","items":[{"$ref":"http://evil.example/i"}]}`,
		"$ref prefixItems":          `{"prefixItems":[{"$ref":"//evil.example/p"}]}`,
		"$ref allOf":                `{"allOf":[{"$ref":"other.json#/x"}]}`,
		"$ref anyOf":                `{"anyOf":[true,{"$ref":"file:///etc/passwd"}]}`,
		"$ref oneOf":                `{"oneOf":[{"$ref":"urn:x"}]}`,
		"$ref not":                  `{"not":{"$ref":"https://evil.example/n"}}`,
		"$ref if then else":         `{"if":{"type":"string"},"then":{"$ref":"https://evil.example/t"}}`,
		"$ref additionalProperties": `{"additionalProperties":{"$ref":"https://evil.example/ap"}}`,
		"$ref patternProperties":    `{"patternProperties":{"^a":{"$ref":"https://evil.example/pp"}}}`,
		"$ref $defs":                `{"$defs":{"x":{"$ref":"https://evil.example/d"}}}`,
		"$ref definitions":          `{"definitions":{"x":{"$ref":"https://evil.example/d"}}}`,
		"$ref dependentSchemas":     `{"dependentSchemas":{"a":{"$ref":"https://evil.example/ds"}}}`,
		"$ref non-string":           `{"$ref":{"url":"#"}}`,
		"$dynamicRef remote":        `{"$dynamicRef":"https://evil.example/dyn#meta"}`,
		"$recursiveRef remote":      `{"$recursiveRef":"https://evil.example/rec"}`,
		"$id remote":                `{"$id":"https://evil.example/root.json"}`,
		"$schema remote":            `{"$schema":"https://evil.example/meta.json"}`,
		"$schema draft-03":          `{"$schema":"http://json-schema.org/draft-03/schema#"}`,
		"$schema local":             `{"$schema":"#"}`,
		"$vocabulary remote":        `{"$vocabulary":{"https://evil.example/vocab":true}}`,
		"$ref deep in properties":   `{"properties":{"a":{"properties":{"b":{"items":{"$ref":"https://evil.example/deep"}}}}}}`,
		"$ref in vendor keyword":    `{"x-provider":{"$ref":"https://evil.example/v"}}`,
		"$ref in propertyNames":     `{"propertyNames":{"$ref":"https://evil.example/pn"}}`,
		"$ref in contains":          `{"contains":{"$ref":"https://evil.example/c"}}`,
		// Issue 18 item 5: forwarded before every value was walked.
		"$ref in an unknown keyword's array": `{"x-any":[{"$ref":"https://evil.example/s.json"}]}`,
		"$ref in type":                       `{"type":[{"$ref":"https://evil.example/s.json"}]}`,
		"$ref in extends":                    `{"extends":[{"$ref":"https://evil.example/s.json"}]}`,
		"$ref in enum data":                  `{"enum":[{"$ref":"https://evil.example/s.json"}]}`,
	} {
		add("schema "+name, 400, std("/model", withParams(s)))
	}

	// MCP requests.
	mcp := func(name string, want int, body string) { add("mcp "+name, want, std("/mcp/docs", body)) }
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}`
	mcp("batch", 400, `[`+call+`]`)
	mcp("batch of two", 400, `[`+call+`,`+call+`]`)
	mcp("empty batch", 400, `[]`)
	for _, m := range []string{"tools/list", "initialize", "resources/list", "resources/read", "prompts/list", "prompts/get",
		"notifications/initialized", "ping", "completion/complete", "logging/setLevel", "sampling/createMessage", "Tools/Call"} {
		mcp("method "+m, 400, `{"jsonrpc":"2.0","id":1,"method":"`+m+`","params":{"name":"search"}}`)
	}
	mcp("undeclared tool", 404, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","arguments":{}}}`)
	mcp("tool of another server", 404, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"clock"}}`)
	mcp("notification without id", 400, `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"search"}}`)
	mcp("id null", 400, `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"search"}}`)
	mcp("id bool", 400, `{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"search"}}`)
	mcp("id object", 400, `{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"search"}}`)
	mcp("jsonrpc missing", 400, `{"id":1,"method":"tools/call","params":{"name":"search"}}`)
	mcp("jsonrpc 1.0", 400, `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"search"}}`)
	mcp("extra top-level field", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"},"session":"x"}`)
	mcp("params _meta", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","_meta":{}}}`)
	mcp("params array", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["search"]}`)
	mcp("arguments array", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":[]}}`)
	mcp("arguments string", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":"q=x"}}`)
	mcp("name not string", 400, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["search"]}}`)
	mcp("trailing data", 400, call+` `+call)
	return cs
}

// TestHostileRequests: every hostile request is refused with its status and
// reaches no upstream, tool or MCP server.
func TestHostileRequests(t *testing.T) {
	h := newHarness(t, nil)
	// The control: the same raw builder's well-formed request is served.
	if code, body := h.raw("POST", rawPost("/model", goodModel, nil)); code != 200 {
		t.Fatalf("well-formed raw request: status %d %s", code, body)
	}
	cases := hostileCases()
	if len(cases) < 100 {
		t.Fatalf("only %d hostile cases, want at least 100", len(cases))
	}
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = "POST"
			}
			h.broker.refusals.Store(0) // each case is judged on its own, not on the turn's budget
			before := h.upstreamSeen()
			got, body := h.raw(method, c.raw)
			if got != c.want {
				t.Errorf("status = %d, want %d (body %q)", got, c.want, body)
			}
			if got == 0 || got == 200 {
				t.Errorf("not refused: status %d", got)
			}
			if after := h.upstreamSeen(); after != before {
				t.Errorf("upstream saw %d requests, want 0", after-before)
			}
			for _, leak := range []string{realModelKey, realToolKey, realMCPKey, "127.0.0.1", "evil.example"} {
				if strings.Contains(body, leak) {
					t.Errorf("refusal body leaks %q: %q", leak, body)
				}
			}
		})
	}
	t.Logf("%d hostile cases", len(cases))
	logs := h.logs.String()
	for _, leak := range []string{realModelKey, realToolKey, realMCPKey, "evil.example", "hello", "gpt-expensive"} {
		if strings.Contains(logs, leak) {
			t.Errorf("logs contain %q", leak)
		}
	}
}
