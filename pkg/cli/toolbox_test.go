package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

func fakeToolbox(img toolbox.Image, err error) toolboxInspector {
	return func(_ context.Context, _, image string) (toolbox.Image, error) {
		img.Tag = image
		return img, err
	}
}

func fakeSHA(sum string, err error) func(string) (string, error) {
	return func(p string) (string, error) {
		if p != toolbox.HostWorker {
			return "", fmt.Errorf("hashed %s, want %s", p, toolbox.HostWorker)
		}
		return sum, err
	}
}

func TestCheckToolbox(t *testing.T) {
	current := toolbox.Image{ID: "sha256:1", Size: 300e6, WorkerSHA256: "aa11aa11aa11aa11"}
	absent := fmt.Errorf("x: %w", toolbox.ErrAbsent)
	for _, tc := range []struct {
		name        string
		img         toolbox.Image
		inspectErr  error
		host        string
		hostErr     error
		enabled     bool
		status      string
		current     bool
		wantMessage string
		wantRemedy  string
	}{
		{"absent, runs enabled", toolbox.Image{}, absent, "", nil, true, StatusWarn, false, "is not present", "run `sudo sandbox-host toolbox build`"},
		{"absent, runs disabled", toolbox.Image{}, absent, "", nil, false, StatusSkip, false, "runs.enabled is false", "sandbox-host toolbox build"},
		{"docker error", toolbox.Image{}, errors.New("refused"), "", nil, true, StatusWarn, false, "cannot inspect", "docker info"},
		{"not ours", toolbox.Image{ID: "sha256:2"}, nil, "aa11aa11aa11aa11", nil, true, StatusWarn, false, "not built by", "toolbox build"},
		{"host worker unreadable", current, nil, "", os.ErrNotExist, true, StatusWarn, false, "cannot read the host's", "reinstall"},
		{"stale", current, nil, "bb22", nil, true, StatusWarn, false, "is stale", "--base-tar"},
		{"stale, runs disabled", current, nil, "bb22", nil, false, StatusSkip, false, "is stale", "toolbox build"},
		{"current", current, nil, "aa11aa11aa11aa11", nil, true, StatusOK, true, "present and current (300 MB, worker aa11aa11aa11)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := checkToolbox(context.Background(), fakeToolbox(tc.img, tc.inspectErr), fakeSHA(tc.host, tc.hostErr), "", "tb:latest", tc.enabled)
			if st.Status != tc.status || st.Current != tc.current || !strings.Contains(st.Message, tc.wantMessage) || !strings.Contains(st.Remedy, tc.wantRemedy) {
				t.Errorf("got %s current=%v %q remedy %q; want %s current=%v %q remedy %q", st.Status, st.Current, st.Message, st.Remedy, tc.status, tc.current, tc.wantMessage, tc.wantRemedy)
			}
		})
	}
}

func TestDoctorReportsTheToolbox(t *testing.T) {
	path, d := fakeMachine(t)
	rep := runDoctor(context.Background(), path, d)
	if c, ok := statusOf(rep, "toolbox"); !ok || c.Status != StatusOK {
		t.Fatalf("toolbox check %+v, want ok", c)
	}
	d.toolbox = fakeToolbox(toolbox.Image{}, toolbox.ErrAbsent)
	rep = runDoctor(context.Background(), path, d)
	c, _ := statusOf(rep, "toolbox")
	if c.Status != StatusWarn || c.Remedy != "code execution needs the toolbox image: run `sudo sandbox-host toolbox build`" {
		t.Errorf("missing toolbox: %+v", c)
	}
	if !rep.OK {
		t.Errorf("a missing toolbox failed doctor (it is a warning): %+v", rep.Checks)
	}
}

func TestToolboxBuildRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no-import without keep-base", []string{"--no-import"}, "--no-import needs --keep-base"},
		{"base-tar with dry-run", []string{"--base-tar", "/x.tar", "--dry-run"}, "--base-tar imports an existing base"},
		{"base-tar with mirror", []string{"--base-tar", "/x.tar", "--mirror", "http://x/d"}, "--base-tar imports an existing base"},
		{"bad mirror", []string{"--dry-run", "--suite", "bookworm", "--mirror", "--evil"}, "neither"},
		{"bad suite", []string{"--dry-run", "--suite", "Bookworm;rm", "--mirror", "http://x/d"}, "not a Debian codename"},
		{"zero timeout", []string{"--build-timeout", "0s"}, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), append([]string{"toolbox", "build"}, tc.args...), Inputs{Stdout: &out, Stderr: &errb})
			if code == 0 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want non-zero and %q", code, errb.String(), tc.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"toolbox", "build", "--small", "--dry-run", "--suite", "bookworm", "--mirror", "http://mirror.lan/debian"}, Inputs{Stdout: &out, Stderr: &errb}); code != 0 ||
		!strings.HasPrefix(out.String(), "mmdebstrap --mode=unshare --variant=apt --format=tar --include=bash,coreutils,python3,git,curl,ca-certificates,python3-pip,python3-requests,nodejs,npm ") ||
		!strings.Contains(out.String(), " bookworm OUTPUT.tar http://mirror.lan/debian\n") {
		t.Errorf("dry-run: exit %d, %q %q", code, out.String(), errb.String())
	}
	if os.Geteuid() != 0 {
		errb.Reset()
		if code := Main(context.Background(), []string{"toolbox", "build", "--base-tar", "/x.tar"}, Inputs{Stdout: &out, Stderr: &errb}); code == 0 || !strings.Contains(errb.String(), "needs root") {
			t.Errorf("as a user: exit %d, %q; want a refusal naming root", code, errb.String())
		}
	}
}

func TestToolboxTargetConfig(t *testing.T) {
	path, _ := fakeMachine(t)
	img, _, enabled, err := toolboxTarget(&globals{config: path}, "")
	if err != nil || img != "roundtable-sandbox-toolbox:latest" || !enabled {
		t.Errorf("from the config: %q %v %v", img, enabled, err)
	}
	if img, _, _, err := toolboxTarget(&globals{config: path}, "mine:1"); err != nil || img != "mine:1" {
		t.Errorf("--tag: %q %v", img, err)
	}
	if img, _, _, err := toolboxTarget(&globals{config: path + ".none"}, ""); err != nil || img != "roundtable-sandbox-toolbox:latest" {
		t.Errorf("no config file: %q %v; want the defaults", img, err)
	}
	os.WriteFile(path, []byte("runs:\n  image: \"\"\nbogus: 1\n"), 0o600)
	if _, _, _, err := toolboxTarget(&globals{config: path}, "x:1"); err == nil {
		t.Error("an invalid config was replaced by defaults")
	}
}
