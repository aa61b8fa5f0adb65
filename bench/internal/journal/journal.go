// Package journal extracts per-turn phase durations from `journalctl -o json`
// output: the host's debug "turn phases" lines (one per turn, attributes
// <phase>_us), systemd's own job messages for each sandbox-broker@ service
// (job start to READY: the broker's socket activation) and the broker's
// per-call log lines (latency_ms). Unlike histogram buckets these are exact
// per-turn values. Lines it does not recognise are ignored.
package journal

import (
	"bufio"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// systemd message ids (sd-messages.h).
// StandbyPrefix starts the names of a standby turn's phases.
const StandbyPrefix = "turn on a standby: "

const (
	msgJobStart    = "7d4958e842da4a758f6c1cdc7b36dcc5" // "Starting ..."
	msgJobDone     = "39f53479d3a045ac8e11786248231fbf" // "Started ..." / "Listening on ..."
	msgJobStopping = "de5b426a63be47a7b6ac3eaac82e2f6f" // "Stopping ..."
	msgJobStopped  = "9d1aaa27d60140bd96365438aad20286" // "Stopped ..." / "Closed ..."
)

// Samples are per-turn durations in milliseconds by phase name.
type Samples map[string][]float64

// Names of the phases this package derives itself.
const (
	PhaseSocketJob         = "systemd: socket unit start job"
	PhaseUntilConnect      = "socket listening to the worker's first connect"
	PhaseBrokerReadyToStop = "broker ready to the host's stop request"
	PhaseServiceStopJob    = "systemd: broker service stop job"
	PhaseBrokerActivation  = "broker_activation (systemd job start to READY)"
	PhaseBrokerModelCall   = "broker /model call (broker's own latency_ms, 1 ms resolution)"
	PhaseHostTotal         = "host total (admission to cleanup)"
	// The credential set of a turn (sandbox-credset@, a oneshot the broker
	// service requires): its job, and from the socket listening to the
	// broker service's start job (the credential set runs in between).
	PhaseCredsetJob       = "systemd: credential-set unit job (Starting to Finished)"
	PhaseCredsetToService = "credential set finished to the broker service's start"
	PhaseSocketToReady    = "socket start job to broker READY (the whole chain in systemd)"
)

var (
	usAttr     = regexp.MustCompile(`(?:^|[\s{,"])([a-z_]+)_us"?[=:]\s*"?(\d+)`)
	brokerUnit = regexp.MustCompile(`^sandbox-(?:broker|(credset))@([0-9a-f]{32})\.(service|socket)$`)
	latencyMs  = regexp.MustCompile(`latency_ms"?[=:]\s*"?(\d+)`)
)

type entry map[string]any

func (e entry) str(k string) string {
	switch v := e[k].(type) {
	case string:
		return v
	case []any: // journald may export repeated fields as arrays
		if len(v) > 0 {
			if s, ok := v[0].(string); ok {
				return s
			}
		}
	}
	return ""
}

// Parse reads journalctl -o json lines, keeping entries whose realtime stamp
// (µs since the epoch) lies in [since, until]; until <= 0 means no bound.
func Parse(r io.Reader, since, until int64) (Samples, error) {
	out := Samples{}
	// systemd's job messages per broker unit: turn -> event -> time (µs).
	events := map[string]map[string]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256<<10), 4<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		msg := e.str("MESSAGE")
		ts, _ := strconv.ParseFloat(e.str("__REALTIME_TIMESTAMP"), 64)
		if ts < float64(since) || (until > 0 && ts > float64(until)) {
			continue
		}
		if m := brokerUnit.FindStringSubmatch(e.str("UNIT")); m != nil && e.str("_PID") == "1" {
			ev := map[string]string{msgJobStart: "start", msgJobDone: "done", msgJobStopping: "stopping", msgJobStopped: "stopped"}[e.str("MESSAGE_ID")]
			if ev != "" {
				turn, kind := m[2], m[3]
				if m[1] != "" {
					kind = "credset"
				}
				if events[turn] == nil {
					events[turn] = map[string]float64{}
					order = append(order, turn)
				}
				k := kind + "." + ev
				if _, seen := events[turn][k]; !seen {
					events[turn][k] = ts
				}
			}
			continue
		}
		if strings.HasPrefix(e.str("_SYSTEMD_UNIT"), "sandbox-broker@") || strings.HasPrefix(e.str("SYSLOG_IDENTIFIER"), "sandbox-broker") {
			if strings.Contains(msg, "/model") && strings.Contains(msg, "status=200") {
				if m := latencyMs.FindStringSubmatch(msg); m != nil {
					v, _ := strconv.ParseFloat(m[1], 64)
					out[PhaseBrokerModelCall] = append(out[PhaseBrokerModelCall], v)
				}
			}
			continue
		}
		if strings.Contains(msg, "turn phases") {
			fields := map[string]float64{}
			for _, m := range usAttr.FindAllStringSubmatch(msg, -1) {
				v, _ := strconv.ParseFloat(m[2], 64)
				fields[m[1]] = v / 1000
			}
			// A journald-native handler would put attributes in fields.
			for k := range e {
				if name, ok := strings.CutSuffix(k, "_US"); ok {
					if v, err := strconv.ParseFloat(e.str(k), 64); err == nil {
						fields[strings.ToLower(name)] = v / 1000
					}
				}
			}
			if !strings.Contains(msg, "result=ok") && !strings.Contains(msg, `"result":"ok"`) && e.str("RESULT") != "ok" {
				continue // only successful turns describe the normal path
			}
			// A turn on a standby (it has a bind phase) is its own path:
			// its run, cleanup and total under names of their own.
			_, warm := fields["standby_bind"]
			for k, v := range fields {
				if k == "total" {
					k = PhaseHostTotal
				}
				if warm {
					k = StandbyPrefix + k
				}
				out[k] = append(out[k], v)
			}
		}
	}
	for _, turn := range order {
		for k, v := range unitPhases(events[turn]) {
			out[k] = append(out[k], v)
		}
	}
	return out, sc.Err()
}

// unitPhases derives the systemd-side phases of one turn from its units'
// job messages (event -> time, µs).
func unitPhases(ev map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, d := range []struct {
		name, from, to string
	}{
		{PhaseSocketJob, "socket.start", "socket.done"},
		{PhaseUntilConnect, "socket.done", "service.start"},
		{PhaseBrokerActivation, "service.start", "service.done"},
		{PhaseBrokerReadyToStop, "service.done", "service.stopping"},
		{PhaseServiceStopJob, "service.stopping", "service.stopped"},
		{PhaseCredsetJob, "credset.start", "credset.done"},
		{PhaseCredsetToService, "credset.done", "service.start"},
		{PhaseSocketToReady, "socket.start", "service.done"},
	} {
		from, ok1 := ev[d.from]
		to, ok2 := ev[d.to]
		if ok1 && ok2 && to >= from {
			out[d.name] = (to - from) / 1000
		}
	}
	return out
}

// ParseUnits reads journalctl -o json lines and returns, per turn id, the
// systemd-side phases of its broker and credential-set units (ms).
func ParseUnits(r io.Reader) (map[string]map[string]float64, error) {
	events := map[string]map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256<<10), 4<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		m := brokerUnit.FindStringSubmatch(e.str("UNIT"))
		if m == nil || e.str("_PID") != "1" {
			continue
		}
		ev := map[string]string{msgJobStart: "start", msgJobDone: "done", msgJobStopping: "stopping", msgJobStopped: "stopped"}[e.str("MESSAGE_ID")]
		if ev == "" {
			continue
		}
		ts, _ := strconv.ParseFloat(e.str("__REALTIME_TIMESTAMP"), 64)
		turn, kind := m[2], m[3]
		if m[1] != "" {
			kind = "credset"
		}
		if events[turn] == nil {
			events[turn] = map[string]float64{}
		}
		if _, seen := events[turn][kind+"."+ev]; !seen {
			events[turn][kind+"."+ev] = ts
		}
	}
	out := map[string]map[string]float64{}
	for turn, ev := range events {
		out[turn] = unitPhases(ev)
	}
	return out, sc.Err()
}
