// Package fakeupstream is an OpenAI-compatible Chat Completions stand-in that
// answers every POST at once with one fixed final assistant message. The
// benchmarks use it so that a measured turn or model call contains no model
// time at all: what remains is the sandbox's own cost.
package fakeupstream

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// Reply is the fixed answer body.
const Reply = `{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"bench reply"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`

// maxBody bounds what the fake reads of a request; the benchmarks send small bodies.
const maxBody = 1 << 20

// Handler answers POSTs with Reply. When Key is set, a request without
// "Authorization: Bearer <Key>" gets 401 and counts as a bad credential, so a
// benchmark can prove the broker swapped the credential in.
type Handler struct {
	Key     string
	calls   atomic.Int64
	badAuth atomic.Int64
}

// Calls is the number of requests answered with Reply.
func (h *Handler) Calls() int64 { return h.calls.Load() }

// BadAuth is the number of requests refused for a wrong credential.
func (h *Handler) BadAuth() int64 { return h.badAuth.Load() }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, `{"error":"method"}`, http.StatusMethodNotAllowed)
		return
	}
	if h.Key != "" && strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") != h.Key {
		h.badAuth.Add(1)
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBody))
	h.calls.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, Reply)
}
