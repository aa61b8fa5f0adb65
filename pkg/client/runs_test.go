package client

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadLineBound: an event line over its bound is refused, a line at it
// is read, and a stream cut mid-line is an unexpected EOF.
func TestReadLineBound(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n"
	got, err := readLine(bufio.NewReaderSize(strings.NewReader(line), 16), 100)
	if err != nil || string(got) != line {
		t.Errorf("a line at the bound: %q %v", got, err)
	}
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 200)+"\n"), 16), 100); err == nil {
		t.Error("a line over the bound was read")
	}
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader("partial"), 16), 100); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut line: %v", err)
	}
}
