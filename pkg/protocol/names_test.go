package protocol

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestMCPToolNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"get-sum", true},
		{"get-tiny-image", true},
		{"trigger-long-running-operation", true},
		{"files.read", true},
		{"A", true},
		{"_", true},
		{"...", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
		{"a\x00", false},
	} {
		if got := ValidMCPToolName(tt.name); got != tt.ok {
			t.Errorf("ValidMCPToolName(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

func TestMCPFunctionName(t *testing.T) {
	long := strings.Repeat("a", 58) // mcp_0_ + 58 = 64: fits
	for _, tt := range []struct {
		index int
		tool  string
		want  string
	}{
		{0, "search", "mcp_0_search"},
		{1, "get-sum", "mcp_1_get-sum"},
		{15, "Get_Tiny-Image", "mcp_15_Get_Tiny-Image"},
		{0, long, "mcp_0_" + long},
		// One more character, or a longer prefix, no longer fits: hashed and cut.
		{0, long + "a", "mcp_0_" + strings.Repeat("a", 49) + "_" + hash8(long+"a")},
		{10, long, "mcp_10_" + strings.Repeat("a", 48) + "_" + hash8(long)},
		// '.' is not allowed in function names: sanitized and hashed.
		{0, "a.b", "mcp_0_a_b_" + hash8("a.b")},
		{0, "files.read", "mcp_0_files_read_" + hash8("files.read")},
		{0, "files.read", "mcp_0_files_read_601e4eb6"}, // as docs/operating.md (MCP servers) shows it
		// A plain name that ends like a hashed one is hashed too.
		{0, "a_b_" + hash8("a.b"), "mcp_0_a_b_" + hash8("a.b") + "_" + hash8("a_b_"+hash8("a.b"))},
		{0, "x_0123abcd", "mcp_0_x_0123abcd_" + hash8("x_0123abcd")},
		{0, "x_0123ABCD", "mcp_0_x_0123ABCD"}, // not lowercase hex: plain
		{0, "a_b", "mcp_0_a_b"},
		{3, strings.Repeat(".", 128), "mcp_3_" + strings.Repeat("_", 49) + "_" + hash8(strings.Repeat(".", 128))},
	} {
		got := MCPFunctionName(tt.index, tt.tool)
		if got != tt.want {
			t.Errorf("MCPFunctionName(%d, %q) = %q, want %q", tt.index, tt.tool, got, tt.want)
		}
		if !ValidFunctionName(got) || len(got) > MaxFunctionChars {
			t.Errorf("MCPFunctionName(%d, %q) = %q is not a valid function name", tt.index, tt.tool, got)
		}
	}
	// The cases the field trial met: a.b and a_b, and two long names that
	// share their first 64 characters, all on one server.
	names := []string{"a.b", "a_b", "a-b", "a_b_" + hash8("a.b"), strings.Repeat("n", 100) + "1", strings.Repeat("n", 100) + "2"}
	if a, b, clash := MCPFunctionNameClash(0, names); clash {
		t.Errorf("clash between %q and %q", a, b)
	}
	fns := map[string]bool{}
	for _, n := range names {
		fns[MCPFunctionName(0, n)] = true
	}
	if len(fns) != len(names) {
		t.Errorf("function names %v are not distinct", fns)
	}
}

func hash8(s string) string {
	// Recomputed independently of MCPFunctionName's code path.
	return fmt.Sprintf("%x", sha256Sum(s))[:8]
}

// TestMCPFunctionNameClashFound: a clash the hash cannot rule out (forged
// here by calling the check with names whose function names agree) is found.
func TestMCPFunctionNameClashFound(t *testing.T) {
	if raceEnabled {
		// One goroutine, about 2^16 names hashed: several seconds under -race.
		t.Skip("searches about 2^16 names for a collision: runs without -race in make unit's second pass")
	}
	if a, b, clash := MCPFunctionNameClash(0, []string{"x", "y", "x"}); clash {
		t.Errorf("a repeated name is a duplicate, not a clash: %q %q", a, b)
	}
	// Find two names whose hashed function names collide by brute force over
	// a space small enough to search: with 8 hex digits this needs ~2^16
	// names of a shared 49-character prefix (birthday bound).
	prefix := strings.Repeat("p", 60)
	seen := map[string]string{}
	var names []string
	for i := 0; ; i++ {
		n := fmt.Sprintf("%s%d", prefix, i)
		fn := MCPFunctionName(0, n)
		if other, ok := seen[fn]; ok {
			names = []string{other, n}
			break
		}
		seen[fn] = n
		if i > 1<<20 {
			t.Skip("no collision found in 2^20 names")
		}
	}
	if a, b, clash := MCPFunctionNameClash(0, names); !clash || a != names[0] || b != names[1] {
		t.Errorf("MCPFunctionNameClash(%q) = %q, %q, %v; want the clash", names, a, b, clash)
	}
	turn := Turn{Text: "t", Model: "m", TimeZone: "UTC", MCP: []MCPServerSpec{{Server: "s", Tools: []ToolSpec{
		{Name: names[0], Parameters: []byte(`{}`)}, {Name: names[1], Parameters: []byte(`{}`)},
	}}}}
	if err := turn.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tools %q and %q get the same function name", names[0], names[1])) {
		t.Errorf("Validate with clashing tools = %v, want refusal", err)
	}
}

// TestMCPFunctionNameProperties: over many random valid tool names (biased to
// the characters and lengths where the scheme has edges), every function name
// is valid, deterministic, and distinct tools on one server never share one;
// names of different servers never meet.
func TestMCPFunctionNameProperties(t *testing.T) {
	if raceEnabled {
		// One goroutine, 100,000 names: most of the package's 9.6 s under -race.
		t.Skip("checks 100,000 random names: runs without -race in make unit's second pass")
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab._-_.Z09f"
	byFn := map[string]string{}
	for i := 0; i < 100_000; i++ {
		n := 1 + r.IntN(70)
		if r.IntN(10) == 0 {
			n = 1 + r.IntN(128)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		tool := string(b)
		if r.IntN(20) == 0 { // end like a hashed name now and then
			tool = tool[:max(0, len(tool)-9)] + "_" + hash8(tool)
		}
		checkFunctionName(t, byFn, r.IntN(MaxMCPServers), tool)
	}
}

// FuzzMCPFunctionName checks the same properties on fuzzer-chosen names: a
// valid name's function name is valid and stable, and two different names
// (on any two servers) never share a function name unless both are hashed
// names of one server whose hashes collide, which MCPFunctionNameClash reports.
func FuzzMCPFunctionName(f *testing.F) {
	f.Add(uint8(0), "get-sum", uint8(0), "get_sum")
	f.Add(uint8(0), "a.b", uint8(0), "a_b")
	f.Add(uint8(1), "2_x", uint8(12), "x")
	f.Add(uint8(0), strings.Repeat("n", 90)+"1", uint8(0), strings.Repeat("n", 90)+"2")
	f.Fuzz(func(t *testing.T, i uint8, a string, j uint8, b string) {
		ia, ib := int(i)%MaxMCPServers, int(j)%MaxMCPServers
		if !ValidMCPToolName(a) || !ValidMCPToolName(b) {
			return
		}
		fa, fb := MCPFunctionName(ia, a), MCPFunctionName(ib, b)
		for _, fn := range []string{fa, fb} {
			if !ValidFunctionName(fn) || len(fn) > MaxFunctionChars {
				t.Fatalf("invalid function name %q", fn)
			}
		}
		if fa != MCPFunctionName(ia, a) {
			t.Fatal("not deterministic")
		}
		if fa == fb && (ia != ib || a != b) {
			// Only a 32-bit hash collision of two hashed names on one server
			// can get here, and then the validators must refuse the pair.
			_, _, clash := MCPFunctionNameClash(ia, []string{a, b})
			if ia != ib || !strings.HasSuffix(fa, "_"+hash8(a)) || !strings.HasSuffix(fb, "_"+hash8(b)) || !clash {
				t.Fatalf("(%d, %q) and (%d, %q) share %q", ia, a, ib, b, fa)
			}
		}
	})
}

func checkFunctionName(t *testing.T, byFn map[string]string, index int, tool string) {
	t.Helper()
	if !ValidMCPToolName(tool) {
		t.Fatalf("generator made an invalid tool name %q", tool)
	}
	fn := MCPFunctionName(index, tool)
	if !ValidFunctionName(fn) || len(fn) > MaxFunctionChars {
		t.Fatalf("MCPFunctionName(%d, %q) = %q: invalid", index, tool, fn)
	}
	if again := MCPFunctionName(index, tool); again != fn {
		t.Fatalf("MCPFunctionName(%d, %q) = %q, then %q", index, tool, fn, again)
	}
	key := fmt.Sprintf("%d/%s", index, tool)
	if other, ok := byFn[fn]; ok && other != key {
		t.Fatalf("%s and %s share %q", other, key, fn)
	}
	byFn[fn] = key
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }
