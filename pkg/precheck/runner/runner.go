// Package runner runs one precheck script inside the sealed container
// (`sandbox-worker precheck`, DESIGN.md section 14) in goja, a JavaScript
// engine written in pure Go, so the worker stays one static binary in a
// FROM scratch image.
//
// Guarantees: one bounded precheck.Job in, one valid precheck.Result out;
// the script has no filesystem, network, timer or module loader and reaches
// out only through mcp.call/mcp.json, which go one at a time to the
// broker's MCP route for the granted tools, within the job's call budget
// (refused calls count); the VM is interrupted at the job's deadline and
// when the heap passes the job's bound; every failure (syntax error, throw,
// wrong shape, result over its bound, time, memory) is an error Result with
// a fixed, generic message (a throw adds the script's own message, bounded
// and printable). The container's limits and the host's kill at its
// deadline remain the outer bounds.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"log/slog"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// Broker is the runner's only way out: one POST of a JSON body to a broker
// route ("/mcp/<server>"), answering the 200 body; any other status is an
// error. worker.UnixBroker implements it.
type Broker interface {
	Call(ctx context.Context, route string, body any) (json.RawMessage, error)
}

// maxCallStack bounds the script's call depth (a runaway recursion throws a
// RangeError instead of growing the Go stack to the memory limit).
const maxCallStack = 4096

// heapPoll is how often the heap watchdog looks.
const heapPoll = 20 * time.Millisecond

// Interrupt reasons.
var (
	errTimeout = errors.New("deadline")
	errMemory  = errors.New("memory")
)

// Messages of the fixed error results.
const (
	msgTimeout    = "the script ran past its time limit and was stopped"
	msgMemory     = "the script used more memory than allowed and was stopped"
	msgNotFunc    = "the script's default export is not a function"
	msgPending    = "the script's promise never settled"
	msgStack      = "the script passed the call depth limit"
	msgShape      = "the script's answer must be {wake: false, note?} or {wake: true, context} with string note and context"
	msgThrewPlain = "the script threw an error"
)

var promiseType = reflect.TypeOf((*goja.Promise)(nil))

// Run runs job's script once and returns its result: always a valid one
// (an error result when anything fails). ctx's end stops the VM like the
// deadline.
func Run(ctx context.Context, job precheck.Job, broker Broker, log *slog.Logger) precheck.Result {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := job.Validate(); err != nil {
		return precheck.Result{Error: "the precheck job was refused", Kind: precheck.KindInternal}
	}
	firedAt, _ := time.Parse(time.RFC3339, job.FiredAt)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(job.TimeoutMs)*time.Millisecond)
	defer cancel()

	prog, err := compileModule(job.Script)
	if err != nil {
		return precheck.Result{Error: err.Error(), Kind: precheck.KindSyntax}
	}
	vm := goja.New()
	vm.SetMaxCallStackSize(maxCallStack)
	r := &run{vm: vm, job: job, broker: broker, log: log, ctx: ctx}
	if err := r.capture(); err != nil {
		return precheck.Result{Error: "the precheck runner could not start", Kind: precheck.KindInternal}
	}

	// The deadline and the heap bound interrupt the VM wherever it is in
	// JavaScript; a Go call in progress (an MCP call) ends with ctx.
	stop := context.AfterFunc(ctx, func() { vm.Interrupt(errTimeout) })
	defer stop()
	watchDone := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { defer watch.Done(); watchHeap(vm, job.MaxHeapBytes, watchDone) }()
	defer func() { close(watchDone); watch.Wait() }()

	res := r.execute(prog, firedAt)
	vm.ClearInterrupt()
	lim := precheck.Limits{MaxNoteChars: job.MaxNoteChars, MaxContextChars: job.MaxContextChars}
	if err := res.Validate(lim); err != nil {
		// A defect of the runner, not the script: never hand it on.
		log.Error("runner produced an invalid result", "err", err.Error())
		return precheck.Result{Error: "the precheck runner failed", Kind: precheck.KindInternal}
	}
	return res
}

// run is one script's state.
type run struct {
	vm     *goja.Runtime
	job    precheck.Job
	broker Broker
	log    *slog.Logger
	ctx    context.Context

	// Captured before the script runs, so a script that replaces the
	// globals cannot change how the runner reads its answer.
	parse, stringify, describe goja.Callable
	errorCtor, dateCtor        *goja.Object

	calls int
	mcpID int
}

func (r *run) capture() error {
	jsonObj := r.vm.Get("JSON").ToObject(r.vm)
	var ok bool
	if r.parse, ok = goja.AssertFunction(jsonObj.Get("parse")); !ok {
		return errors.New("JSON.parse")
	}
	if r.stringify, ok = goja.AssertFunction(jsonObj.Get("stringify")); !ok {
		return errors.New("JSON.stringify")
	}
	r.errorCtor = r.vm.Get("Error").ToObject(r.vm)
	r.dateCtor = r.vm.Get("Date").ToObject(r.vm)
	v, err := r.vm.RunString(`(function (e) {
		try { return (e instanceof Error) ? String(e.message) : String(e); } catch (_) { return ""; }
	})`)
	if err != nil {
		return err
	}
	if r.describe, ok = goja.AssertFunction(v); !ok {
		return errors.New("describe")
	}
	return r.vm.Set(defaultBinding, goja.Undefined())
}

// execute runs the program and the default export and reads the answer.
func (r *run) execute(prog *goja.Program, firedAt time.Time) precheck.Result {
	if _, err := r.vm.RunProgram(prog); err != nil {
		return r.failure(err)
	}
	fn, ok := goja.AssertFunction(r.vm.Get(defaultBinding))
	if !ok {
		return precheck.Result{Error: msgNotFunc, Kind: precheck.KindShape}
	}
	arg, err := r.argument(firedAt)
	if err != nil {
		return r.failure(err)
	}
	v, err := fn(goja.Undefined(), arg)
	if err != nil {
		return r.failure(err)
	}
	// An async function answers a promise; its jobs ran when the call
	// returned (every MCP call settles before it returns), so it is
	// settled now unless it waits on something that can never finish.
	if o, ok := v.(*goja.Object); ok && o.ExportType() == promiseType {
		p, ok := o.Export().(*goja.Promise)
		if !ok {
			return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
		}
		switch p.State() {
		case goja.PromiseStatePending:
			if r.ctx.Err() != nil {
				return precheck.Result{Error: msgTimeout, Kind: precheck.KindTimeout}
			}
			return precheck.Result{Error: msgPending, Kind: precheck.KindThrow}
		case goja.PromiseStateRejected:
			return r.thrown(p.Result())
		}
		v = p.Result()
	}
	return r.answer(v)
}

// argument is the script's one argument.
func (r *run) argument(firedAt time.Time) (goja.Value, error) {
	vm := r.vm
	mcp := vm.NewObject()
	if err := mcp.Set("call", func(c goja.FunctionCall) goja.Value { return r.mcp(c, false) }); err != nil {
		return nil, err
	}
	if err := mcp.Set("json", func(c goja.FunctionCall) goja.Value { return r.mcp(c, true) }); err != nil {
		return nil, err
	}
	date, err := vm.New(r.dateCtor, vm.ToValue(firedAt.UnixMilli()))
	if err != nil {
		return nil, err
	}
	arg := vm.NewObject()
	for k, v := range map[string]any{"mcp": mcp, "firedAt": date, "timeZone": r.job.TimeZone, "today": r.job.Today, "schedule": r.job.Schedule} {
		if err := arg.Set(k, v); err != nil {
			return nil, err
		}
	}
	return arg, nil
}

// answer checks the fulfilled value: JSON-encoded by the captured
// JSON.stringify (so getters and toJSON run inside the VM's bounds), its
// size checked before it is decoded, then decoded strictly.
func (r *run) answer(v goja.Value) precheck.Result {
	lim := precheck.Limits{MaxNoteChars: r.job.MaxNoteChars, MaxContextChars: r.job.MaxContextChars}
	o, ok := v.(*goja.Object)
	if !ok || o.ClassName() == "Array" {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	s, err := r.stringify(goja.Undefined(), v)
	if err != nil {
		return r.failure(err)
	}
	if goja.IsUndefined(s) {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	text := s.String()
	if int64(len(text)) > lim.MaxResultBytes() {
		return precheck.Result{Error: fmt.Sprintf("the script's answer is over its bound (note %d, context %d characters)", lim.MaxNoteChars, lim.MaxContextChars), Kind: precheck.KindBound}
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &raw) != nil {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	var res precheck.Result
	for k, val := range raw {
		switch k {
		case "wake":
			if string(val) != "true" && string(val) != "false" {
				return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
			}
			res.Wake = string(val) == "true"
		case "note", "context":
			var str string
			if json.Unmarshal(val, &str) != nil {
				return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
			}
			if k == "note" {
				res.Note = str
			} else {
				res.Context = str
			}
		default:
			return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
		}
	}
	if _, ok := raw["wake"]; !ok {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	if _, ok := raw["context"]; ok && !res.Wake {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	if _, ok := raw["note"]; ok && res.Wake {
		return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
	}
	if err := res.Validate(lim); err != nil {
		if res.Wake && res.Context == "" {
			return precheck.Result{Error: msgShape, Kind: precheck.KindShape}
		}
		return precheck.Result{Error: fmt.Sprintf("the script's answer is over its bound (note %d, context %d characters)", lim.MaxNoteChars, lim.MaxContextChars), Kind: precheck.KindBound}
	}
	return res
}

// failure classifies an error out of the VM.
func (r *run) failure(err error) precheck.Result {
	var intr *goja.InterruptedError
	var exc *goja.Exception
	var stack *goja.StackOverflowError
	var syn *syntaxError
	switch {
	case errors.As(err, &intr):
		if intr.Value() == errMemory {
			return precheck.Result{Error: msgMemory, Kind: precheck.KindMemory}
		}
		return precheck.Result{Error: msgTimeout, Kind: precheck.KindTimeout}
	case errors.As(err, &stack):
		return precheck.Result{Error: msgStack, Kind: precheck.KindThrow}
	case errors.As(err, &exc):
		return r.thrown(exc.Value())
	case errors.As(err, &syn):
		return precheck.Result{Error: syn.msg, Kind: precheck.KindSyntax}
	}
	r.log.Warn("script failed outside the engine's categories", "type", fmt.Sprintf("%T", err))
	return precheck.Result{Error: msgThrewPlain, Kind: precheck.KindThrow}
}

// thrown describes a thrown value or rejection reason: its message,
// printable and bounded.
func (r *run) thrown(v goja.Value) precheck.Result {
	if r.ctx.Err() != nil {
		// A rejection caused by the deadline (an MCP call cut short).
		return precheck.Result{Error: msgTimeout, Kind: precheck.KindTimeout}
	}
	var msg string
	if v != nil {
		if d, err := r.describe(goja.Undefined(), v); err == nil && d != nil {
			msg = d.String()
		}
	}
	const prefix = "the script threw: "
	if msg == "" {
		return precheck.Result{Error: msgThrewPlain, Kind: precheck.KindThrow}
	}
	return precheck.Result{Error: prefix + precheck.Clean(msg, precheck.MaxErrorChars-len(prefix)), Kind: precheck.KindThrow}
}

// mcp is mcp.call (asJSON false) and mcp.json: it performs the call now,
// one at a time (the VM waits), and answers a settled promise.
func (r *run) mcp(c goja.FunctionCall, asJSON bool) goja.Value {
	p, resolve, reject := r.vm.NewPromise()
	v, err := r.mcpCall(c, asJSON)
	if err != nil {
		e, cerr := r.vm.New(r.errorCtor, r.vm.ToValue(err.Error()))
		if cerr != nil {
			reject(r.vm.ToValue(err.Error()))
		} else {
			reject(e)
		}
	} else {
		resolve(v)
	}
	return r.vm.ToValue(p)
}

// mcpError is a refusal the script sees (its message is the runner's own).
type mcpError struct{ msg string }

func (e *mcpError) Error() string { return e.msg }

func (r *run) mcpCall(c goja.FunctionCall, asJSON bool) (goja.Value, error) {
	name := "mcp.call"
	if asJSON {
		name = "mcp.json"
	}
	server, ok1 := c.Argument(0).Export().(string)
	tool, ok2 := c.Argument(1).Export().(string)
	if !ok1 || !ok2 {
		return nil, &mcpError{name + "(server, tool, args): server and tool must be strings"}
	}
	r.calls++
	if r.calls > r.job.MaxCalls {
		return nil, &mcpError{fmt.Sprintf("%s: the run's budget of %d calls is spent", name, r.job.MaxCalls)}
	}
	if !r.job.Granted(server, tool) {
		return nil, &mcpError{fmt.Sprintf("%s: %s/%s is not granted to this precheck", name, precheck.Clean(server, 64), precheck.Clean(tool, 128))}
	}
	what := server + "/" + tool
	args := json.RawMessage("{}")
	if a := c.Argument(2); !goja.IsUndefined(a) && !goja.IsNull(a) {
		o, ok := a.(*goja.Object)
		if !ok || o.ClassName() == "Array" || o.ClassName() == "Function" {
			return nil, &mcpError{name + ": args must be an object"}
		}
		s, err := r.stringify(goja.Undefined(), a)
		if err != nil {
			return nil, err // a throw (or an interrupt) inside toJSON or a getter
		}
		if goja.IsUndefined(s) {
			return nil, &mcpError{name + ": args must be an object"}
		}
		text := s.String()
		if len(text) > precheck.MaxArgsBytes {
			return nil, &mcpError{fmt.Sprintf("%s: args over %d bytes", name, precheck.MaxArgsBytes)}
		}
		args = json.RawMessage(text)
	}
	r.mcpID++
	id := r.mcpID
	body := map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args},
	}
	raw, err := r.broker.Call(r.ctx, "/mcp/"+server, body)
	if err != nil {
		if r.ctx.Err() != nil {
			return nil, &mcpError{name + ": " + what + " did not answer before the deadline"}
		}
		r.log.Warn("mcp call failed", "server", server, "tool", tool, "err", err.Error())
		return nil, &mcpError{name + ": the call to " + what + " failed"}
	}
	var envelope struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &envelope) != nil || envelope.JSONRPC != "2.0" || string(envelope.ID) != strconv.Itoa(id) ||
		len(envelope.Result) == 0 || envelope.Result[0] != '{' || len(envelope.Error) > 0 {
		r.log.Warn("mcp answer malformed", "server", server, "tool", tool)
		return nil, &mcpError{name + ": " + what + " gave a malformed answer"}
	}
	var result struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(envelope.Result, &result) != nil {
		return nil, &mcpError{name + ": " + what + " gave a malformed answer"}
	}
	if result.IsError {
		return nil, &mcpError{name + ": " + what + " answered an error"}
	}
	text := string(envelope.Result)
	if asJSON {
		switch {
		case len(result.StructuredContent) > 0 && string(result.StructuredContent) != "null":
			text = string(result.StructuredContent)
		default:
			text = ""
			for _, c := range result.Content {
				if c.Type == "text" {
					text = c.Text
					break
				}
			}
			if text == "" {
				return nil, &mcpError{name + ": " + what + " answered no structured content and no text"}
			}
			if !json.Valid([]byte(text)) {
				return nil, &mcpError{name + ": " + what + "'s text content is not JSON"}
			}
		}
	}
	v, err := r.parse(goja.Undefined(), r.vm.ToValue(text))
	if err != nil {
		return nil, err
	}
	return v, nil
}

// watchHeap interrupts the VM once the Go heap passes max bytes (after a
// collection, so garbage does not count) until done closes.
func watchHeap(vm *goja.Runtime, max int64, done <-chan struct{}) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	t := time.NewTicker(heapPoll)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 || int64(sample[0].Value.Uint64()) <= max {
			continue
		}
		runtime.GC()
		metrics.Read(sample)
		if int64(sample[0].Value.Uint64()) > max {
			vm.Interrupt(errMemory)
			return
		}
	}
}
