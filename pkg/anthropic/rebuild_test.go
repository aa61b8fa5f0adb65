package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

var testLimits = Limits{Model: "claude-test", MaxOutputTokens: 8000, Thinking: "medium"}

// PNG, JPEG, GIF and WebP headers (enough bytes for the magic checks).
var (
	pngB64  = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n0000IHDR"))
	jpegB64 = base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff\xe0JFIF"))
	gifB64  = base64.StdEncoding.EncodeToString([]byte("GIF89a0000"))
	webpB64 = base64.StdEncoding.EncodeToString([]byte("RIFF0000WEBPVP8 "))
)

// Request builders for the tables (shared with the broker's suite by copy).
func user(content string) string { return `{"role":"user","content":` + content + `}` }
func asst(content string) string { return `{"role":"assistant","content":` + content + `}` }
func msgs(ms ...string) string   { return `{"messages":[` + strings.Join(ms, ",") + `]}` }
func withTop(extra string) string {
	return `{"messages":[{"role":"user","content":"hi"}],` + extra + `}`
}
func withTools(tools ...string) string { return withTop(`"tools":[` + strings.Join(tools, ",") + `]`) }
func schemaTool(schema string) string {
	return `{"name":"f","input_schema":` + schema + `}`
}
func image(mt, data string) string {
	return `{"type":"image","source":{"type":"base64","media_type":"` + mt + `","data":"` + data + `"}}`
}

// HostileBodies are request bodies Rebuild refuses with ErrInvalid.
func hostileBodies() map[string]string {
	c := map[string]string{
		// Top level.
		"not an object":              `[]`,
		"string":                     `"hi"`,
		"empty object":               `{}`,
		"messages null":              `{"messages":null}`,
		"messages empty":             `{"messages":[]}`,
		"messages object":            `{"messages":{}}`,
		"unknown field":              withTop(`"foo":1`),
		"container field":            withTop(`"container":"c"`),
		"mcp_servers":                withTop(`"mcp_servers":[{"type":"url","url":"https://x"}]`),
		"context_management":         withTop(`"context_management":{}`),
		"service_tier":               withTop(`"service_tier":"auto"`),
		"betas in body":              withTop(`"betas":["x"]`),
		"wrong model":                withTop(`"model":"claude-opus-other"`),
		"model number":               withTop(`"model":1`),
		"model null":                 withTop(`"model":null`),
		"max_tokens zero":            withTop(`"max_tokens":0`),
		"max_tokens negative":        withTop(`"max_tokens":-5`),
		"max_tokens float":           withTop(`"max_tokens":1.5`),
		"max_tokens string":          withTop(`"max_tokens":"100"`),
		"max_tokens huge literal":    withTop(`"max_tokens":1e400`),
		"stream string":              withTop(`"stream":"true"`),
		"stream null":                withTop(`"stream":null`),
		"temperature 2":              withTop(`"temperature":2`),
		"temperature string":         withTop(`"temperature":"1"`),
		"top_p negative":             withTop(`"top_p":-0.1`),
		"top_k zero":                 withTop(`"top_k":0`),
		"stop_sequences string":      withTop(`"stop_sequences":"x"`),
		"stop_sequences empty item":  withTop(`"stop_sequences":[""]`),
		"stop_sequences too many":    withTop(`"stop_sequences":["a","b","c","d","e","f","g","h","i"]`),
		"stop_sequences long":        withTop(`"stop_sequences":["` + strings.Repeat("a", 257) + `"]`),
		"metadata extra":             withTop(`"metadata":{"user_id":"u","session":"s"}`),
		"metadata not object":        withTop(`"metadata":"u"`),
		"metadata user_id number":    withTop(`"metadata":{"user_id":1}`),
		"metadata user_id long":      withTop(`"metadata":{"user_id":"` + strings.Repeat("u", 257) + `"}`),
		"output_config unknown":      withTop(`"output_config":{"format":{"type":"json_schema"}}`),
		"output_config effort bogus": withTop(`"output_config":{"effort":"ultra"}`),
		"output_config string":       withTop(`"output_config":"high"`),
		"system number":              withTop(`"system":1`),
		"system image block":         withTop(`"system":[` + image("image/png", pngB64) + `]`),
		"system extra field":         withTop(`"system":[{"type":"text","text":"s","citations":[]}]`),
		"system cache bad type":      withTop(`"system":[{"type":"text","text":"s","cache_control":{"type":"persistent"}}]`),
		"system cache bad ttl":       withTop(`"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"24h"}}]`),
		"five cache breakpoints": withTop(`"system":[` + strings.Repeat(`{"type":"text","text":"s","cache_control":{"type":"ephemeral"}},`, 4) +
			`{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]`),

		// Thinking.
		"thinking string":             withTop(`"thinking":"high"`),
		"thinking unknown type":       withTop(`"thinking":{"type":"max"}`),
		"thinking enabled no budget":  withTop(`"thinking":{"type":"enabled"}`),
		"thinking budget below min":   withTop(`"thinking":{"type":"enabled","budget_tokens":1000}`),
		"thinking budget string":      withTop(`"thinking":{"type":"enabled","budget_tokens":"5000"}`),
		"thinking adaptive budget":    withTop(`"thinking":{"type":"adaptive","budget_tokens":5000}`),
		"thinking extra field":        withTop(`"thinking":{"type":"enabled","budget_tokens":2000,"x":1}`),
		"thinking display bogus":      withTop(`"thinking":{"type":"adaptive","display":"full"}`),
		"thinking budget >= max_toks": withTop(`"max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024}`),

		// Roles and content.
		"role system":          msgs(`{"role":"system","content":"x"}`),
		"role tool":            msgs(`{"role":"tool","content":"x"}`),
		"role missing":         msgs(`{"content":"x"}`),
		"message extra field":  msgs(`{"role":"user","content":"x","name":"bob"}`),
		"content number":       msgs(user(`1`)),
		"content null":         msgs(user(`null`)),
		"content empty array":  msgs(user(`[]`)),
		"content object":       msgs(user(`{"type":"text","text":"x"}`)),
		"block not object":     msgs(user(`["x"]`)),
		"block no type":        msgs(user(`[{"text":"x"}]`)),
		"block unknown type":   msgs(user(`[{"type":"audio","data":"x"}]`)),
		"text without text":    msgs(user(`[{"type":"text"}]`)),
		"text number":          msgs(user(`[{"type":"text","text":1}]`)),
		"text citations":       msgs(user(`[{"type":"text","text":"x","citations":[{"type":"web_search_result_location","url":"https://x"}]}]`)),
		"document base64":      msgs(user(`[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]`)),
		"document url":         msgs(user(`[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]`)),
		"document file":        msgs(user(`[{"type":"document","source":{"type":"file","file_id":"file_1"}}]`)),
		"search_result":        msgs(user(`[{"type":"search_result","source":"https://x","title":"t","content":[]}]`)),
		"container_upload":     msgs(user(`[{"type":"container_upload","file_id":"f"}]`)),
		"server_tool_use":      msgs(user(`"hi"`), asst(`[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}]`)),
		"web_search result":    msgs(user(`"hi"`), asst(`[{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}]`)),
		"mcp_tool_use":         msgs(user(`"hi"`), asst(`[{"type":"mcp_tool_use","id":"m","name":"n","server_name":"s","input":{}}]`)),
		"image url source":     msgs(user(`[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]`)),
		"image file source":    msgs(user(`[{"type":"image","source":{"type":"file","file_id":"file_011"}}]`)),
		"image url in base64":  msgs(user(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngB64 + `","url":"https://x"}}]`)),
		"image no source":      msgs(user(`[{"type":"image"}]`)),
		"image svg":            msgs(user(`[` + image("image/svg+xml", pngB64) + `]`)),
		"image bmp":            msgs(user(`[` + image("image/bmp", pngB64) + `]`)),
		"image bad base64":     msgs(user(`[` + image("image/png", "!!!!") + `]`)),
		"image url-safe b64":   msgs(user(`[` + image("image/png", strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\xfb\xff\xfe")))) + `]`)),
		"image empty":          msgs(user(`[` + image("image/png", "") + `]`)),
		"image inner padding":  msgs(user(`[` + image("image/png", base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n01"))+pngB64) + `]`)),
		"image unpadded":       msgs(user(`[` + image("image/png", strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n01")), "=")) + `]`)),
		"image newline in b64": msgs(user(`[` + image("image/png", pngB64[:8]+`\n`+pngB64[8:]) + `]`)),
		"image png as jpeg":    msgs(user(`[` + image("image/jpeg", pngB64) + `]`)),
		"image jpeg as png":    msgs(user(`[` + image("image/png", jpegB64) + `]`)),
		"image riff not webp":  msgs(user(`[` + image("image/webp", base64.StdEncoding.EncodeToString([]byte("RIFF0000WAVEfmt "))) + `]`)),
		"image in assistant":   msgs(user(`"hi"`), asst(`[`+image("image/png", pngB64)+`]`)),
		"image extra field":    msgs(user(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngB64 + `"},"alt":"x"}]`)),
		"tool_use in user":     msgs(user(`[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]`)),
		"tool_use bad id":      msgs(user(`"hi"`), asst(`[{"type":"tool_use","id":"../x","name":"f","input":{}}]`)),
		"tool_use bad name":    msgs(user(`"hi"`), asst(`[{"type":"tool_use","id":"toolu_1","name":"web search","input":{}}]`)),
		"tool_use input array": msgs(user(`"hi"`), asst(`[{"type":"tool_use","id":"toolu_1","name":"f","input":[]}]`)),
		"tool_use no input":    msgs(user(`"hi"`), asst(`[{"type":"tool_use","id":"toolu_1","name":"f"}]`)),
		"tool_use caller":      msgs(user(`"hi"`), asst(`[{"type":"tool_use","id":"toolu_1","name":"f","input":{},"caller":{"type":"code_execution"}}]`)),
		"tool_result in asst":  msgs(user(`"hi"`), asst(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]`)),
		"tool_result no id":    msgs(user(`[{"type":"tool_result","content":"x"}]`)),
		"tool_result document": msgs(user(`[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"text","data":"x","media_type":"text/plain"}}]}]`)),
		"tool_result url img":  msgs(user(`[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]`)),
		"tool_result nested":   msgs(user(`[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_result","tool_use_id":"u","content":"x"}]}]`)),
		"tool_result is_error": msgs(user(`[{"type":"tool_result","tool_use_id":"t","content":"x","is_error":"yes"}]`)),
		"tool_result content#": msgs(user(`[{"type":"tool_result","tool_use_id":"t","content":5}]`)),
		"thinking in user":     msgs(user(`[{"type":"thinking","thinking":"x","signature":"s"}]`)),
		"thinking no sig":      msgs(user(`"hi"`), asst(`[{"type":"thinking","thinking":"x"}]`)),
		"thinking text number": msgs(user(`"hi"`), asst(`[{"type":"thinking","thinking":1,"signature":"s"}]`)),
		"thinking cache":       msgs(user(`"hi"`), asst(`[{"type":"thinking","thinking":"x","signature":"s","cache_control":{"type":"ephemeral"}}]`)),
		"redacted no data":     msgs(user(`"hi"`), asst(`[{"type":"redacted_thinking"}]`)),
		"cache_control string": msgs(user(`[{"type":"text","text":"x","cache_control":"ephemeral"}]`)),
		"cache_control extra":  msgs(user(`[{"type":"text","text":"x","cache_control":{"type":"ephemeral","scope":"global"}}]`)),

		// Tools.
		"tools object":          withTop(`"tools":{}`),
		"tool not object":       withTools(`"f"`),
		"web_search tool":       withTools(`{"type":"web_search_20250305","name":"web_search","max_uses":5}`),
		"web_fetch tool":        withTools(`{"type":"web_fetch_20250910","name":"web_fetch"}`),
		"code_execution tool":   withTools(`{"type":"code_execution_20250825","name":"code_execution"}`),
		"bash tool":             withTools(`{"type":"bash_20250124","name":"bash"}`),
		"text_editor tool":      withTools(`{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"}`),
		"computer tool":         withTools(`{"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768}`),
		"memory tool":           withTools(`{"type":"memory_20250818","name":"memory"}`),
		"mcp_toolset":           withTools(`{"type":"mcp_toolset","mcp_server_name":"x"}`),
		"tool_search tool":      withTools(`{"type":"tool_search_tool_regex_20251119","name":"tool_search"}`),
		"tool type null":        withTools(`{"type":null,"name":"f","input_schema":{"type":"object"}}`),
		"tool no name":          withTools(`{"input_schema":{"type":"object"}}`),
		"tool bad name":         withTools(`{"name":"a b","input_schema":{"type":"object"}}`),
		"tool long name":        withTools(`{"name":"` + strings.Repeat("a", 65) + `","input_schema":{"type":"object"}}`),
		"tool no schema":        withTools(`{"name":"f"}`),
		"tool schema string":    withTools(schemaTool(`"object"`)),
		"tool schema not obj":   withTools(schemaTool(`{"type":"string"}`)),
		"tool extra field":      withTools(`{"name":"f","input_schema":{"type":"object"},"defer_loading":true}`),
		"tool strict":           withTools(`{"name":"f","input_schema":{"type":"object"},"strict":true}`),
		"tool input_examples":   withTools(`{"name":"f","input_schema":{"type":"object"},"input_examples":[{}]}`),
		"tool description num":  withTools(`{"name":"f","description":1,"input_schema":{"type":"object"}}`),
		"duplicate tool names":  withTools(schemaTool(`{"type":"object"}`), schemaTool(`{"type":"object"}`)),
		"tool_choice bogus":     withTop(`"tool_choice":{"type":"required"}`),
		"tool_choice string":    withTop(`"tool_choice":"auto"`),
		"tool_choice unknown":   withTop(`"tool_choice":{"type":"tool","name":"nope"}`),
		"tool_choice extra":     withTop(`"tool_choice":{"type":"auto","x":1}`),
		"tool_choice none+dptu": withTop(`"tool_choice":{"type":"none","disable_parallel_tool_use":true}`),
	}
	// Remote schema references in every position toolschema knows.
	for name, schema := range map[string]string{
		"remote $ref":              `{"type":"object","properties":{"a":{"$ref":"https://evil.example/s.json"}}}`,
		"remote $ref root":         `{"type":"object","$ref":"http://evil.example/"}`,
		"remote $dynamicRef":       `{"type":"object","$dynamicRef":"https://evil.example/#x"}`,
		"remote $id":               `{"type":"object","$id":"https://evil.example/s"}`,
		"remote $schema":           `{"type":"object","$schema":"https://evil.example/meta"}`,
		"remote $ref in $defs":     `{"type":"object","$defs":{"x":{"$ref":"https://evil.example/"}}}`,
		"remote $ref in items":     `{"type":"object","properties":{"a":{"type":"array","items":{"$ref":"//evil.example/"}}}}`,
		"remote $ref in anyOf":     `{"type":"object","anyOf":[{"$ref":"file:///etc/passwd"}]}`,
		"remote $ref in enum data": `{"type":"object","properties":{"a":{"enum":[{"$ref":"https://evil.example/"}]}}}`,
		"relative $ref":            `{"type":"object","properties":{"a":{"$ref":"other.json#/x"}}}`,
	} {
		c["schema: "+name] = withTools(schemaTool(schema))
	}
	// Count with extra fields.
	return c
}

func TestRebuildRefusesHostileBodies(t *testing.T) {
	cases := hostileBodies()
	if len(cases) < 100 {
		t.Fatalf("only %d hostile bodies", len(cases))
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Rebuild([]byte(body), testLimits)
			if err == nil {
				t.Fatalf("Rebuild(%s) = nil error, want a refusal", body)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, strictjson.ErrInvalid) && !errors.Is(err, toolschema.ErrInvalid) {
				t.Fatalf("Rebuild error %v is not a request refusal", err)
			}
		})
	}
}

func TestRebuildRefusesMalformedJSON(t *testing.T) {
	for name, body := range map[string]string{
		"duplicate top key":    `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`,
		"duplicate nested key": msgs(`{"role":"user","role":"assistant","content":"x"}`),
		"duplicate model key":  `{"model":"claude-test","model":"other","messages":[{"role":"user","content":"a"}]}`,
		"invalid utf8":         "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		"unpaired surrogate":   msgs(user(`"\ud800"`)),
		"trailing data":        msgs(user(`"x"`)) + `{}`,
		"truncated":            `{"messages":[`,
		"too deep":             withTop(`"metadata":` + strings.Repeat("[", 100) + strings.Repeat("]", 100)),
		"token budget":         withTop(`"stop_sequences":[` + strings.Repeat("1,", MaxJSONTokens) + `1]`),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Rebuild([]byte(body), testLimits); !errors.Is(err, strictjson.ErrInvalid) {
				t.Fatalf("Rebuild error = %v, want strictjson.ErrInvalid", err)
			}
		})
	}
}

func TestRebuildRefusesOversizedBody(t *testing.T) {
	if raceEnabled {
		// About 7 s of make unit under -race, parsing a 27 MB request;
		// nothing here runs concurrently.
		t.Skip("parses a 27 MB request: runs without -race in make unit's second pass")
	}
	body := make([]byte, MaxRequestBytes+1)
	if _, err := Rebuild(body, testLimits); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Rebuild error = %v, want ErrTooLarge", err)
	}
	big := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, MaxImageBytes)...))
	if _, err := Rebuild([]byte(msgs(user(`[`+image("image/png", big)+`]`))), testLimits); !errors.Is(err, ErrInvalid) {
		t.Fatalf("image over MaxImageBytes: error = %v, want ErrInvalid", err)
	}
}

func TestRebuildRefusesBadLimits(t *testing.T) {
	for _, l := range []Limits{{}, {Model: "m"}, {Model: "m", MaxOutputTokens: 1, Thinking: "max"}} {
		if _, err := Rebuild([]byte(msgs(user(`"hi"`))), l); !errors.Is(err, ErrLimits) {
			t.Errorf("Rebuild with %+v: error = %v, want ErrLimits", l, err)
		}
	}
}

func rebuilt(t *testing.T, body string, l Limits) map[string]any {
	t.Helper()
	r, err := Rebuild([]byte(body), l)
	if err != nil {
		t.Fatalf("Rebuild(%s): %v", body, err)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRebuildFixesModelAndClampsTokens(t *testing.T) {
	tests := []struct {
		body string
		want float64
	}{
		{msgs(user(`"hi"`)), 8000},
		{withTop(`"max_tokens":100`), 100},
		{withTop(`"max_tokens":8000`), 8000},
		{withTop(`"max_tokens":1000000000`), 8000},
		{withTop(`"model":"claude-test","max_tokens":8001`), 8000},
	}
	for _, tt := range tests {
		m := rebuilt(t, tt.body, testLimits)
		if m["model"] != "claude-test" || m["max_tokens"] != tt.want {
			t.Errorf("Rebuild(%s): model %v max_tokens %v, want claude-test %v", tt.body, m["model"], m["max_tokens"], tt.want)
		}
	}
}

func TestRebuildThinkingNeverAboveCeiling(t *testing.T) {
	tests := []struct {
		name, ceiling, top string
		wantThinking       string // JSON of thinking, "" for none
		wantEffort         string
	}{
		{"budget above medium clamped", "medium", `"thinking":{"type":"enabled","budget_tokens":100000}`, `{"budget_tokens":7999,"type":"enabled"}`, ""},
		{"budget above low clamped", "low", `"max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":60000}`, `{"budget_tokens":2048,"type":"enabled"}`, ""},
		{"budget above high clamped", "high", `"max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":60000}`, `{"budget_tokens":16384,"type":"enabled"}`, ""},
		{"budget below ceiling kept", "xhigh", `"thinking":{"type":"enabled","budget_tokens":2000}`, `{"budget_tokens":2000,"type":"enabled"}`, ""},
		{"thinking off drops enabled", "off", `"thinking":{"type":"enabled","budget_tokens":2000}`, "", ""},
		{"thinking off drops adaptive", "off", `"thinking":{"type":"adaptive"}`, "", ""},
		{"empty ceiling is off", "", `"thinking":{"type":"adaptive"}`, "", ""},
		{"disabled kept", "high", `"thinking":{"type":"disabled"}`, `{"type":"disabled"}`, ""},
		{"adaptive low gets low effort", "low", `"thinking":{"type":"adaptive"}`, `{"type":"adaptive"}`, "low"},
		{"adaptive medium gets medium effort", "medium", `"thinking":{"type":"adaptive"}`, `{"type":"adaptive"}`, "medium"},
		{"adaptive high left at default", "high", `"thinking":{"type":"adaptive"}`, `{"type":"adaptive"}`, ""},
		{"adaptive xhigh left at default", "xhigh", `"thinking":{"type":"adaptive","display":"summarized"}`, `{"display":"summarized","type":"adaptive"}`, ""},
		{"effort max lowered", "high", `"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`, `{"type":"adaptive"}`, "high"},
		{"effort xhigh lowered to medium", "medium", `"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`, `{"type":"adaptive"}`, "medium"},
		{"effort below ceiling kept", "xhigh", `"thinking":{"type":"adaptive"},"output_config":{"effort":"low"}`, `{"type":"adaptive"}`, "low"},
		{"effort without thinking lowered", "low", `"output_config":{"effort":"high"}`, "", "low"},
		{"effort under off is low", "off", `"output_config":{"effort":"xhigh"}`, "", "low"},
		{"empty output_config dropped", "high", `"output_config":{}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLimits
			l.Thinking = tt.ceiling
			if strings.Contains(tt.top, "64000") {
				l.MaxOutputTokens = 64000
			}
			m := rebuilt(t, withTop(tt.top), l)
			got := ""
			if th, ok := m["thinking"]; ok {
				b, _ := json.Marshal(th)
				got = string(b)
			}
			if got != tt.wantThinking {
				t.Errorf("thinking = %s, want %s", got, tt.wantThinking)
			}
			effort := ""
			if oc, ok := m["output_config"].(map[string]any); ok {
				effort, _ = oc["effort"].(string)
			}
			if effort != tt.wantEffort {
				t.Errorf("effort = %q, want %q", effort, tt.wantEffort)
			}
		})
	}
}

func TestRebuildKeepsWhatIsAdmitted(t *testing.T) {
	body := `{"model":"claude-test","max_tokens":500,"stream":true,"temperature":0.5,"top_k":40,"top_p":0.9,
	"stop_sequences":["END"],"metadata":{"user_id":"u-1"},
	"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral","ttl":"1h"}}],
	"tools":[{"type":"custom","name":"clock","description":"time","input_schema":{"type":"object","properties":{"tz":{"type":"string"}},"$defs":{"x":{"type":"string"}},"additionalProperties":{"$ref":"#/$defs/x"}},"cache_control":{"type":"ephemeral"}}],
	"tool_choice":{"type":"tool","name":"clock","disable_parallel_tool_use":true},
	"messages":[
	 {"role":"user","content":[{"type":"text","text":"look"},` + image("image/png", pngB64) + `,` + image("image/jpeg", jpegB64) + `,` + image("image/gif", gifB64) + `,` + image("image/webp", webpB64) + `]},
	 {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"c2ln"},{"type":"redacted_thinking","data":"ZW5j"},{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_01A","name":"clock","input":{"tz":"UTC"}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":[{"type":"text","text":"12:00"},` + image("image/png", pngB64) + `],"is_error":false,"cache_control":{"type":"ephemeral"}}]},
	 {"role":"assistant","content":"ok"}]}`
	r, err := Rebuild([]byte(body), testLimits)
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if !r.Stream {
		t.Error("Stream = false, want true")
	}
	var got, want any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(body), &want)
	want.(map[string]any)["model"] = "claude-test"
	delete(want.(map[string]any)["tools"].([]any)[0].(map[string]any), "type") // "custom" is the default
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("rebuilt body differs from the admitted request:\n got %s\nwant %s", g, w)
	}
}

func TestRebuildCountTokens(t *testing.T) {
	ok := `{"model":"claude-test","system":"s","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":100000}}`
	out, err := RebuildCountTokens([]byte(ok), testLimits)
	if err != nil {
		t.Fatalf("RebuildCountTokens: %v", err)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if _, has := m["max_tokens"]; has {
		t.Error("count_tokens body has max_tokens")
	}
	if th := m["thinking"].(map[string]any); th["budget_tokens"] != float64(8192) {
		t.Errorf("count_tokens thinking = %v, want the medium ceiling 8192", th)
	}
	for _, extra := range []string{`"max_tokens":10`, `"stream":true`, `"metadata":{}`, `"temperature":1`, `"output_config":{}`, `"stop_sequences":["x"]`} {
		if _, err := RebuildCountTokens([]byte(withTop(extra)), testLimits); !errors.Is(err, ErrInvalid) {
			t.Errorf("count_tokens with %s: error = %v, want ErrInvalid", extra, err)
		}
	}
	for name, body := range hostileBodies() {
		if _, err := RebuildCountTokens([]byte(body), testLimits); err == nil {
			t.Errorf("count_tokens admitted hostile body %q", name)
		}
	}
}

func TestRebuildTypesRoundTrip(t *testing.T) {
	// What the worker builds with the exported types passes Rebuild.
	temp := 0.3
	req := Request{
		Model: "claude-test", MaxTokens: 4000, Stream: true, Temperature: &temp,
		System:   []TextBlock{{Type: "text", Text: "sys", CacheControl: &CacheControl{Type: "ephemeral"}}},
		Thinking: &Thinking{Type: ThinkingEnabled, BudgetTokens: 2048},
		Tools:    []Tool{{Name: "clock", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Messages: []Message{
			{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "hi"}}},
			{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockThinking, Thinking: "t", Signature: "s"}, {Type: BlockThinking, Signature: "omitted-display"}, {Type: BlockToolUse, ID: "toolu_1", Name: "clock", Input: json.RawMessage(`{}`)}}},
			{Role: RoleUser, Content: []ContentBlock{{Type: BlockToolResult, ToolUseID: "toolu_1", Content: []ContentBlock{{Type: BlockText, Text: "noon"}}}}},
		},
		Metadata: &Metadata{UserID: "u"},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rebuild(b, testLimits); err != nil {
		t.Fatalf("Rebuild of a worker-built request: %v\n%s", err, b)
	}
}

func FuzzRebuild(f *testing.F) {
	for _, b := range hostileBodies() {
		f.Add([]byte(b))
	}
	f.Add([]byte(msgs(user(`"hi"`))))
	f.Add([]byte(withTop(`"thinking":{"type":"adaptive"},"stream":true`)))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Rebuild(body, testLimits)
		if err != nil {
			return
		}
		// An admitted body rebuilds to itself, within every bound.
		again, err := Rebuild(r.Body, testLimits)
		if err != nil {
			t.Fatalf("rebuilt body refused: %v\n%s", err, r.Body)
		}
		if string(again.Body) != string(r.Body) {
			t.Fatalf("rebuild not idempotent:\n%s\n%s", r.Body, again.Body)
		}
		var m map[string]any
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatal(err)
		}
		if m["model"] != "claude-test" {
			t.Fatalf("model = %v", m["model"])
		}
		if n, _ := m["max_tokens"].(float64); n < 1 || n > 8000 {
			t.Fatalf("max_tokens = %v", m["max_tokens"])
		}
		if th, ok := m["thinking"].(map[string]any); ok {
			if n, ok := th["budget_tokens"].(float64); ok && n > 8192 {
				t.Fatalf("budget_tokens = %v above the ceiling", n)
			}
		}
	})
}

// BenchmarkRebuildLargeImages: a large body (three 20 MiB PNG images, 80
// MiB of base64; four would pass the 96 MiB limit): time and allocation
// per byte of body are the broker's cost of one such call.
func BenchmarkRebuildLargeImages(b *testing.B) {
	img := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, MaxImageBytes-16)...))
	body := []byte(msgs(user(`[` + image("image/png", img) + `,` + image("image/png", img) + `,` + image("image/png", img) + `,{"type":"text","text":"what is this"}]`)))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Rebuild(body, testLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckBase64MatchesTheDecoder(t *testing.T) {
	big := base64.StdEncoding.EncodeToString(make([]byte, 200_000)) // several chunks
	// Newlines, which the decoder skips, are refused: stricter, never looser.
	if _, _, ok := checkBase64("AAAA\nAAAA"); ok {
		t.Error("checkBase64 admitted a newline")
	}
	for _, s := range []string{"", "AA==", "AAA=", "AAAA", "AA=A", "A===", "AA==AAAA", big, big[:len(big)-4] + "AA==", big[:70_000] + "=" + big[70_001:]} {
		raw, err := base64.StdEncoding.Strict().DecodeString(s)
		head, n, ok := checkBase64(s)
		if ok != (err == nil) || (ok && (n != len(raw) || string(head) != string(raw[:min(16, len(raw))]))) {
			t.Errorf("checkBase64(%.20q...) = %d, %v; decoder: %d, %v", s, n, ok, len(raw), err)
		}
	}
}
