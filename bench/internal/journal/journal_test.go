package journal

import (
	"strings"
	"testing"
)

const fixture = `{"MESSAGE":"level=DEBUG msg=\"turn phases\" turn=ab result=ok total_us=120000 prepare_us=800 unit_start_us=21000 create_us=9000 run_us=70000","_SYSTEMD_UNIT":"sandbox-host.service","__REALTIME_TIMESTAMP":"1000"}
{"MESSAGE":"{\"level\":\"DEBUG\",\"msg\":\"turn phases\",\"result\":\"ok\",\"total_us\":100000,\"prepare_us\":600}","_SYSTEMD_UNIT":"sandbox-host.service","__REALTIME_TIMESTAMP":"1001"}
{"MESSAGE":"level=DEBUG msg=\"turn phases\" result=failed total_us=5000 prepare_us=1","_SYSTEMD_UNIT":"sandbox-host.service","__REALTIME_TIMESTAMP":"1002"}
{"MESSAGE":"level=DEBUG msg=\"turn phases\" turn=cd result=ok total_us=60000 standby_take_us=3000 standby_bind_us=100 run_us=40000","_SYSTEMD_UNIT":"sandbox-host.service","__REALTIME_TIMESTAMP":"1003"}
{"MESSAGE":"Starting socket...","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.socket","_PID":"1","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","__REALTIME_TIMESTAMP":"1900000"}
{"MESSAGE":"Listening on socket.","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.socket","_PID":"1","MESSAGE_ID":"39f53479d3a045ac8e11786248231fbf","__REALTIME_TIMESTAMP":"1907000"}
{"MESSAGE":"Starting credentials...","UNIT":"sandbox-credset@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","__REALTIME_TIMESTAMP":"1950000"}
{"MESSAGE":"Finished credentials.","UNIT":"sandbox-credset@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"39f53479d3a045ac8e11786248231fbf","__REALTIME_TIMESTAMP":"1962000"}
{"MESSAGE":"Starting broker...","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","JOB_TYPE":"start","__REALTIME_TIMESTAMP":"2000000"}
{"MESSAGE":"Started broker.","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"39f53479d3a045ac8e11786248231fbf","JOB_TYPE":"start","JOB_RESULT":"done","__REALTIME_TIMESTAMP":"2031500"}
{"MESSAGE":"Stopping broker...","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"de5b426a63be47a7b6ac3eaac82e2f6f","__REALTIME_TIMESTAMP":"2075500"}
{"MESSAGE":"Stopped broker.","UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","_PID":"1","MESSAGE_ID":"9d1aaa27d60140bd96365438aad20286","__REALTIME_TIMESTAMP":"2079500"}
{"MESSAGE":"level=INFO msg=call turn=01 route=/model status=200 latency_ms=2","_SYSTEMD_UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","__REALTIME_TIMESTAMP":"2040000"}
{"MESSAGE":"level=WARN msg=\"call refused\" route=/model status=400 latency_ms=0","_SYSTEMD_UNIT":"sandbox-broker@0123456789abcdef0123456789abcdef.service","__REALTIME_TIMESTAMP":"2040001"}
not json
`

func TestParse(t *testing.T) {
	s, err := Parse(strings.NewReader(fixture), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		phase string
		want  []float64
	}{
		{"prepare", []float64{0.8, 0.6}},
		{"unit_start", []float64{21}},
		{PhaseHostTotal, []float64{120, 100}},
		{"run", []float64{70}}, // the cold turn's only: the standby turn's is its own
		{StandbyPrefix + "run", []float64{40}},
		{StandbyPrefix + "standby_take", []float64{3}},
		{StandbyPrefix + PhaseHostTotal, []float64{60}},
		{PhaseBrokerActivation, []float64{31.5}},
		{PhaseSocketJob, []float64{7}},
		{PhaseUntilConnect, []float64{93}},
		{PhaseBrokerReadyToStop, []float64{44}},
		{PhaseServiceStopJob, []float64{4}},
		{PhaseBrokerModelCall, []float64{2}},
		{PhaseCredsetJob, []float64{12}},
		{PhaseCredsetToService, []float64{38}},
		{PhaseSocketToReady, []float64{131.5}},
	}
	for _, tt := range tests {
		got := s[tt.phase]
		if len(got) != len(tt.want) {
			t.Errorf("%s = %v, want %v", tt.phase, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s = %v, want %v", tt.phase, got, tt.want)
			}
		}
	}
}

func TestParseWindow(t *testing.T) {
	s, err := Parse(strings.NewReader(fixture), 1001, 1001)
	if err != nil {
		t.Fatal(err)
	}
	if got := s["prepare"]; len(got) != 1 || got[0] != 0.6 {
		t.Errorf("prepare in window [1001,1001] = %v, want [0.6]", got)
	}
	if len(s[PhaseBrokerActivation]) != 0 {
		t.Errorf("broker activation outside the window counted: %v", s[PhaseBrokerActivation])
	}
}
