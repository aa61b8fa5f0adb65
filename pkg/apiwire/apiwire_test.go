package apiwire

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestGoldenJSON pins each type's encoding, every field set and every
// field zero (which shows what omitempty leaves out), and that decoding
// the golden gives the value back: a renamed field or a changed omitempty
// is a change of the API and fails here.
func TestGoldenJSON(t *testing.T) {
	tests := []struct {
		name   string
		value  any // a pointer, so the decode has somewhere to go
		golden string
	}{
		{"Speaker", &Speaker{ID: "u1", Name: "Ada", PrincipalID: "p1"},
			`{"id":"u1","name":"Ada","principalId":"p1"}`},
		{"Speaker zero", &Speaker{}, `{"id":"","name":""}`},
		{"TurnRequest", &TurnRequest{Speaker: Speaker{ID: "u1", Name: "Ada"}, Text: "hi",
			Attachments: []richproto.Attachment{{URL: "https://example.com/a.png", Name: "a.png", Type: "image/png"}}},
			`{"speaker":{"id":"u1","name":"Ada"},"text":"hi","attachments":[{"url":"https://example.com/a.png","name":"a.png","type":"image/png"}]}`},
		{"TurnRequest zero", &TurnRequest{}, `{"speaker":{"id":"","name":""},"text":""}`},
		{"Reply", &Reply{OK: true, Text: "hello", TurnID: "t1", Files: []richproto.File{{Name: "r.txt", Type: "text/plain", Data: []byte("abc")}}},
			`{"ok":true,"text":"hello","turnId":"t1","files":[{"name":"r.txt","type":"text/plain","data":"YWJj"}]}`},
		{"Reply zero", &Reply{}, `{"ok":false,"text":"","turnId":""}`},
		{"Channel", &Channel{Channel: "c1", Tag: "ch-abc", Mode: "rich", Queued: 2, RunningTurn: "t1", PendingFresh: true,
			Standby: "ready", StandbyExpiresUnix: 1700000000, Profile: "default",
			Rich:      &RichSession{Session: "s1", Container: "k1", State: "busy", StartedUnix: 1, IdleStopUnix: 2, Turns: 3},
			Admission: &Admission{GlobalConcurrency: 4, Derived: true, Why: "cpus", MaxWaitSeconds: 60, Running: 1, Waiting: 2, StartConcurrency: 2, StartDerived: true, StartWhy: "half", Starting: 1, StartWaiting: 3}},
			`{"channel":"c1","tag":"ch-abc","mode":"rich","queued":2,"runningTurn":"t1","pendingFresh":true,"standby":"ready","standbyExpiresUnix":1700000000,"profile":"default",` +
				`"rich":{"session":"s1","container":"k1","state":"busy","startedUnix":1,"idleStopUnix":2,"turns":3},` +
				`"admission":{"globalConcurrency":4,"derived":true,"why":"cpus","maxWaitSeconds":60,"running":1,"waiting":2,"startConcurrency":2,"startDerived":true,"startWhy":"half","starting":1,"startWaiting":3}}`},
		{"Channel zero", &Channel{}, `{"channel":"","tag":"","mode":"","queued":0,"pendingFresh":false}`},
		{"Admission zero", &Admission{},
			`{"globalConcurrency":0,"derived":false,"why":"","maxWaitSeconds":0,"running":0,"waiting":0,"startConcurrency":0,"startDerived":false,"startWhy":"","starting":0,"startWaiting":0}`},
		{"RichSession zero", &RichSession{}, `{"state":""}`},
		{"ChannelList", &ChannelList{Channels: []Channel{{Channel: "c1", Tag: "t", Mode: "on"}}},
			`{"channels":[{"channel":"c1","tag":"t","mode":"on","queued":0,"pendingFresh":false}]}`},
		{"ChannelList zero", &ChannelList{}, `{"channels":null}`},
		{"ModeRequest", &ModeRequest{Mode: "rich", Profile: "default"}, `{"mode":"rich","profile":"default"}`},
		{"ModeRequest zero", &ModeRequest{}, `{"mode":""}`},
		{"Cancel", &Cancel{Channel: "c1", Cancelled: true, TurnID: "t1"}, `{"channel":"c1","cancelled":true,"turnId":"t1"}`},
		{"Cancel zero", &Cancel{}, `{"channel":"","cancelled":false}`},
		{"Turn", &Turn{ID: "t1", ChannelTag: "ch-abc", DeadlineUnix: 5, DeadlineUnixMs: 5000, Standby: "ready", Run: true, Job: true, Precheck: true, Rich: true},
			`{"id":"t1","channelTag":"ch-abc","deadlineUnix":5,"deadlineUnixMs":5000,"standby":"ready","run":true,"job":true,"precheck":true,"rich":true}`},
		{"Turn zero", &Turn{}, `{"id":"","channelTag":"","deadlineUnix":0,"deadlineUnixMs":0}`},
		{"TurnList", &TurnList{Turns: []Turn{{ID: "t1", ChannelTag: "x"}}},
			`{"turns":[{"id":"t1","channelTag":"x","deadlineUnix":0,"deadlineUnixMs":0}]}`},
		{"TurnList zero", &TurnList{}, `{"turns":null}`},
		{"Health", &Health{Status: "ok", Version: "1.2.3", Accepting: true, Running: 1, Waiting: 2, Role: "admin"},
			`{"status":"ok","version":"1.2.3","accepting":true,"running":1,"waiting":2,"role":"admin"}`},
		{"Health zero", &Health{}, `{"status":"","version":"","accepting":false,"running":0,"waiting":0,"role":""}`},
		{"ErrorResponse", &ErrorResponse{Error: "queue full"}, `{"error":"queue full"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.golden {
				t.Errorf("encoding:\n got %s\nwant %s", got, tt.golden)
			}
			back := reflect.New(reflect.TypeOf(tt.value).Elem())
			if err := json.Unmarshal([]byte(tt.golden), back.Interface()); err != nil {
				t.Fatalf("decode golden: %v", err)
			}
			if !reflect.DeepEqual(back.Interface(), tt.value) {
				t.Errorf("round trip:\n got %+v\nwant %+v", back.Elem().Interface(), reflect.ValueOf(tt.value).Elem().Interface())
			}
		})
	}
}
