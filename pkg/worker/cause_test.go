package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/memory"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Fake file system errors, wrapped the way atomicfile, memory and history
// wrap them, classify by their errno, never by their text.
func TestCause(t *testing.T) {
	pathErr := func(e syscall.Errno) error {
		return fmt.Errorf("memory: write memory.json: %w",
			fmt.Errorf("atomicfile: write: %w", &fs.PathError{Op: "write", Path: "/workspace/.memory.json.tmp-SECRETPATH", Err: e}))
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"ENOSPC", pathErr(syscall.ENOSPC), protocol.CauseNoSpace},
		{"EDQUOT", pathErr(syscall.EDQUOT), protocol.CauseQuota},
		{"EROFS", pathErr(syscall.EROFS), protocol.CauseReadOnly},
		{"EACCES", pathErr(syscall.EACCES), protocol.CausePermission},
		{"EPERM", pathErr(syscall.EPERM), protocol.CausePermission},
		{"EIO", pathErr(syscall.EIO), protocol.CauseIO},
		{"EMFILE", pathErr(syscall.EMFILE), protocol.CauseTooManyFiles},
		{"ENOENT", pathErr(syscall.ENOENT), protocol.CauseNoFile},
		{"ENOMEM", pathErr(syscall.ENOMEM), protocol.CauseOutOfMemory},
		{"ELOOP", pathErr(syscall.ELOOP), protocol.CauseStore},
		{"other errno", pathErr(syscall.EXDEV), protocol.CauseSystem},
		{"bare errno (unix.Openat)", fmt.Errorf("atomicfile: create temp: %w", unix.ENOSPC), protocol.CauseNoSpace},
		{"read error under ErrCorrupt", fmt.Errorf("memory: read: %w: %w", pathErr(syscall.EIO), memory.ErrCorrupt), protocol.CauseIO},
		{"corrupt memory", fmt.Errorf("memory: not JSON: %w", memory.ErrCorrupt), protocol.CauseStore},
		{"corrupt history", fmt.Errorf("history: %w", ErrHistory), protocol.CauseStore},
		{"broker refused", &RefusedError{Status: 502}, protocol.CauseBroker},
		{"broker transport", fmt.Errorf("dial: %w", ErrBroker), protocol.CauseBroker},
		{"malformed tool answer", errToolAnswer, protocol.CauseBroker},
		{"unknown", errors.New("no space left on device"), ""}, // text is never read
	} {
		got := Cause(tt.err)
		if got != tt.want {
			t.Errorf("%s: Cause = %q, want %q", tt.name, got, tt.want)
		}
		if got != "" && !protocol.ValidCause(got) {
			t.Errorf("%s: Cause %q is not a protocol cause", tt.name, got)
		}
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&turnError{msg: "x", cause: protocol.CauseNoSpace}, protocol.CauseNoSpace},
		{fmt.Errorf("turn: %w", protocol.ErrInvalid), protocol.CauseInvalidTurn},
		{errors.New("something"), protocol.CauseInternal},
	} {
		if got := failureCause(tt.err); got != tt.want {
			t.Errorf("failureCause(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// A full workspace disk, for real: a 64 KiB tmpfs filled up. memory_set
// fails (the model is told the tool failed), the turn then fails saving its
// history, and the logs and the reply name "no space left on device", never a
// path or a payload. Needs root (mount); skipped otherwise.
func TestFullDiskNamesItsCause(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root; run as root to include this test")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); run as root with CAP_SYS_ADMIN to include this test", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := filler.Write(make([]byte, 1<<20))
	filler.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", werr)
	}
	turn := `{"text":"PAYLOADTEXT","speaker":{"id":"u","name":"n"},"model":"m","prompt":"p","timeZone":"UTC","reset":false,"tools":[],"mcp":[]}`
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
		toolAnswer(call("a", "memory_set", `{"scope":"channel","key":"k","text":"PAYLOADMEMORY"}`)),
		textAnswer("PAYLOADREPLY"),
	}}
	var out, logs bytes.Buffer
	code := Main(context.Background(), strings.NewReader(turn), &out, Options{
		Broker: b, Workspace: dir, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	reply, err := protocol.DecodeReply(out.Bytes())
	if err != nil || reply.OK || reply.Cause != protocol.CauseNoSpace {
		t.Errorf("reply %+v (%v), want a failed reply with cause %q", reply, err, protocol.CauseNoSpace)
	}
	for _, want := range []string{
		`"msg":"tool failed","tool":"memory_set","cause":"local","category":"no space left on device"`,
		`"msg":"turn failed"`, `"category":"no space left on device"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	for _, never := range []string{"PAYLOAD"} {
		if strings.Contains(logs.String(), never) {
			t.Errorf("log carries a payload:\n%s", logs.String())
		}
	}
	// The model learned only that the tool failed.
	if got := b.reqs[1].Messages[len(b.reqs[1].Messages)-1].Content; got != ToolFailedText {
		t.Errorf("tool result shown to the model = %q, want %q", got, ToolFailedText)
	}
}
