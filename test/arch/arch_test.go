package arch

import (
	"bufio"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layers lists every package under pkg/, lowest layer first. A package may
// import only packages of a strictly lower layer, so the graph has no cycle
// and no upward arrow. A new package gets a line here (and a row in the
// package table of docs/ARCHITECTURE.md); cmd/*, bench/, test/ and image/
// sit above every layer and are not checked.
var layers = [][]string{
	// 0: foundations, importing nothing of this module.
	{"admission", "version", "ids", "atomicfile", "protocol", "imagearchive", "strictjson", "toolschema",
		"egress/bridge", "runs/wire", "richproto", "placeholder", "runca", "delegation", "anthropic/anthropictest", "fleetnats/serve", "wsarchive",
		"fleetworkspace", "fleetconn"},
	// 1: shared vocabulary (names, the host-broker contract, the host API's
	// bodies, the memory store) and the vetted network dialer.
	{"layout", "policy", "memory", "sessions", "safefetch", "runs", "runs/supervisor", "precheck", "anthropic", "apiwire",
		"fleet", "fleet/fleettest", "broker/envelope", "sessionwire"},
	// 2: drivers and single-purpose domains (the fleet's jobs queue over
	// the fleet's handle).
	{"client", "fleetjobs", "fleetmetrics", "turnanswer", "config", "credential", "container", "toolbox", "container/testimage", "unitctl", "mcp", "worker", "workerlog",
		"broker/chat", "broker/rpc", "broker/hosttool", "broker/compactor", "egress", "standby", "precheck/runner", "rich",
		"sessionsup", "broker/grantctl"},
	// 3: the services, and the one sandbox lifecycle every kind drives.
	{"broker/richroute", "reaper", "credset", "runmcp", "sandbox", "chanstate", "peerauth", "toolset", "fleetnats"},
	// 4: what every route of the host API shares (the host's and the kinds'),
	// a turn's broker over its route packages, and the host's side of the
	// fleet.
	{"api", "broker", "fleetside", "runs/gate"},
	// 5: the contract between the host and its kinds (registration, what
	// the host hands a kind, the optional interfaces).
	{"kind"},
	// 6: the kinds, each driving the lifecycle; a kind never imports another.
	// Beside them the fakes their tests share (a kit makes a kind from
	// kind.Deps), imported by tests only.
	append([]string{"sandboxtest"}, kinds...),
	// 7: the host: API, admission, channel state, the kinds' orchestration.
	{"host"},
	// 8: command groups of a domain, registered into the root command.
	{"cli/fleetcmd", "cli/sessioncmd"},
	// 9: wiring of the host binary (the root command, Docker and D-Bus adapters).
	{"cli"},
}

// kinds are the packages of one kind of sandbox each (DESIGN.md section
// 16): each drives the lifecycle and no kind imports another.
var kinds = []string{"coderun", "precheckrun", "delegationrun", "richsession", "sealedturn", "livesession"}

// lifecycle is the package every kind shares; it imports no kind.
const lifecycle = "sandbox"

// kindViolations reports a kind importing a kind and the lifecycle
// importing a kind (the layers refuse both too; this names the rule).
func kindViolations(kinds []string, lifecycle string, graph map[string][]string) []string {
	var out []string
	isKind := map[string]bool{}
	for _, k := range kinds {
		isKind[k] = true
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		for _, imp := range graph[p] {
			switch {
			case isKind[p] && isKind[imp]:
				out = append(out, fmt.Sprintf("kind pkg/%s imports kind pkg/%s: a kind never imports another kind", p, imp))
			case p == lifecycle && isKind[imp]:
				out = append(out, fmt.Sprintf("the lifecycle pkg/%s imports kind pkg/%s: it must know no kind", p, imp))
			}
		}
	}
	return out
}

func TestKindViolationsCatchesBadGraphs(t *testing.T) {
	tests := []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"clean", map[string][]string{"life": nil, "a": {"life"}, "b": {"life"}, "host": {"a", "b", "life"}}, nil},
		{"kind imports kind", map[string][]string{"life": nil, "a": {"b"}, "b": nil}, []string{"kind pkg/a imports kind pkg/b"}},
		{"lifecycle imports kind", map[string][]string{"life": {"a"}, "a": nil, "b": nil}, []string{"the lifecycle pkg/life imports kind pkg/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kindViolations([]string{"a", "b"}, "life", tt.graph)
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("violation %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// violations checks graph (package -> imports, both as paths relative to
// pkg/, imports outside the module already left out) against the layers.
// moduleOutside lists imports of this module that are not under pkg/.
// stale lists layer entries with no package: reported, not failed, so a
// package can be given its layer before it lands.
func violations(layers [][]string, graph map[string][]string, moduleOutside map[string][]string) (out, stale []string) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			if _, dup := layer[p]; dup {
				out = append(out, fmt.Sprintf("pkg/%s is listed in two layers", p))
			}
			layer[p] = i
		}
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		lp, known := layer[p]
		if !known {
			out = append(out, fmt.Sprintf("pkg/%s has no layer: add it to the layers in test/arch/arch_test.go and to docs/ARCHITECTURE.md", p))
			continue
		}
		for _, imp := range graph[p] {
			li, ok := layer[imp]
			switch {
			case !ok:
				// Reported as its own package above.
			case li >= lp:
				out = append(out, fmt.Sprintf("pkg/%s (layer %d) imports pkg/%s (layer %d): only strictly lower layers may be imported", p, lp, imp, li))
			}
		}
		for _, imp := range moduleOutside[p] {
			out = append(out, fmt.Sprintf("pkg/%s imports %s, which is outside pkg/: pkg must not depend on cmd, bench, test or image", p, imp))
		}
	}
	for p := range layer {
		if _, ok := graph[p]; !ok {
			stale = append(stale, fmt.Sprintf("pkg/%s is in the layer list but does not exist", p))
		}
	}
	slices.Sort(stale)
	return out, stale
}

func TestViolationsCatchesBadGraphs(t *testing.T) {
	ls := [][]string{{"a"}, {"b"}, {"c"}}
	tests := []struct {
		name    string
		graph   map[string][]string
		outside map[string][]string
		want    []string // substrings, one per violation, in order
		stale   []string
	}{
		{"clean", map[string][]string{"a": nil, "b": {"a"}, "c": {"a", "b"}}, nil, nil, nil},
		{"upward", map[string][]string{"a": {"c"}, "b": nil, "c": nil}, nil, []string{"pkg/a (layer 0) imports pkg/c (layer 2)"}, nil},
		{"unknown packages", map[string][]string{"a": nil, "b": nil, "c": nil, "d": {"e"}, "e": nil}, nil,
			[]string{"pkg/d has no layer", "pkg/e has no layer"}, nil},
		{"cycle", map[string][]string{"a": nil, "b": {"c"}, "c": {"b"}}, nil, []string{"pkg/b (layer 1) imports pkg/c (layer 2)"}, nil},
		{"outside pkg", map[string][]string{"a": nil, "b": nil, "c": nil}, map[string][]string{"b": {"m/test/e2e"}}, []string{"pkg/b imports m/test/e2e"}, nil},
		{"stale entry", map[string][]string{"a": nil, "b": nil}, nil, nil, []string{"pkg/c is in the layer list but does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, stale := violations(ls, tt.graph, tt.outside)
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"violation", got, tt.want}, {"stale entry", stale, tt.stale}} {
				if len(c.got) != len(c.want) {
					t.Fatalf("got %d %ss %q, want %d like %q", len(c.got), c.what, c.got, len(c.want), c.want)
				}
				for i := range c.got {
					if !strings.Contains(c.got[i], c.want[i]) {
						t.Errorf("%s %d = %q, want it to contain %q", c.what, i, c.got[i], c.want[i])
					}
				}
			}
		})
	}
	// Same-layer imports are refused too.
	if got, _ := violations([][]string{{"a", "b"}}, map[string][]string{"a": {"b"}, "b": nil}, nil); len(got) != 1 {
		t.Errorf("same-layer import: got %q, want one violation", got)
	}
}

// TestPkgImportLayers reads the non-test imports of every package under pkg/
// (go/build, so build constraints apply as for this platform) and checks them.
func TestPkgImportLayers(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	module := modulePath(t, filepath.Join(root, "go.mod"))
	pkgRoot := filepath.Join(root, "pkg")
	graph := map[string][]string{}
	outside := map[string][]string{}
	err = filepath.WalkDir(pkgRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(pkgRoot, path)
		rel = filepath.ToSlash(rel)
		graph[rel] = nil
		for _, imp := range bp.Imports {
			if sub, ok := strings.CutPrefix(imp, module+"/pkg/"); ok {
				graph[rel] = append(graph[rel], sub)
			} else if imp == module || strings.HasPrefix(imp, module+"/") {
				outside[rel] = append(outside[rel], imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(graph) < 10 {
		t.Fatalf("found only %d packages under %s: the walk is broken", len(graph), pkgRoot)
	}
	for _, v := range kindViolations(kinds, lifecycle, graph) {
		t.Error(v)
	}
	bad, stale := violations(layers, graph, outside)
	for _, v := range bad {
		t.Error(v)
	}
	for _, v := range stale {
		t.Log(v)
	}
}

func modulePath(t *testing.T, goMod string) string {
	t.Helper()
	f, err := os.Open(goMod)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatalf("%s has no module line", goMod)
	return ""
}
