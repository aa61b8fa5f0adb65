package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeBroker answers MCP calls like the broker's MCP route: it records the
// route, tool and arguments and answers what tools maps the tool to (a
// CallToolResult object), or refuses (status 404) an unknown tool.
type fakeBroker struct {
	tools map[string]string // "server/tool" -> result JSON
	calls []string          // "server/tool args"
	fail  error
}

func (f *fakeBroker) Call(ctx context.Context, route string, body any) (json.RawMessage, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	data, _ := json.Marshal(body)
	var req struct {
		ID     int `json:"id"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	key := strings.TrimPrefix(route, "/mcp/") + "/" + req.Params.Name
	f.calls = append(f.calls, key+" "+string(req.Params.Arguments))
	res, ok := f.tools[key]
	if !ok {
		return nil, errors.New("broker answered status 404")
	}
	return json.RawMessage(`{"jsonrpc":"2.0","id":` + itoa(req.ID) + `,"result":` + res + `}`), nil
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func testJob(script string) precheck.Job {
	return precheck.Job{
		Script: script, FiredAt: "2026-11-30T23:30:00Z", TimeZone: "Europe/Berlin", Today: "2026-12-01",
		Schedule: "every day at 00:30", Servers: []precheck.Server{{Name: "search", Tools: []string{"lookup", "fail"}}},
		TimeoutMs: 2000, MaxCalls: 4, MaxNoteChars: 100, MaxContextChars: 200, MaxHeapBytes: 512 << 20,
	}
}

func newFake() *fakeBroker {
	return &fakeBroker{tools: map[string]string{
		"search/lookup": `{"content":[{"type":"text","text":"{\"hits\":3}"}]}`,
		"search/fail":   `{"isError":true,"content":[{"type":"text","text":"upstream down"}]}`,
		"search/secret": `{"content":[{"type":"text","text":"{}"}]}`,
	}}
}

func TestRunTable(t *testing.T) {
	tests := []struct {
		name   string
		script string
		job    func(*precheck.Job)
		want   precheck.Result
		calls  int
	}{
		{"wake", `export default async () => ({ wake: true, context: "go" })`, nil, precheck.Result{Wake: true, Context: "go"}, 0},
		{"no wake", `export default async () => ({ wake: false })`, nil, precheck.Result{}, 0},
		{"note", `export default async () => ({ wake: false, note: "quiet day" })`, nil, precheck.Result{Note: "quiet day"}, 0},
		{"sync function", `export default function () { return { wake: false, note: "sync" } }`, nil, precheck.Result{Note: "sync"}, 0},
		{"context from inputs", `export default async ({ firedAt, timeZone, today, schedule }) =>
			({ wake: true, context: [firedAt.toISOString(), timeZone, today, schedule].join("|") })`, nil,
			precheck.Result{Wake: true, Context: "2026-11-30T23:30:00.000Z|Europe/Berlin|2026-12-01|every day at 00:30"}, 0},
		{"async mcp calls", `export default async ({ mcp }) => {
			const a = await mcp.json("search", "lookup", { q: "x" });
			const [b, c] = await Promise.all([mcp.call("search", "lookup", {}), mcp.json("search", "lookup")]);
			return { wake: a.hits + c.hits > 5, ...(a.hits > 2 ? { context: "hits " + a.hits + " " + b.content[0].type } : { note: "few" }) };
		}`, nil, precheck.Result{Wake: true, Context: "hits 3 text"}, 3},
		{"throws", `export default async () => { throw new Error("feed unavailable") }`, nil,
			precheck.Result{Error: "the script threw: feed unavailable", Kind: precheck.KindThrow}, 0},
		{"throws a string", `export default () => { throw "plain" }`, nil, precheck.Result{Error: "the script threw: plain", Kind: precheck.KindThrow}, 0},
		{"top-level throw", `throw new TypeError("early"); export default () => ({ wake: false })`, nil,
			precheck.Result{Error: "the script threw: early", Kind: precheck.KindThrow}, 0},
		{"syntax error", "export default async () => {\n  return { wake: \n}", nil,
			precheck.Result{Error: "the script has a syntax error at line 3, column 1", Kind: precheck.KindSyntax}, 0},
		{"no export", `const f = async () => ({ wake: false })`, nil, precheck.Result{Error: errNoExport.Error(), Kind: precheck.KindSyntax}, 0},
		{"two exports", "export default 1\nexport default 2", nil, precheck.Result{Error: "the script has a syntax error at line 2, column 1", Kind: precheck.KindSyntax}, 0},
		{"import refused", "import x from 'fs'\nexport default () => ({ wake: false })", nil,
			precheck.Result{Error: "the script has a syntax error at line 1, column 1", Kind: precheck.KindSyntax}, 0},
		{"export default in a string is not rewritten", "const s = 'export default';\nexport default () => ({ wake: false, note: s })", nil,
			precheck.Result{Note: "export default"}, 0},
		{"export default only in a comment", "// export default\nconst x = 1", nil, precheck.Result{Error: errNoExport.Error(), Kind: precheck.KindSyntax}, 0},
		{"strict mode", `export default () => { undeclared = 1; return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: undeclared is not defined", Kind: precheck.KindThrow}, 0},
		{"not a function", `export default { wake: false }`, nil, precheck.Result{Error: msgNotFunc, Kind: precheck.KindShape}, 0},
		{"wrong shape: string", `export default async () => "yes"`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: wake not boolean", `export default async () => ({ wake: 1, context: "x" })`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: wake without context", `export default async () => ({ wake: true })`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: no wake with context", `export default async () => ({ wake: false, context: "x" })`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: extra key", `export default async () => ({ wake: false, extra: 1 })`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: note not string", `export default async () => ({ wake: false, note: 5 })`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: array", `export default async () => [true]`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"wrong shape: null", `export default async () => null`, nil, precheck.Result{Error: msgShape, Kind: precheck.KindShape}, 0},
		{"context over its bound", `export default async () => ({ wake: true, context: "x".repeat(201) })`, nil,
			precheck.Result{Error: "the script's answer is over its bound (note 100, context 200 characters)", Kind: precheck.KindBound}, 0},
		{"context at its bound", `export default async () => ({ wake: true, context: "é".repeat(200) })`, nil,
			precheck.Result{Wake: true, Context: strings.Repeat("é", 200)}, 0},
		{"note over its bound", `export default async () => ({ wake: false, note: "x".repeat(101) })`, nil,
			precheck.Result{Error: "the script's answer is over its bound (note 100, context 200 characters)", Kind: precheck.KindBound}, 0},
		{"huge answer refused before decoding", `export default async () => ({ wake: true, context: "x".repeat(1 << 20) })`, nil,
			precheck.Result{Error: "the script's answer is over its bound (note 100, context 200 characters)", Kind: precheck.KindBound}, 0},
		{"tool not granted refused", `export default async ({ mcp }) => { await mcp.call("search", "secret", {}); return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.call: search/secret is not granted to this precheck", Kind: precheck.KindThrow}, 0},
		{"server not granted refused", `export default async ({ mcp }) => { await mcp.json("other", "lookup"); return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.json: other/lookup is not granted to this precheck", Kind: precheck.KindThrow}, 0},
		{"refusal caught by the script", `export default async ({ mcp }) => {
			try { await mcp.call("search", "secret") } catch (e) { return { wake: false, note: e.message } }
		}`, nil, precheck.Result{Note: "mcp.call: search/secret is not granted to this precheck"}, 0},
		{"tool error throws", `export default async ({ mcp }) => { await mcp.json("search", "fail", {}); return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.json: search/fail answered an error", Kind: precheck.KindThrow}, 1},
		{"call budget counts refusals", `export default async ({ mcp }) => {
			for (let i = 0; i < 3; i++) { try { await mcp.call("search", "secret") } catch (e) {} }
			await mcp.call("search", "lookup"); await mcp.call("search", "lookup");
			return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.call: the run's budget of 4 calls is spent", Kind: precheck.KindThrow}, 1},
		{"args must be an object", `export default async ({ mcp }) => { await mcp.call("search", "lookup", [1]); return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.call: args must be an object", Kind: precheck.KindThrow}, 0},
		{"args over their bound", `export default async ({ mcp }) => { await mcp.call("search", "lookup", { q: "x".repeat(70000) }); return { wake: false } }`, nil,
			precheck.Result{Error: "the script threw: mcp.call: args over 65536 bytes", Kind: precheck.KindThrow}, 0},
		{"endless loop stopped at the deadline", `export default async () => { for (;;) {} }`, func(j *precheck.Job) { j.TimeoutMs = 200 },
			precheck.Result{Error: msgTimeout, Kind: precheck.KindTimeout}, 0},
		{"endless top-level loop stopped", `while (true) {}; export default () => ({ wake: false })`, func(j *precheck.Job) { j.TimeoutMs = 200 },
			precheck.Result{Error: msgTimeout, Kind: precheck.KindTimeout}, 0},
		{"never settles", `export default () => new Promise(() => {})`, nil, precheck.Result{Error: msgPending, Kind: precheck.KindThrow}, 0},
		{"runaway recursion", `const f = (n) => f(n + 1) + 1; export default () => f(0)`, nil, precheck.Result{Error: msgStack, Kind: precheck.KindThrow}, 0},
		{"replaced globals do not change the reading", `export default () => { JSON.stringify = () => '{"wake":true,"context":"forged"}'; return { wake: false } }`, nil,
			precheck.Result{}, 0},
		{"throwing getter", `export default () => ({ wake: false, get note() { throw new Error("getter") } })`, nil,
			precheck.Result{Error: "the script threw: getter", Kind: precheck.KindThrow}, 0},
		{"throw message cleaned and cut", `export default () => { throw new Error("a\u0000b" + "x".repeat(400)) }`, nil,
			precheck.Result{Error: "the script threw: a b" + strings.Repeat("x", precheck.MaxErrorChars-len("the script threw: ")-4) + "…", Kind: precheck.KindThrow}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := testJob(tt.script)
			if tt.job != nil {
				tt.job(&job)
			}
			fb := newFake()
			start := time.Now()
			got := Run(context.Background(), job, fb, nil)
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			if len(fb.calls) != tt.calls {
				t.Errorf("broker calls = %d (%v), want %d", len(fb.calls), fb.calls, tt.calls)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

func TestMCPArgumentsReachTheBroker(t *testing.T) {
	fb := newFake()
	got := Run(context.Background(), testJob(`export default async ({ mcp }) => {
		const r = await mcp.json("search", "lookup", { q: "weather", n: 2 });
		return { wake: false, note: String(r.hits) } }`), fb, nil)
	if got != (precheck.Result{Note: "3"}) {
		t.Fatalf("got %+v", got)
	}
	if want := []string{`search/lookup {"q":"weather","n":2}`}; len(fb.calls) != 1 || fb.calls[0] != want[0] {
		t.Fatalf("calls %v, want %v", fb.calls, want)
	}
}

func TestMCPJSONPrefersStructuredContent(t *testing.T) {
	fb := newFake()
	fb.tools["search/lookup"] = `{"structuredContent":{"hits":9},"content":[{"type":"text","text":"not json"}]}`
	got := Run(context.Background(), testJob(`export default async ({ mcp }) => ({ wake: false, note: String((await mcp.json("search", "lookup")).hits) })`), fb, nil)
	if got != (precheck.Result{Note: "9"}) {
		t.Fatalf("got %+v", got)
	}
	fb.tools["search/lookup"] = `{"content":[{"type":"text","text":"not json"}]}`
	got = Run(context.Background(), testJob(`export default async ({ mcp }) => ({ wake: false, note: String(await mcp.json("search", "lookup")) })`), fb, nil)
	want := precheck.Result{Error: "the script threw: mcp.json: search/lookup's text content is not JSON", Kind: precheck.KindThrow}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestBrokerFailureIsGeneric(t *testing.T) {
	fb := newFake()
	fb.fail = errors.New("broker answered status 403 secret-detail")
	got := Run(context.Background(), testJob(`export default async ({ mcp }) => { await mcp.call("search", "lookup"); return { wake: false } }`), fb, nil)
	want := precheck.Result{Error: "the script threw: mcp.call: the call to search/lookup failed", Kind: precheck.KindThrow}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestHeapBoundStopsTheScript(t *testing.T) {
	job := testJob(`export default async () => { const a = []; for (;;) a.push("x".repeat(1024) + a.length) }`)
	job.MaxHeapBytes = 64 << 20
	// The deadline must not compete with the heap bound: the loop needs
	// about 3 s of CPU under -race, and a busy machine gave it 14% of a
	// core, so a 20 s deadline sometimes came first. Five minutes still
	// answers (as a timeout) before go test's own limit if the bound fails.
	job.TimeoutMs = 300_000
	got := Run(context.Background(), job, newFake(), nil)
	if want := (precheck.Result{Error: msgMemory, Kind: precheck.KindMemory}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestCancelledContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	got := Run(ctx, testJob(`export default () => { for (;;) {} }`), newFake(), nil)
	if got.Kind != precheck.KindTimeout {
		t.Fatalf("got %+v", got)
	}
}

func TestMain_(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	job, _ := json.Marshal(testJob(`export default async () => ({ wake: true, context: "c" })`))
	var out bytes.Buffer
	if code := Main(context.Background(), bytes.NewReader(job), &out, newFake(), log); code != 0 {
		t.Fatalf("exit %d", code)
	}
	res, err := precheck.DecodeResult(bytes.TrimSpace(out.Bytes()), precheck.Limits{MaxNoteChars: 100, MaxContextChars: 200})
	if err != nil || res != (precheck.Result{Wake: true, Context: "c"}) {
		t.Fatalf("got %+v %v (%q)", res, err, out.String())
	}
	for name, in := range map[string]string{
		"not json":       "{",
		"unknown field":  `{"script":"x","extra":1}`,
		"invalid job":    `{"script":""}`,
		"over its bound": `{"script":"` + strings.Repeat("x", precheck.MaxJobBytes) + `"}`,
	} {
		out.Reset()
		if code := Main(context.Background(), strings.NewReader(in), &out, newFake(), log); code != 2 || out.Len() != 0 {
			t.Errorf("%s: exit %d, output %q; want 2 and nothing", name, code, out.String())
		}
	}
}

// BenchmarkRun: a fresh VM, the module rewrite and compile, one MCP call
// through the fake broker and the answer's checks (what a container adds
// on top is process and container start).
func BenchmarkRun(b *testing.B) {
	job := testJob(`export default async ({ mcp, today }) => {
		const r = await mcp.json("search", "lookup", { q: today });
		return r.hits > 2 ? { wake: true, context: "hits " + r.hits } : { wake: false };
	}`)
	for b.Loop() {
		if res := Run(context.Background(), job, newFake(), nil); !res.Wake {
			b.Fatalf("got %+v", res)
		}
	}
}
