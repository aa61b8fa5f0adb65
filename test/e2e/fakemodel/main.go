// Command fakemodel is a scripted, offline stand-in for an OpenAI-compatible
// Chat Completions endpoint, used by the end-to-end tests and `make demo`.
// It is not a language model: every answer comes from a script or from the
// fixed demo rules below.
//
// Guarantee: it answers only POST /v1/chat/completions on the address given,
// records every request it receives (method, path, all headers including
// Authorization, body, arrival and answer times) as one JSON line per request
// in the -record file, and never makes an outbound connection.
//
// Script mode (-script file.json) is stateless so concurrent turns are safe:
// a rule applies when the last user message contains its "match" string; the
// reply used is replies[n] where n counts the assistant messages after that
// last user message (the model calls already made in this turn); the last
// reply repeats. In reply text, {{user}} is the last user message and
// {{tool}} the content of the last tool message; in tool arguments,
// {{user}} and {{lastline}} (the last line of the last user message).
//
// A reply with "hold": NAME is answered only after POST /release/NAME (or
// when its request is cancelled, or after holdLimit): a test holds a turn
// open for exactly as long as it inspects the live container, instead of
// guessing a delay. A release that comes first is kept, so the order of
// the two never matters. "{{user}}" in NAME is the last user message, so
// each turn with a fresh marker has a gate of its own.
//
// Demo mode (-demo) answers sensibly without a script: "remember X" stores X
// in channel memory through memory_set, "what do you remember" reads it with
// memory_get, a message holding a URL when the host_fetch tool is offered (a
// delegated research turn) fetches it with host_fetch and reports what came
// back, anything else is echoed back. In demo mode it also answers POST
// /v1/messages as a rich channel's Anthropic upstream: a real-shaped
// Messages stream (pkg/anthropic/anthropictest's events) that echoes the
// guest's message and quotes the first one the conversation's history holds,
// so a second turn shows the session kept the first.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
)

// ToolCall is a scripted function call.
type ToolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Reply is one scripted answer.
type Reply struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	DelayMs   int        `json:"delayMs,omitempty"`
	Status    int        `json:"status,omitempty"` // non-200 answers {"error":...}
	Raw       string     `json:"raw,omitempty"`    // answered verbatim when set
	Hold      string     `json:"hold,omitempty"`   // answer after POST /release/<hold>
}

// holdLimit bounds a hold nobody releases, so a failed test cannot leave
// a turn (and its container) waiting forever.
const holdLimit = 2 * time.Minute

// gates are the named holds: each a channel closed by its release.
type gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (g *gates) get(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]chan struct{}{}
	}
	c, ok := g.m[name]
	if !ok {
		c = make(chan struct{})
		g.m[name] = c
	}
	return c
}

// release opens the gate NAME (once; a second release is a no-op).
func (g *gates) release(name string) {
	c := g.get(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// Rule picks replies by a substring of the last user message.
type Rule struct {
	Match   string  `json:"match"`
	Replies []Reply `json:"replies"`
}

// Script is the -script file.
type Script struct {
	Rules []Rule `json:"rules"`
}

// Record is one recorded request.
type Record struct {
	Seq      int64               `json:"seq"`
	Start    time.Time           `json:"start"`
	End      time.Time           `json:"end"`
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	RawQuery string              `json:"rawQuery,omitempty"`
	Header   map[string][]string `json:"header"`
	Body     json.RawMessage     `json:"body,omitempty"`
	BodyText string              `json:"bodyText,omitempty"` // when not JSON
	Status   int                 `json:"status"`
}

type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type request struct {
	Model    string    `json:"model"`
	Messages []message `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// offers tells whether the request offers the tool name.
func (r request) offers(name string) bool {
	for _, t := range r.Tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

type server struct {
	script *Script
	demo   bool
	rec    *os.File
	mu     sync.Mutex
	seq    atomic.Int64
	calls  atomic.Int64
	gates  gates
	held   chan<- string // tests: told each hold's name before it waits
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback)")
	portFile := flag.String("port-file", "", "write the bound port here once listening")
	scriptPath := flag.String("script", "", "JSON script of rules (see package doc)")
	demo := flag.Bool("demo", false, "answer with the fixed offline demo rules")
	record := flag.String("record", "", "append one JSON line per request here")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	s := &server{demo: *demo}
	if *scriptPath != "" {
		data, err := os.ReadFile(*scriptPath)
		if err != nil {
			log.Error("read script", "err", err)
			os.Exit(2)
		}
		s.script = &Script{}
		if err := json.Unmarshal(data, s.script); err != nil {
			log.Error("parse script", "err", err)
			os.Exit(2)
		}
	}
	if s.script == nil && !s.demo {
		log.Error("need -script or -demo")
		os.Exit(2)
	}
	if *record != "" {
		f, err := os.OpenFile(*record, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Error("open record", "err", err)
			os.Exit(2)
		}
		s.rec = f
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(2)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if *portFile != "" {
		if err := os.WriteFile(*portFile+".tmp", []byte(fmt.Sprint(port)), 0o644); err == nil {
			err = os.Rename(*portFile+".tmp", *portFile)
		}
		if err != nil {
			log.Error("write port file", "err", err)
			os.Exit(2)
		}
	}
	log.Info("fake model listening", "addr", ln.Addr().String(), "demo", s.demo)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := strings.CutPrefix(r.URL.Path, "/release/"); ok && r.Method == http.MethodPost && name != "" {
		s.gates.release(name)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	rec := Record{Seq: s.seq.Add(1), Start: time.Now().UTC(), Method: r.Method, Path: r.URL.Path,
		RawQuery: r.URL.RawQuery, Header: r.Header.Clone()}
	rec.Header["Host"] = []string{r.Host}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if json.Valid(body) {
		rec.Body = body
	} else {
		rec.BodyText = string(body)
	}
	if s.demo && r.Method == http.MethodPost && r.URL.Path == "/v1/messages" {
		rec.Status = s.messages(w, body)
		rec.End = time.Now().UTC()
		s.write(rec)
		return
	}
	status, out, delay, hold := s.answer(r, body)
	if hold != "" {
		if s.held != nil {
			s.held <- hold
		}
		select {
		case <-s.gates.get(hold):
		case <-r.Context().Done():
		case <-time.After(holdLimit):
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	rec.End = time.Now().UTC()
	rec.Status = status
	s.write(rec)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

func (s *server) write(rec Record) {
	if s.rec == nil {
		return
	}
	line, _ := json.Marshal(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.rec.Write(append(line, '\n'))
}

func errBody(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg, "type": "fake"}})
	return b
}

func (s *server) answer(r *http.Request, body []byte) (int, []byte, time.Duration, string) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		return http.StatusNotFound, errBody("not found"), 0, ""
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, errBody("bad json"), 0, ""
	}
	user, tool, step := turnState(req.Messages)
	var rep Reply
	if s.demo {
		rep = demoReply(user, tool, step, req.offers("host_fetch"))
	} else {
		var ok bool
		rep, ok = s.script.pick(user, step)
		if !ok {
			rep = Reply{Text: "fakemodel: no rule matches"}
		}
	}
	delay := time.Duration(rep.DelayMs) * time.Millisecond
	rep.Hold = strings.ReplaceAll(rep.Hold, "{{user}}", user)
	if rep.Status != 0 && rep.Status != http.StatusOK {
		return rep.Status, errBody(rep.Text), delay, rep.Hold
	}
	if rep.Raw != "" {
		return http.StatusOK, []byte(rep.Raw), delay, rep.Hold
	}
	return http.StatusOK, s.completion(req.Model, rep, user, tool), delay, rep.Hold
}

func (sc *Script) pick(user string, step int) (Reply, bool) {
	for _, rule := range sc.Rules {
		if strings.Contains(user, rule.Match) && len(rule.Replies) > 0 {
			if step >= len(rule.Replies) {
				step = len(rule.Replies) - 1
			}
			return rule.Replies[step], true
		}
	}
	return Reply{}, false
}

// turnState returns the last user message, the last tool message content
// after it and how many assistant messages follow it.
func turnState(msgs []message) (user, tool string, step int) {
	last := -1
	for i, m := range msgs {
		if m.Role == "user" {
			last = i
		}
	}
	if last < 0 {
		return "", "", 0
	}
	user = contentText(msgs[last].Content)
	// The worker hands the model a JSON user context; the guest's words are
	// its "message".
	var ctx struct {
		Message *string `json:"message"`
	}
	if json.Unmarshal([]byte(user), &ctx) == nil && ctx.Message != nil {
		user = *ctx.Message
	}
	for _, m := range msgs[last+1:] {
		switch m.Role {
		case "assistant":
			step++
		case "tool":
			tool = contentText(m.Content)
		}
	}
	return user, tool, step
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func (s *server) completion(model string, rep Reply, user, tool string) []byte {
	n := s.calls.Add(1)
	msg := map[string]any{"role": "assistant"}
	text := strings.NewReplacer("{{user}}", user, "{{tool}}", tool).Replace(rep.Text)
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		calls := make([]map[string]any, 0, len(rep.ToolCalls))
		for i, c := range rep.ToolCalls {
			args := string(c.Arguments)
			if args == "" {
				args = "{}"
			}
			lastLine := user[strings.LastIndex(user, "\n")+1:]
			args = strings.NewReplacer("{{user}}", jsonInner(user), "{{lastline}}", jsonInner(lastLine)).Replace(args)
			calls = append(calls, map[string]any{
				"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": args},
			})
		}
		msg["tool_calls"] = calls
		msg["content"] = nil
		finish = "tool_calls"
	} else {
		msg["content"] = text
	}
	out, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake-%d", n), "object": "chat.completion", "created": time.Now().Unix(),
		"model":   model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
	return out
}

// jsonInner is s encoded as the inside of a JSON string literal.
func jsonInner(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1]) // exactly the enclosing quotes
}

var (
	urlRe      = regexp.MustCompile(`https?://[^\s"'<>]+`)
	rememberRe = regexp.MustCompile(`(?is)^\s*remember\s*(?:that\s*)?:?\s*(.+?)\s*$`)
	recallRe   = regexp.MustCompile(`(?i)what\s+do\s+you\s+remember`)
	forgetRe   = regexp.MustCompile(`(?i)^\s*forget\b`)
)

// demoReply is the offline demo's fixed behaviour; canFetch: the request
// offers host_fetch.
func demoReply(user, tool string, step int, canFetch bool) Reply {
	arg := func(v map[string]string) json.RawMessage { b, _ := json.Marshal(v); return b }
	switch {
	case canFetch && urlRe.MatchString(user):
		u := urlRe.FindString(user)
		if step == 0 {
			return Reply{ToolCalls: []ToolCall{{Name: "host_fetch", Arguments: arg(map[string]string{"url": u})}}}
		}
		if r := []rune(tool); len(r) > 500 {
			tool = string(r[:500]) + "..."
		}
		return Reply{Text: "Report on " + u + " (demo model): the page says " + tool}
	case rememberRe.MatchString(user):
		note := rememberRe.FindStringSubmatch(user)[1]
		if len([]rune(note)) > 2000 {
			note = string([]rune(note)[:2000])
		}
		if step == 0 {
			key := fmt.Sprintf("note-%d", time.Now().UnixNano()%1_000_000_000)
			return Reply{ToolCalls: []ToolCall{{Name: "memory_set", Arguments: arg(map[string]string{"scope": "channel", "key": key, "text": note})}}}
		}
		if strings.Contains(tool, "error") {
			return Reply{Text: "I could not store that (the memory tool said: " + tool + ")."}
		}
		return Reply{Text: "Noted. I will remember: " + note}
	case recallRe.MatchString(user):
		if step == 0 {
			return Reply{ToolCalls: []ToolCall{{Name: "memory_get", Arguments: arg(map[string]string{"scope": "channel"})}}}
		}
		return Reply{Text: "Here is what this channel's memory holds: " + tool}
	case forgetRe.MatchString(user):
		return Reply{Text: "This demo model only adds and reads notes; ask the operator to reset the channel to forget."}
	default:
		return Reply{Text: "Demo model (a local scripted stand-in, not a language model). You said: " + user}
	}
}

// messages answers POST /v1/messages with a Messages stream and returns
// the status it sent.
func (s *server) messages(w http.ResponseWriter, body []byte) int {
	var req anthropic.Request
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`))
		return http.StatusBadRequest
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	// Word by word, as a model streams.
	text := richDemoText(req.Messages)
	var pieces []string
	for i, word := range strings.SplitAfter(text, " ") {
		if i%4 == 0 {
			pieces = append(pieces, "")
		}
		pieces[len(pieces)-1] += word
	}
	for _, e := range anthropictest.TextStream(req.Model, pieces...) {
		if _, err := io.WriteString(w, anthropictest.Frame(e)); err != nil {
			break
		}
		if fl != nil {
			fl.Flush()
		}
	}
	return http.StatusOK
}

// guestMessages are the guests' words in a rich conversation, oldest first:
// each user text block is the worker's JSON user context, {speaker,
// message, ...}; tool results and other blocks are not a guest's.
func guestMessages(msgs []anthropic.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role != anthropic.RoleUser {
			continue
		}
		for _, b := range m.Content {
			if b.Type != anthropic.BlockText {
				continue
			}
			var ctx struct {
				Message *string `json:"message"`
			}
			if json.Unmarshal([]byte(b.Text), &ctx) == nil && ctx.Message != nil {
				out = append(out, *ctx.Message)
			}
		}
	}
	return out
}

// richDemoText is the rich demo's reply: the last guest message echoed and
// the history it came with.
func richDemoText(msgs []anthropic.Message) string {
	said := guestMessages(msgs)
	if len(said) == 0 {
		return "Demo model (Anthropic Messages stand-in): this request holds no guest message."
	}
	last := said[len(said)-1]
	text := "Demo model (a local scripted stand-in streaming the Anthropic Messages API, not a language model). You said: \"" + last + "\"."
	if len(said) == 1 {
		return text + " This is the first message of our conversation."
	}
	return text + fmt.Sprintf(" The conversation this session sent me holds %d earlier message(s) of yours; the first was: %q.", len(said)-1, said[0])
}
