package richsession_test

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
	r, _ := richRigLog(t, time.Hour, extra, nil, nil)
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	for _, c := range []struct{ profile, want string }{{"helper", "/srv/skills"}, {"other", "/srv/other-skills"}} {
		if err := r.setRich("room-"+c.profile, c.profile); err != nil {
			t.Fatal(err)
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
