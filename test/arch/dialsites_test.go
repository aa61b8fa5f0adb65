package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dialAPIs are the names that open (or configure the opening of) an outbound
// connection or a DNS lookup: the standard library's, the raw connect(2)
// wrappers, and the library types that fall back to http.DefaultClient or
// http.DefaultTransport (the environment's proxy included) when not given
// one of ours.
var dialAPIs = map[string][]string{
	"net": {"Dial", "DialTimeout", "DialTCP", "DialUDP", "DialIP", "DialUnix", "Dialer", "Resolver", "DefaultResolver",
		"LookupAddr", "LookupCNAME", "LookupHost", "LookupIP", "LookupMX", "LookupNS", "LookupPort", "LookupSRV", "LookupTXT",
		"ResolveIPAddr", "ResolveTCPAddr", "ResolveUDPAddr"},
	"net/http":              {"Transport", "DefaultTransport", "Client", "DefaultClient", "Get", "Post", "Head", "PostForm"},
	"net/http/httputil":     {"ReverseProxy", "NewSingleHostReverseProxy"},
	"crypto/tls":            {"Dial", "DialWithDialer", "Dialer"},
	"net/smtp":              {"Dial", "SendMail"},
	"net/rpc":               {"Dial", "DialHTTP", "DialHTTPPath"},
	"syscall":               {"Connect"},
	"golang.org/x/sys/unix": {"Connect"},
	// A nil HTTPClient in these is http.DefaultClient.
	"github.com/modelcontextprotocol/go-sdk/mcp": {"StreamableClientTransport", "SSEClientTransport"},
}

// dialSites is every reviewed place outside tests that names one of
// dialAPIs, with why it may dial without safefetch. Every destination a guest
// can choose goes through safefetch.Dialer; a new site fails this test until
// it is reviewed and listed here.
var dialSites = map[string]string{
	"pkg/safefetch/dialer.go":           "the vetted dialer itself: resolves once, vets, pins, re-checks at the socket",
	"pkg/safefetch/fetch.go":            "the fetcher's per-hop transport, whose only dial functions are the pinned ones",
	"pkg/broker/broker.go":              "the model and http-tool upstreams: fixed operator-configured URLs, never guest-chosen",
	"pkg/broker/envelope/envelope.go":   "the broker's upstream client (model, http tools, http compactor): fixed operator-configured URLs, never guest-chosen; no redirects",
	"pkg/broker/richroute/anthropic.go": "the rich model route: the profile's fixed operator-configured Anthropic URL (policy.Rich.URL), never guest-chosen; no redirects",
	"pkg/mcp/transport.go":              "MCP upstreams: fixed operator-configured URLs, never guest-chosen",
	"pkg/mcp/mcp.go":                    "holds the MCP transport's client (built in transport.go)",
	"pkg/mcp/session.go":                "the SDK's streamable transport, always given the guarded client built in transport.go (a nil HTTPClient would be http.DefaultClient)",
	"pkg/broker/hosttool/hosttool.go":   "the http tool posts to its fixed operator URL with the broker's upstream client",
	"pkg/client/client.go":              "the host API client: a Unix socket",
	"pkg/worker/broker.go":              "the worker's broker client: the turn's Unix socket (the container has no network)",
	"pkg/rich/broker.go":                "the rich worker's broker client: its channel broker's Unix socket (the container has no network)",
	"pkg/reaper/hostturns.go":           "the reaper asking the host: its Unix socket",
	"pkg/broker/grantctl/grantctl.go":   "the host's grant control path to a session broker: that session's Unix broker socket",
	"pkg/richsession/control.go":        "the host's control path to a rich channel broker: the session's Unix broker socket in runRoot",
	"pkg/egress/proxy.go":               "the proxy route's transport for absolute-form requests: its only dial function is Proxy.dial (safefetch.Dialer), TLS dial refused",
	"pkg/egress/bridge/bridge.go":       "the in-container bridge: only the turn's Unix broker socket (the container has no network)",
	"pkg/runmcp/serve.go":               "probing the operator's --http unix: socket path for a live server before replacing a stale socket",
}

// TestDialSites walks every non-test Go file under pkg/ and cmd/ and fails on
// a dial site that is not in dialSites (and on a listed file that no longer
// has one, so the list stays true).
func TestDialSites(t *testing.T) {
	root := moduleRoot(t)
	found := map[string][]string{}
	fset := token.NewFileSet()
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if uses := dialUses(f); len(uses) > 0 {
				found[filepath.ToSlash(rel)] = uses
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for file, uses := range found {
		if _, ok := dialSites[file]; !ok {
			t.Errorf("%s uses %s: a new dial site. A destination a guest can influence must go through safefetch.Dialer; once reviewed, list the file in dialSites (test/arch/dialsites_test.go) with the reason", file, strings.Join(uses, ", "))
		}
	}
	for file := range dialSites {
		if _, ok := found[file]; !ok {
			t.Errorf("%s is listed in dialSites but has no dial site any more: remove it", file)
		}
	}
}

// dialUses lists the dialAPIs names f refers to, as "pkg.Name".
func dialUses(f *ast.File) []string {
	local := map[string]string{} // local import name -> import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if _, watched := dialAPIs[p]; !watched {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = p
	}
	var uses []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if p, ok := local[id.Name]; ok && slices.Contains(dialAPIs[p], sel.Sel.Name) {
			if u := p + "." + sel.Sel.Name; !slices.Contains(uses, u) {
				uses = append(uses, u)
			}
		}
		return true
	})
	slices.Sort(uses)
	return uses
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

func TestDialUsesSeesAliases(t *testing.T) {
	src := `package x
import (
	n "net"
	"net/http"
	"net/http/httputil"
	tl "crypto/tls"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)
var _ = n.Dialer{}
var _ = n.LookupHost
var _ = http.Get
var _ = tl.Dial
var _ = http.StatusOK
var _ = httputil.ReverseProxy{}
var _ = sdk.StreamableClientTransport{}
var _ = sdk.NewClient
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(dialUses(f), " ")
	if got != "crypto/tls.Dial github.com/modelcontextprotocol/go-sdk/mcp.StreamableClientTransport net.Dialer net.LookupHost net/http.Get net/http/httputil.ReverseProxy" {
		t.Errorf("dialUses = %q", got)
	}
}
