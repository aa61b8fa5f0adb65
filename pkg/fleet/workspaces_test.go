package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
)

// The workspace store's layout as nats.go's object store writes it
// (pkg/fleetworkspace reads the same).
const (
	workspaceStream   = "OBJ_" + WorkspaceBucket
	workspaceSubjects = "$O." + WorkspaceBucket + ".>"
	metaPrefix        = "$O." + WorkspaceBucket + ".M."
	chunkPrefix       = "$O." + WorkspaceBucket + ".C."
)

// objectSubjects counts the workspace store's meta and chunk subjects that
// hold a message.
func objectSubjects(t *testing.T, f *Fleet) (metas, chunks map[string]uint64) {
	t.Helper()
	s, err := f.js.Stream(context.Background(), workspaceStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(workspaceSubjects))
	if err != nil {
		t.Fatal(err)
	}
	metas, chunks = map[string]uint64{}, map[string]uint64{}
	for subj, n := range info.State.Subjects {
		switch {
		case strings.HasPrefix(subj, metaPrefix):
			metas[subj] = n
		case strings.HasPrefix(subj, chunkPrefix):
			chunks[subj] = n
		}
	}
	return metas, chunks
}

// TestWorkspaceStoreStaysBounded: a channel's committed turns leave its
// one current snapshot in the store (one meta subject, one chunk subject),
// not a delete marker per superseded snapshot.
func TestWorkspaceStoreStaysBounded(t *testing.T) {
	r := newRig(t, 1, 2)
	r.box("a", newRecorder())
	client, _ := r.fleet("client")
	ctx := r.ctx()
	for i := 0; i < 5; i++ {
		tn := newTurn("chan-gc", fmt.Sprint(i))
		if _, _, err := client.Ask(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	// The superseded snapshot is deleted after the ack: wait for the last
	// commit's event, which follows that delete.
	r.waitEvent("fifth commit", func(e Event) bool { return e.Kind == EventCommitted && e.Generation == 5 })
	metas, chunks := objectSubjects(t, client)
	if len(metas) != 1 || len(chunks) != 1 {
		t.Fatalf("after 5 commits the store holds %d meta subjects %v and %d chunk subjects, want 1 and 1", len(metas), metas, len(chunks))
	}
}

// TestSweepRemovesOrphans: chunks no object names (an upload cut by a
// crash) and a whole snapshot no channel refers to (a crash between upload
// and commit) are swept once older than the bound on the engine's clock;
// the committed snapshot stays and still restores.
func TestSweepRemovesOrphans(t *testing.T) {
	r := newRig(t, 1, 2)
	r.box("a", newRecorder())
	client, nc := r.fleet("client")
	ctx := r.ctx()
	js, _ := jetstream.New(nc)
	// An upload cut after two chunks: chunks without a meta.
	for i := 0; i < 2; i++ {
		if _, err := js.Publish(ctx, chunkPrefix+"ORPHANNUID", []byte("chunk")); err != nil {
			t.Fatal(err)
		}
	}
	// A whole snapshot of a generation never committed.
	orphan := workspaceName("chan-sweep", 7, 99)
	if err := client.ws.Put(ctx, orphan, []byte("never committed")); err != nil {
		t.Fatal(err)
	}
	tn := newTurn("chan-sweep", "after the crash")
	if _, _, err := client.Ask(ctx, tn); err != nil {
		t.Fatal(err)
	}
	st, _, err := client.Channel(ctx, "chan-sweep")
	if err != nil {
		t.Fatal(err)
	}

	// Younger than the bound: nothing is swept.
	got, err := client.SweepWorkspaces(ctx, fleetworkspace.DefaultSweepAge)
	if err != nil {
		t.Fatal(err)
	}
	if got != (fleetworkspace.Sweep{}) {
		t.Fatalf("sweep under the bound removed %+v, want nothing", got)
	}
	// Past it (the committed turn wrote after the orphans).
	got, err = client.SweepWorkspaces(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (fleetworkspace.Sweep{Snapshots: 1, Uploads: 1}); got != want {
		t.Errorf("sweep removed %+v, want %+v", got, want)
	}
	metas, chunks := objectSubjects(t, client)
	if len(metas) != 1 || len(chunks) != 1 {
		t.Errorf("after the sweep the store holds %d meta subjects %v and %d chunk subjects %v, want 1 and 1", len(metas), metas, len(chunks), chunks)
	}
	ws, err := client.Workspace(ctx, st.Workspace)
	if err != nil || strings.TrimSpace(string(ws)) != tn.ID {
		t.Fatalf("committed snapshot after the sweep: %q, %v", ws, err)
	}
}
