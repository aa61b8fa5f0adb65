package sealedturn_test

import (
	"context"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
)

// TestRunChannelTurnAnswersBeforeCleanup: the kind made from its
// Registration, without the host, runs an admitted turn on the cold path:
// the answer comes while the container still exists, under the turn's id,
// and the turn leaves nothing behind once it returns.
func TestRunChannelTurnAnswersBeforeCleanup(t *testing.T) {
	kit := sandboxtest.NewKit(t, "", sandboxtest.KitOptions{})
	made, err := sealedturn.Registration.New(kit.Deps)
	sandboxtest.Must(t, err)
	k := made.(*sealedturn.Kind)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			kit.Host.Stop()
			k.Stop()
		}
	}
	t.Cleanup(stop)
	sandboxtest.Must(t, kit.Host.State.SetMode("c", chanstate.ModeOn))

	id := ids.NewTurnID()
	var answers []string
	liveAtAnswer := -1
	out := k.RunChannelTurn(context.Background(), &kind.Turn{
		ID: id, Channel: "c", Speaker: protocol.Speaker{ID: "u1", Name: "Ann"}, Text: "hi",
		Deadline: time.Now().Add(time.Minute),
		Rebind:   func(string) { t.Error("rebound without a standby") },
		Answer: func(reply *protocol.Reply, turnID string) {
			answers = append(answers, turnID+" "+reply.Text)
			liveAtAnswer = kit.Docker.LiveCount()
		},
	})
	if out.RunErr != nil || out.CleanupErr != nil {
		t.Fatalf("run %v, cleanup %v", out.RunErr, out.CleanupErr)
	}
	if !out.Answered || len(answers) != 1 || answers[0] != id+" hello" || out.ID != id {
		t.Errorf("answered %v %q, outcome id %s; want one answer %q", out.Answered, answers, out.ID, id+" hello")
	}
	if liveAtAnswer != 1 {
		t.Errorf("%d containers at the answer, want the turn's one (answered before cleanup)", liveAtAnswer)
	}
	if len(kit.Docker.Created) != 1 || len(kit.Units.Started) != 1 {
		t.Errorf("created %d containers, started %d units; want one each", len(kit.Docker.Created), len(kit.Units.Started))
	}
	stop() // a standby the turn asked for goes with the kind
	kit.AssertClean(t)
}
