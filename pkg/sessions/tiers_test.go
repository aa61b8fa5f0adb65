package sessions

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTiersFor(t *testing.T) {
	cases := []struct {
		window, reserve int
		want            Tiers
	}{
		{1_000_000, 64_000, Tiers{300_000, 500_000}},
		{400_000, 32_000, Tiers{300_000, 368_000}},
		{332_000, 32_000, Tiers{300_000, 300_000}}, // leaves exactly 300,000: not more
		{200_000, 32_000, Tiers{168_000, 168_000}},
		{10, 20, Tiers{1, 1}},
	}
	for _, c := range cases {
		got := TiersFor(c.window, c.reserve)
		if got != c.want {
			t.Errorf("TiersFor(%d, %d) = %+v, want %+v", c.window, c.reserve, got, c.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("TiersFor(%d, %d) invalid: %v", c.window, c.reserve, err)
		}
	}
	if (Tiers{0, 1}).Validate() == nil || (Tiers{5, 4}).Validate() == nil {
		t.Error("Validate accepted a zero threshold or a ceiling below the threshold")
	}
}

func TestDecide(t *testing.T) {
	tiers := Tiers{DefaultThreshold, DefaultCeiling}
	far := &CompactionRecord{TokensAfter: 100_000}                    // 200,000 below the threshold
	near := &CompactionRecord{TokensAfter: DefaultThreshold - 50_000} // exactly within 50,000
	justOut := &CompactionRecord{TokensAfter: DefaultThreshold - 50_001}
	cases := []struct {
		name   string
		tokens int
		last   *CompactionRecord
		want   Action
	}{
		{"below the threshold", 299_999, nil, None},
		{"at the threshold", 300_000, nil, Host},
		{"between the tiers", 450_000, nil, Host},
		{"at the ceiling", 500_000, nil, Host},
		{"past the ceiling", 500_001, nil, Worker},
		{"after a compaction far below", 300_000, far, Host},
		{"50,000 rule: next one moves to the ceiling", 300_000, near, None},
		{"50,000 rule: below the ceiling", 499_999, near, None},
		{"50,000 rule: at the ceiling", 500_000, near, Host},
		{"50,000 rule: past the ceiling", 500_001, near, Worker},
		{"50,001 below is outside the rule", 300_000, justOut, Host},
	}
	for _, c := range cases {
		if got := tiers.Decide(c.tokens, c.last); got != c.want {
			t.Errorf("%s: Decide(%d) = %v, want %v", c.name, c.tokens, got, c.want)
		}
	}
	if got := tiers.NextAt(near); got != DefaultCeiling {
		t.Errorf("NextAt(near) = %d, want the ceiling", got)
	}
	if got := tiers.NextAt(nil); got != DefaultThreshold {
		t.Errorf("NextAt(nil) = %d, want the threshold", got)
	}
}

func TestBudget(t *testing.T) {
	var b Budget
	for i := 0; i < MaxHostCompactions; i++ {
		if !b.TakeRequest() {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if b.TakeRequest() {
		t.Fatalf("request %d granted: the budget is %d", MaxHostCompactions+1, MaxHostCompactions)
	}
	for i := 0; i < MaxReports; i++ {
		if !b.TakeReport() {
			t.Fatalf("report %d refused", i+1)
		}
	}
	if b.TakeReport() {
		t.Fatalf("report %d granted: the budget is %d", MaxReports+1, MaxReports)
	}
}

func TestTokensPrefersUsage(t *testing.T) {
	img := json.RawMessage(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + strings.Repeat("A", 40_000) + `"}}]`)
	cases := []struct {
		name string
		c    Context
		want int
	}{
		{"estimate only", Context{Summary: "12345678", Messages: []Entry{{Type: TypeUser, Content: json.RawMessage(`"abcdefg"`)}}}, 2 + 3},
		{"usage then an estimate", Context{Messages: []Entry{
			{Type: TypeUser, Content: json.RawMessage(`"x"`)},
			{Type: TypeAssistant, Content: json.RawMessage(`[]`), Usage: &Usage{InputTokens: 1000, OutputTokens: 50, CacheReadInputTokens: 7, CacheCreationInputTokens: 3}},
			{Type: TypeUser, Content: json.RawMessage(`"abcd"`)},
		}}, 1060 + 2},
		{"usage of a kept message is ignored", Context{Summary: "s", Kept: 2, Messages: []Entry{
			{Type: TypeUser, Content: json.RawMessage(`"x"`)},
			{Type: TypeAssistant, Content: json.RawMessage(`[]`), Usage: &Usage{InputTokens: 400_000}},
		}}, 1 + 1 + 0}, // an empty block list estimates 0
		{"an image counts as ImageTokens", Context{Messages: []Entry{{Type: TypeUser, Content: img}}}, ImageTokens},
	}
	for _, c := range cases {
		if got := c.c.Tokens(); got != c.want {
			t.Errorf("%s: Tokens = %d, want %d", c.name, got, c.want)
		}
	}
}

func validRequest() *CompactRequest {
	prev := "earlier"
	return &CompactRequest{
		Reason: ReasonThreshold, TokensBefore: 310_000, FirstKeptEntryID: "k1",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
		KeptMessages:        []json.RawMessage{json.RawMessage(`{"role":"assistant","content":[]}`)},
		PreviousSummary:     &prev, ReadFiles: []string{"a.txt"}, ModifiedFiles: []string{},
	}
}

func TestCompactRequestRoundTrip(t *testing.T) {
	body, err := json.Marshal(validRequest())
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseCompactRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if r.FirstKeptEntryID != "k1" || *r.PreviousSummary != "earlier" || r.TokensBefore != 310_000 {
		t.Fatalf("round trip lost fields: %+v", r)
	}
	for _, k := range []string{`"reason"`, `"tokensBefore"`, `"firstKeptEntryId"`, `"isSplitTurn"`, `"messagesToSummarize"`, `"turnPrefixMessages"`, `"keptMessages"`, `"previousSummary"`, `"readFiles"`, `"modifiedFiles"`} {
		if !strings.Contains(string(body), k) {
			t.Errorf("request JSON lacks %s", k)
		}
	}
	min, err := ParseCompactRequest([]byte(`{"reason":"manual","tokensBefore":0,"firstKeptEntryId":"","messagesToSummarize":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if enc, _ := json.Marshal(min); strings.Contains(string(enc), "null") {
		t.Fatalf("absent or null lists reach the compactor as null: %s", enc)
	}
	bad := []string{
		`{"reason":"bored","tokensBefore":1,"firstKeptEntryId":"k","isSplitTurn":false,"messagesToSummarize":[],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`,
		`{"reason":"threshold","tokensBefore":-1,"firstKeptEntryId":"k","isSplitTurn":false,"messagesToSummarize":[],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`,
		`{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","isSplitTurn":false,"messagesToSummarize":["text"],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`,
		`{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","extra":1}`,
		`{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","readFiles":[""]}`,
		`[]`, ``, `{"reason":"threshold"} {}`,
	}
	for _, b := range bad {
		if _, err := ParseCompactRequest([]byte(b)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseCompactRequest(%.60s) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestParseCompaction(t *testing.T) {
	req := validRequest()
	ok := `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"estimatedTokensAfter":9000,"details":{"engine":"spoofed","x":1}}`
	c, err := ParseCompaction([]byte(ok), req)
	if err != nil || c == nil || c.Summary != "S" || *c.EstimatedTokensAfter != 9000 {
		t.Fatalf("ParseCompaction(valid) = %+v, %v", c, err)
	}
	for _, undefined := range []string{"", "  \n", "null", " null\n"} {
		if c, err := ParseCompaction([]byte(undefined), req); c != nil || err != nil {
			t.Errorf("ParseCompaction(%q) = %v, %v; want undefined (nil, nil)", undefined, c, err)
		}
	}
	shapes := map[string]string{
		"not an object":          `"a summary"`,
		"array":                  `[]`,
		"empty summary":          `{"summary":"","firstKeptEntryId":"k1","tokensBefore":310000}`,
		"other first kept":       `{"summary":"S","firstKeptEntryId":"k0","tokensBefore":310000}`,
		"other tokensBefore":     `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":1}`,
		"unknown field":          `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"x":1}`,
		"details not an object":  `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"details":[]}`,
		"negative estimate":      `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"estimatedTokensAfter":-1}`,
		"trailing data":          `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000} x`,
		"invalid utf-8":          "{\"summary\":\"\xff\",\"firstKeptEntryId\":\"k1\",\"tokensBefore\":310000}",
		"summary over its bound": `{"summary":"` + strings.Repeat("s", MaxSummaryBytes+1) + `","firstKeptEntryId":"k1","tokensBefore":310000}`,
		"details over":           `{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"details":{"x":"` + strings.Repeat("d", MaxDetailsBytes) + `"}}`,
		"truncated":              `{"summary":"S","firstKeptEn`,
	}
	for name, a := range shapes {
		if c, err := ParseCompaction([]byte(a), req); err == nil {
			t.Errorf("%s: ParseCompaction accepted %+v", name, c)
		}
	}
}

func TestParseReport(t *testing.T) {
	good := `{"event":"compacted","trigger":"ceiling","engine":"worker","tokensBefore":510000,"tokensAfter":20000,"contextAfter":31000,"nextCompactionAt":300000,"fallback":"timeout"}`
	r, err := ParseReport([]byte(good))
	if err != nil || r.Trigger != TriggerCeiling || r.Fallback != FallbackTimeout {
		t.Fatalf("ParseReport = %+v, %v", r, err)
	}
	for _, b := range []string{
		strings.Replace(good, `"worker"`, `"a b"`, 1),
		strings.Replace(good, `"ceiling"`, `"x"`, 1),
		strings.Replace(good, `"compacted"`, `"done"`, 1),
		strings.Replace(good, `510000`, `-1`, 1),
		strings.Replace(good, `"timeout"`, `"`+strings.Repeat("x", 65)+`"`, 1),
		strings.Replace(good, `}`, `,"summary":"leak"}`, 1),
	} {
		if _, err := ParseReport([]byte(b)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseReport(%.80s) = %v, want ErrInvalid", b, err)
		}
	}
}
