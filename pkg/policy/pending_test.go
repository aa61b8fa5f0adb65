package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

func TestReadPendingAndFull(t *testing.T) {
	dir := t.TempDir()
	pend := &Pending{Version: Version, TurnID: ids.NewTurnID(), Pending: true, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Credentials: []string{"model", "mcp-search"}}
	data, err := pend.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p.json")
	os.WriteFile(path, data, 0o600)
	full, got, err := Read(path)
	if err != nil || full != nil || got == nil || !reflect.DeepEqual(got, pend) {
		t.Fatalf("Read(pending) = %v, %+v, %v", full, got, err)
	}
	// A placeholder is never a policy: Load refuses it.
	if _, err := Load(path); !errors.Is(err, ErrInvalid) {
		t.Errorf("Load(pending) = %v, want ErrInvalid", err)
	}

	p := sample()
	data, _ = p.Marshal()
	os.WriteFile(path, data, 0o600)
	full, got, err = Read(path)
	if err != nil || got != nil || full == nil || full.TurnID != p.TurnID {
		t.Fatalf("Read(full) = %+v, %v, %v", full, got, err)
	}
}

func TestReadRefuses(t *testing.T) {
	turn := ids.NewTurnID()
	dl := time.Now().Add(time.Minute).UnixMilli()
	for _, c := range []struct{ name, body string }{
		{"pending with an identity", `{"version":1,"turnId":"` + turn + `","pending":true,"deadlineUnixMs":1,"identity":{}}`},
		{"pending with a credential", `{"version":1,"turnId":"` + turn + `","pending":true,"deadlineUnixMs":1,"model":{"credential":"k"}}`},
		{"pending without deadline", `{"version":1,"turnId":"` + turn + `","pending":true}`},
		{"pending bad turn", `{"version":1,"turnId":"../x","pending":true,"deadlineUnixMs":1}`},
		{"pending bad credential name", `{"version":1,"turnId":"` + turn + `","pending":true,"deadlineUnixMs":1,"credentials":["../etc"]}`},
		{"pending other version", `{"version":2,"turnId":"` + turn + `","pending":true,"deadlineUnixMs":1}`},
		{"full policy saying pending false", `{"version":1,"turnId":"` + turn + `","pending":false,"deadlineUnixMs":` + itoa(dl) + `}`},
		{"not json", `pending`},
	} {
		path := filepath.Join(t.TempDir(), "p.json")
		os.WriteFile(path, []byte(c.body), 0o600)
		if full, pend, err := Read(path); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Read = %v, %v, %v; want ErrInvalid", c.name, full, pend, err)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
