// Package grafana holds the Grafana dashboard the .deb ships
// (/usr/share/roundtable-sandbox/grafana/); its test keeps every metric and
// label the dashboard queries true to the metrics the host registers.
package grafana

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// exposed is what GET /metrics can show: metric name to its label names.
type exposed map[string]map[string]bool

// codeMetrics parses every non-test Go file under root/pkg for prometheus
// Opts literals (NewCounterVec(prometheus.CounterOpts{Name: ...},
// []string{labels}) and the like): the names the host and its kinds register.
// A name it cannot read as a literal fails the test rather than be missed.
func codeMetrics(t *testing.T, root string) exposed {
	t.Helper()
	out := exposed{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			lit, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			kind := promSel(lit.Type)
			if !strings.HasSuffix(kind, "Opts") {
				return true
			}
			name := ""
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key := kv.Key.(*ast.Ident).Name; key {
				case "Name":
					bl, ok := kv.Value.(*ast.BasicLit)
					if !ok {
						t.Errorf("%s: metric name is not a string literal", fset.Position(kv.Pos()))
						return true
					}
					name, _ = strconv.Unquote(bl.Value)
				case "Namespace", "Subsystem", "ConstLabels":
					t.Errorf("%s: %s is not understood by this test: teach it", fset.Position(kv.Pos()), key)
				}
			}
			if name == "" {
				return true
			}
			labels := map[string]bool{}
			if strings.HasSuffix(promSel(call.Fun), "Vec") && len(call.Args) > 1 {
				if ls, ok := call.Args[1].(*ast.CompositeLit); ok {
					for _, e := range ls.Elts {
						if bl, ok := e.(*ast.BasicLit); ok {
							v, _ := strconv.Unquote(bl.Value)
							labels[v] = true
						}
					}
				} else {
					t.Errorf("%s: labels of %s are not a literal", fset.Position(call.Pos()), name)
				}
			}
			add(out, name, kind == "HistogramOpts" || kind == "SummaryOpts", labels)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func promSel(e ast.Expr) string {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if x, ok := s.X.(*ast.Ident); !ok || x.Name != "prometheus" {
		return ""
	}
	return s.Sel.Name
}

func add(out exposed, name string, histogram bool, labels map[string]bool) {
	out[name] = labels
	if histogram {
		out[name+"_sum"], out[name+"_count"] = labels, labels
		withLe := map[string]bool{"le": true}
		for l := range labels {
			withLe[l] = true
		}
		out[name+"_bucket"] = withLe
	}
}

// runtimeMetrics are the Go and process collectors sandbox-host serve
// registers (pkg/cli/serve.go), gathered from a registry like it.
func runtimeMetrics(t *testing.T, out exposed) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]bool{}
	}
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr   string `json:"expr"`
			Legend string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	metricRE = regexp.MustCompile(`\b(?:sandbox|process|go)_[a-z0-9_]+\b`)
	byRE     = regexp.MustCompile(`\bby \(([^)]*)\)`)
	legendRE = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
)

// Labels every series has from the scrape, whatever the code registers.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

func TestDashboardQueriesExistInTheHost(t *testing.T) {
	have := codeMetrics(t, filepath.Join("..", ".."))
	if _, ok := have["sandbox_turns_total"]; !ok || len(have) < 20 {
		t.Fatalf("parsed only %d metrics from pkg/ (no sandbox_turns_total): the parser is broken", len(have))
	}
	runtimeMetrics(t, have)
	problems := checkDashboard(t, "roundtable-sandbox.json", have)
	for _, p := range problems {
		t.Error(p)
	}
}

// checkDashboard returns every metric or label the dashboard queries that
// the host does not expose.
func checkDashboard(t *testing.T, path string, have exposed) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var problems []string
	check := func(where, expr, legend string) {
		names := metricRE.FindAllString(expr, -1)
		if len(names) == 0 {
			problems = append(problems, where+": queries no host metric: "+expr)
		}
		labels := map[string]bool{}
		for l := range scrapeLabels {
			labels[l] = true
		}
		for _, n := range names {
			ls, ok := have[n]
			if !ok {
				problems = append(problems, where+": "+n+" is not a metric the host registers")
			}
			for l := range ls {
				labels[l] = true
			}
		}
		var used []string
		for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				used = append(used, strings.TrimSpace(l))
			}
		}
		for _, m := range legendRE.FindAllStringSubmatch(legend, -1) {
			used = append(used, m[1])
		}
		for _, l := range used {
			if !labels[l] {
				problems = append(problems, where+": label "+l+" is not one of "+strings.Join(keys(labels), ", "))
			}
		}
	}
	targets := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			targets++
			check(p.Title, tg.Expr, tg.Legend)
		}
	}
	for _, v := range d.Templating.List {
		check("variable", v.Definition, "")
	}
	if targets == 0 {
		problems = append(problems, path+": no queries")
	}
	return problems
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCheckDashboardCatchesDrift: a renamed metric and an unknown label are
// reported, so the test above can fail.
func TestCheckDashboardCatchesDrift(t *testing.T) {
	have := exposed{}
	add(have, "sandbox_turns_total", false, map[string]bool{"result": true})
	add(have, "sandbox_turn_duration_seconds", true, nil)
	path := filepath.Join(t.TempDir(), "d.json")
	d := `{"panels":[{"title":"a","targets":[
		{"expr":"sum by (result) (rate(sandbox_turns_total[5m]))","legendFormat":"{{result}}"},
		{"expr":"histogram_quantile(0.5, sum by (le) (rate(sandbox_turn_duration_seconds_bucket[5m])))"},
		{"expr":"rate(sandbox_turns_renamed_total[5m])"},
		{"expr":"sum by (phase) (rate(sandbox_turns_total[5m]))","legendFormat":"{{status}}"}]}]}`
	if err := os.WriteFile(path, []byte(d), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkDashboard(t, path, have), "\n")
	for _, want := range []string{"sandbox_turns_renamed_total is not a metric", "label phase is not", "label status is not"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	if strings.Count(got, "\n") != 2 {
		t.Errorf("want exactly 3 problems, got:\n%s", got)
	}
}
