package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

func TestListToolsAndCompareAgainstSDKServer(t *testing.T) {
	ts, srv, rec := newSDKServer(t, nil)
	s := server(ts.URL, policy.SessionAuto)
	tools, err := ListTools(t.Context(), s, testCred, testOptions())
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	if want := []string{"add", "echo"}; !reflect.DeepEqual(sortedCopy(names), want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	// ListTools ends its session.
	rec.mu.Lock()
	deletes := len(rec.deletes)
	for i, a := range rec.auth {
		if a != "Bearer "+testCred {
			t.Errorf("request %d Authorization = %q", i, a)
		}
	}
	rec.mu.Unlock()
	if deletes != 1 {
		t.Errorf("ListTools sent %d DELETEs, want 1", deletes)
	}
	n := 0
	for range srv.Sessions() {
		n++
	}
	if n != 0 {
		t.Errorf("server still has %d sessions after ListTools", n)
	}

	declared := []protocol.ToolSpec{
		// Same schema, other key order and spacing: no finding.
		{Name: "echo", Description: "mine", Parameters: json.RawMessage(`{ "additionalProperties":false, "required":["text"], "type":"object",
			"properties":{"text":{"description":"what to echo","type":"string"}}}`)},
		// Schema differs: b missing, c extra.
		{Name: "add", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"c":{"type":"number"}}}`)},
		{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)},
	}
	got := CompareTools(declared, tools)
	want := []Finding{
		{Tool: "add", Kind: FindingSchema},
		{Tool: "search", Kind: FindingMissing},
	}
	if len(got) != len(want) {
		t.Fatalf("findings = %+v, want kinds %+v", got, want)
	}
	for i := range want {
		if got[i].Tool != want[i].Tool || got[i].Kind != want[i].Kind {
			t.Errorf("finding %d = %+v, want %s/%s", i, got[i], want[i].Tool, want[i].Kind)
		}
	}
	if d := got[0].Detail; !strings.Contains(d, `only declared: "c"`) || !strings.Contains(d, `only on the server: "b"`) {
		t.Errorf("schema detail %q should name c (declared only) and b (server only)", d)
	}
}

func TestListToolsStatelessPaged(t *testing.T) {
	page := 0
	f := &fake{refuseInit: true, call: func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		page++
		if page == 1 {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"one","description":"%s","inputSchema":{"type":"object"}}],"nextCursor":"c2"}}`, id, strings.Repeat("d", 5000))
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"two","inputSchema":{"type":"object","description":"%s"}}]}}`, id, strings.Repeat("s", protocol.MaxSchemaBytes))
	}}
	ts, rec := newFake(t, f)
	for _, mode := range []string{policy.SessionStateless, policy.SessionAuto} {
		page = 0
		tools, err := ListTools(t.Context(), server(ts.URL, mode), "", testOptions())
		if err != nil {
			t.Fatalf("%s: ListTools: %v", mode, err)
		}
		if len(tools) != 2 || tools[0].Name != "one" || tools[1].Name != "two" {
			t.Fatalf("%s: tools = %+v", mode, tools)
		}
		if n := len([]rune(tools[0].Description)); n != protocol.MaxDescChars {
			t.Errorf("%s: description kept %d chars, want cut to %d", mode, n, protocol.MaxDescChars)
		}
		if tools[1].InputSchema != nil {
			t.Errorf("%s: oversized schema kept (%d bytes), want nil", mode, len(tools[1].InputSchema))
		}
		f := CompareTools([]protocol.ToolSpec{{Name: "two", Parameters: json.RawMessage(`{"type":"object"}`)}}, tools)
		if len(f) != 2 || f[0].Kind != FindingUndeclared || f[1].Kind != FindingSchemaUnknown {
			t.Errorf("%s: findings = %+v, want one undeclared, then schema-unknown for two", mode, f)
		}
	}
	if n := rec.count("tools/list"); n != 4 {
		t.Errorf("tools/list sent %d times, want 4 (two pages, two modes)", n)
	}
}

func TestListToolsRefusesEndlessCursor(t *testing.T) {
	f := &fake{call: jsonAnswer(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[],"nextCursor":"again"}}`)}
	ts, _ := newFake(t, f)
	_, err := ListTools(t.Context(), server(ts.URL, policy.SessionStateless), "", testOptions())
	wantErr(t, err, ErrProtocol)
}

func TestCompareToolsTable(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	for _, tc := range []struct {
		name     string
		declared []protocol.ToolSpec
		offered  []Tool
		want     []string // tool/kind
	}{
		{"all equal", []protocol.ToolSpec{{Name: "a", Parameters: obj}}, []Tool{{Name: "a", InputSchema: json.RawMessage(`{ "type" : "object" }`)}}, nil},
		{"number forms equal", []protocol.ToolSpec{{Name: "a", Parameters: json.RawMessage(`{"type":"object","maxProperties":1.0}`)}}, []Tool{{Name: "a", InputSchema: json.RawMessage(`{"type":"object","maxProperties":1}`)}}, nil},
		{"null declared is an object schema", []protocol.ToolSpec{{Name: "a"}}, []Tool{{Name: "a", InputSchema: obj}}, nil},
		{"missing", []protocol.ToolSpec{{Name: "a", Parameters: obj}}, nil, []string{"a/missing"}},
		{"required differs", []protocol.ToolSpec{{Name: "a", Parameters: json.RawMessage(`{"type":"object","required":["x"]}`)}}, []Tool{{Name: "a", InputSchema: obj}}, []string{"a/schema"}},
		{"undeclared", nil, []Tool{{Name: "z", InputSchema: obj}}, []string{"z/undeclared"}},
		{"bad declared JSON", []protocol.ToolSpec{{Name: "a", Parameters: json.RawMessage(`{`)}}, []Tool{{Name: "a", InputSchema: obj}}, []string{"a/schema"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range CompareTools(tc.declared, tc.offered) {
				got = append(got, f.Tool+"/"+f.Kind)
				if f.Detail == "" {
					t.Errorf("finding %+v has no detail", f)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("findings = %v, want %v", got, tc.want)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
