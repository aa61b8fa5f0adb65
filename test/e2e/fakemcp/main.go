// Command fakemcp is a small MCP server for the end-to-end tests: the
// official Go SDK's Streamable HTTP handler (stateless, JSON answers) serving
// one tool, "lookup", that answers "result for <q>"; and POST /whoami, a
// plain JSON endpoint standing in for an http host tool.
//
// With -api-port-file it also serves, over HTTPS with a certificate of its
// own, a demo API that requires a bearer token it makes at start (api.go).
//
// With -web-port-file it also serves, on a second loopback port of its own,
// a small HTML page at every path: `make demo`'s stand-in for the web (a
// delegated job's fetch, an approved network run), kept off the MCP port so
// that allowing it in egress.allow allows nothing else.
//
// Guarantee: every HTTP request it receives (method, path, all headers
// including Authorization, body, time) is appended as one JSON line to the
// -record file before the SDK sees it, so tests can assert what the broker
// sent and that a refused call never arrived.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type lookupIn struct {
	Q string `json:"q"`
}

type record struct {
	Time   time.Time           `json:"time"`
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Header map[string][]string `json:"header"`
	Body   json.RawMessage     `json:"body,omitempty"`
}

func main() {
	listenAddr := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback)")
	portFile := flag.String("port-file", "", "write the bound port here once listening")
	recPath := flag.String("record", "", "append one JSON line per request here")
	webListen := flag.String("web-listen", "127.0.0.1:0", "address of the web page stand-in (with -web-port-file)")
	webPortFile := flag.String("web-port-file", "", "also serve the web page stand-in; write its port here")
	apiListen := flag.String("api-listen", "127.0.0.1:0", "address of the HTTPS demo API stand-in (with -api-port-file)")
	apiPortFile := flag.String("api-port-file", "", "also serve the HTTPS demo API stand-in; write its port here")
	apiCertFile := flag.String("api-cert-file", "", "with -api-port-file: write the API's certificate (PEM) here")
	apiTokenFile := flag.String("api-token-file", "", "with -api-port-file: write the bearer token it requires here")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	server := mcp.NewServer(&mcp.Implementation{Name: "fakemcp", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "lookup", Description: "Look up a term"},
		func(_ context.Context, _ *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "result for " + in.Q}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})

	var mu sync.Mutex
	var rec *os.File
	if *recPath != "" {
		f, err := os.OpenFile(*recPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Error("open record", "err", err)
			os.Exit(2)
		}
		rec = f
	}
	recording := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if rec != nil {
			entry := record{Time: time.Now().UTC(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
			if json.Valid(body) {
				entry.Body = body
			}
			line, _ := json.Marshal(entry)
			mu.Lock()
			_, _ = rec.Write(append(line, '\n'))
			mu.Unlock()
		}
		// The demo's journal shows each call and whether it carried a
		// bearer credential (the broker inserts it), never the credential.
		log.Info("MCP server request", "method", r.Method, "path", r.URL.Path,
			"bearer_credential", strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "))
		if r.URL.Path == "/whoami" {
			// A plain JSON endpoint for the broker's http host tool: the
			// identity headers the broker set are in the record above.
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"seen":true}`))
			return
		}
		handler.ServeHTTP(w, r)
	})

	if *webPortFile != "" {
		wln := listen(log, *webListen, *webPortFile)
		log.Info("web page stand-in listening", "addr", wln.Addr().String())
		web := &http.Server{Handler: webPage(log), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			log.Error("serve web page stand-in", "err", web.Serve(wln))
			os.Exit(1)
		}()
	}
	if *apiPortFile != "" {
		if *apiCertFile == "" || *apiTokenFile == "" {
			log.Error("-api-port-file needs -api-cert-file and -api-token-file")
			os.Exit(2)
		}
		serveAPI(log, *apiListen, *apiPortFile, *apiCertFile, *apiTokenFile)
	}
	ln := listen(log, *listenAddr, *portFile)
	log.Info("fake MCP server listening", "addr", ln.Addr().String())
	srv := &http.Server{Handler: recording, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// listen binds addr and writes its port to portFile (when set), or exits.
func listen(log *slog.Logger, addr, portFile string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("listen", "addr", addr, "err", err)
		os.Exit(2)
	}
	if portFile != "" {
		port := ln.Addr().(*net.TCPAddr).Port
		if err := os.WriteFile(portFile+".tmp", []byte(fmt.Sprint(port)), 0o644); err == nil {
			err = os.Rename(portFile+".tmp", portFile)
		}
		if err != nil {
			log.Error("write port file", "err", err)
			os.Exit(2)
		}
	}
	return ln
}

// demoPage is the web page stand-in's answer.
const demoPage = `<!doctype html><html><head><title>Roundtable demo notes</title></head>
<body><h1>Roundtable demo notes</h1><p>The offline demo's stand-in for a web page, served on loopback by test/e2e/fakemcp: the meeting moved to Thursday 10:00.</p></body></html>`

// webPage serves demoPage at every path (GET and HEAD) and logs each
// request, so the demo's journal shows that the fetch arrived.
func webPage(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		log.Info("web page served", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "user_agent", r.UserAgent())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, demoPage)
	})
}
