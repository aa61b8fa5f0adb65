package reaper

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// HostState reports whether the host service runs (*unitctl.Manager).
type HostState interface {
	HostActive(ctx context.Context) (bool, error)
}

// Bounds of the host's answer to GET /v1/turns.
const (
	hostTurnsTimeout  = 5 * time.Second
	maxHostTurnsBytes = 1 << 20
	maxHostTurns      = 10000
)

// HostTurns is the standalone reaper's ActiveFunc: when the host service is
// not running, no turn can be live (known, empty). When it runs, the host's
// GET /v1/turns on socketPath gives the live turn ids. Any failure returns
// an error, which Reap treats as "no host knowledge". The socket is only
// dialled when systemd reports the host running: a connection to an idle
// socket-activated host would start it.
func HostTurns(state HostState, socketPath string) ActiveFunc {
	return func(ctx context.Context) (map[string]bool, bool, error) {
		up, err := state.HostActive(ctx)
		if err != nil {
			return nil, false, err
		}
		if !up {
			return map[string]bool{}, true, nil
		}
		turns, err := fetchTurns(ctx, socketPath)
		if err != nil {
			return nil, false, err
		}
		return turns, true, nil
	}
}

func fetchTurns(ctx context.Context, socketPath string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, hostTurnsTimeout)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://host/v1/turns", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("host turns: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("host turns: status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHostTurnsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("host turns: %w", err)
	}
	if len(data) > maxHostTurnsBytes {
		return nil, fmt.Errorf("host turns: answer over %d bytes", maxHostTurnsBytes)
	}
	var body struct {
		Turns []struct {
			ID string `json:"id"`
		} `json:"turns"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, fmt.Errorf("host turns: %w", err)
	}
	if body.Turns == nil {
		return nil, fmt.Errorf("host turns: answer has no turns list")
	}
	if len(body.Turns) > maxHostTurns {
		return nil, fmt.Errorf("host turns: more than %d turns", maxHostTurns)
	}
	turns := make(map[string]bool, len(body.Turns))
	for _, t := range body.Turns {
		if err := ids.ValidTurnID(t.ID); err != nil {
			return nil, fmt.Errorf("host turns: %w", err)
		}
		turns[t.ID] = true
	}
	return turns, nil
}
