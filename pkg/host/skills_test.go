package host

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRichContainerGetsProfileSkills: the rich container carries the
// profile's skills tree (rich.skillsDir unless the profile names one).
func TestRichContainerGetsProfileSkills(t *testing.T) {
	extra := strings.Replace(richExtra, "  startTimeoutSeconds: 1\n", "  startTimeoutSeconds: 1\n  skillsDir: /srv/skills\n", 1) +
		"    skillsDir: /srv/other-skills\n"
	ctl := &fakeRichControl{}
	r := newRig(t, extra, func(o *Options) { richTuning(o).Control = ctl; richTuning(o).Idle = time.Hour })
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	t.Cleanup(r.h.Shutdown)
	for _, c := range []struct{ profile, want string }{{"helper", "/srv/skills"}, {"other", "/srv/other-skills"}} {
		if code, body := r.api(t, "PUT", "/v1/channels/room-"+c.profile+"/mode", `{"mode":"rich","profile":"`+c.profile+`"}`); code != 200 {
			t.Fatal(code, body)
		}
		if _, _, err := richTurn(t, r, "room-"+c.profile, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, s := range r.richContainers() {
		got[s.SkillsDir] = true
	}
	if !got["/srv/skills"] || !got["/srv/other-skills"] || len(got) != 2 {
		t.Errorf("skills dirs of the rich containers: %v", got)
	}
}
