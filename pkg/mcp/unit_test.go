package mcp

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestEventCounting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  int
	}{
		{"one LF event", "data: x\n\n", 1},
		{"CRLF events", "data: x\r\n\r\ndata: y\r\n\r\n", 2},
		{"CR only", "data: x\r\rdata: y\r\r", 2},
		{"comments count", ": ping\n\n: ping\n\n: ping\n\n", 3},
		{"multi-line event is one", "id: 1\nevent: message\ndata: a\ndata: b\n\n", 1},
		{"blank lines alone are not events", "\n\n\n\n", 0},
		{"unterminated block", "data: x\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				b := newBudget(1<<20, 1<<20)
				var r io.Reader = strings.NewReader(tc.input)
				if split {
					r = iotest.OneByteReader(r) // state must survive read boundaries
				}
				m := &meteredBody{rc: io.NopCloser(r), b: b, sse: true, finish: func() {}}
				if _, err := io.ReadAll(m); err != nil {
					t.Fatalf("read: %v", err)
				}
				if b.events != tc.want {
					t.Errorf("split=%v: events = %d, want %d", split, b.events, tc.want)
				}
				if b.bytes != int64(len(tc.input)) {
					t.Errorf("split=%v: bytes = %d, want %d", split, b.bytes, len(tc.input))
				}
			}
		})
	}
}

func TestBudgetStopsReads(t *testing.T) {
	b := newBudget(10, 100)
	m := &meteredBody{rc: io.NopCloser(strings.NewReader(strings.Repeat("x", 50))), b: b, finish: func() {}}
	_, err := io.ReadAll(m)
	if !errors.Is(err, errTooLarge) {
		t.Fatalf("err = %v, want errTooLarge", err)
	}
	// Once failed, every later read fails (the SDK drains bodies on close).
	if n, err := m.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errTooLarge) {
		t.Errorf("read after failure = %d, %v; want 0, errTooLarge", n, err)
	}
}

func TestScanLinesAndStream(t *testing.T) {
	in := "event: other\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"wrong\":true}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{\"ok\":true}}\r\r"
	res, err := readStream(iotest.OneByteReader(strings.NewReader(in)), 1<<20)
	if err != nil {
		t.Fatalf("readStream: %v", err)
	}
	if string(res) != `{"ok":true}` {
		t.Errorf("result = %s, want the message event's result, not the 'other' event", res)
	}
	_, err = readStream(strings.NewReader("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"), 1<<20)
	if !errors.Is(err, ErrProtocol) {
		t.Errorf("unterminated event: err = %v, want ErrProtocol", err)
	}
}

func TestClassifyNeverUsesErrorText(t *testing.T) {
	ctx := context.Background()
	secret := errors.New("Post \"https://mcp.example/x?token=" + testCred + "\": " + bodyMarker)
	for _, tc := range []struct {
		name string
		b    func() *budget
		want error
	}{
		{"violation", func() *budget { b := newBudget(1, 1); b.fail(errTooLarge); return b }, ErrTooLarge},
		{"events", func() *budget { b := newBudget(1, 1); b.fail(errTooManyEvents); return b }, ErrTooManyEvents},
		{"transport", func() *budget { b := newBudget(1, 1); b.noteTransport(); return b }, ErrUnavailable},
		{"status", func() *budget { b := newBudget(1, 1); b.noteStatus(503); return b }, ErrUnavailable},
		{"nothing known", func() *budget { return newBudget(1, 1) }, ErrProtocol},
	} {
		err := classify(ctx, tc.b(), secret, "tools/call")
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		assertClean(t, err, "mcp.example", "token")
	}
}
