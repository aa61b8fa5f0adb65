package fleet

import (
	"testing"
	"time"
)

// TestStaleCommits: only a paused box's commit of a turn it took before
// the pause and another box took since counts (the fence's failure).
func TestStaleCommits(t *testing.T) {
	pause, cont := time.Unix(100, 0), time.Unix(200, 0)
	at := func(s int64) int64 { return time.Unix(s, 0).UnixNano() }
	tests := []struct {
		name  string
		lines []Line
		want  int
	}{
		{"overtaken, then committed by the paused box", []Line{
			{Ev: "taken", Box: "box1", Turn: "t", T: at(90)},
			{Ev: "taken", Box: "box2", Turn: "t", T: at(150)},
			{Ev: "committed", Box: "box1", Turn: "t", T: at(201)},
		}, 1},
		{"nobody took it meanwhile: still its claim", []Line{
			{Ev: "taken", Box: "box1", Turn: "t", T: at(90)},
			{Ev: "committed", Box: "box1", Turn: "t", T: at(201)},
		}, 0},
		{"taken again by the paused box after SIGCONT", []Line{
			{Ev: "taken", Box: "box1", Turn: "t", T: at(90)},
			{Ev: "taken", Box: "box2", Turn: "t", T: at(150)},
			{Ev: "taken", Box: "box1", Turn: "t", T: at(210)},
			{Ev: "committed", Box: "box1", Turn: "t", T: at(211)},
		}, 0},
		{"committed before the pause", []Line{
			{Ev: "taken", Box: "box1", Turn: "t", T: at(90)},
			{Ev: "committed", Box: "box1", Turn: "t", T: at(95)},
			{Ev: "taken", Box: "box2", Turn: "t", T: at(150)},
		}, 0},
	}
	for _, tt := range tests {
		r := NewRecorder()
		for _, l := range tt.lines {
			r.boxLine(l)
		}
		if got := r.StaleCommits("box1", pause, cont); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}
