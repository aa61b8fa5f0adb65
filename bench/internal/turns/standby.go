package turns

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// standbyWait bounds how long a Before hook waits for the host.
const standbyWait = 60 * time.Second

// StandbyReady is a HostRunner.Before that waits until the channel's
// standby is ready, so the timed turn binds it.
func StandbyReady(client *http.Client, channel string) func(context.Context, int) error {
	return func(ctx context.Context, _ int) error {
		return poll(ctx, func() (bool, error) {
			var st struct {
				Standby string `json:"standby"`
			}
			if err := getJSON(ctx, client, "/v1/channels/"+url.PathEscape(channel), &st); err != nil {
				return false, err
			}
			return st.Standby == "ready", nil
		})
	}
}

// StandbyDiscarded is a HostRunner.Before that switches the channel off
// (discarding its standby) and on again, and waits until nothing of the
// standby is left, so the timed turn takes the cold path alone.
func StandbyDiscarded(client *http.Client, channel string) func(context.Context, int) error {
	tag := ids.ChannelTag(channel)
	return func(ctx context.Context, _ int) error {
		for _, mode := range []string{"off", "on"} {
			if err := SetMode(ctx, client, channel, mode); err != nil {
				return err
			}
		}
		return poll(ctx, func() (bool, error) {
			var list struct {
				Turns []struct {
					ChannelTag string `json:"channelTag"`
				} `json:"turns"`
			}
			if err := getJSON(ctx, client, "/v1/turns", &list); err != nil {
				return false, err
			}
			for _, t := range list.Turns {
				if t.ChannelTag == tag {
					return false, nil
				}
			}
			return true, nil
		})
	}
}

func poll(ctx context.Context, done func() (bool, error)) error {
	deadline := time.Now().Add(standbyWait)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("host state not reached within %s", standbyWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func getJSON(ctx context.Context, client *http.Client, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://host"+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := protocol.ReadBounded(resp.Body, 1<<20)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return json.Unmarshal(data, v)
}

// SetMode switches a channel's mode ("on", "off") through the host API.
func SetMode(ctx context.Context, client *http.Client, channel, mode string) error {
	body, _ := json.Marshal(map[string]string{"mode": mode})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://host/v1/channels/"+url.PathEscape(channel)+"/mode", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT mode %s: status %d", mode, resp.StatusCode)
	}
	return nil
}

// IsStandbyReady reports whether the channel's standby is ready now.
func IsStandbyReady(ctx context.Context, client *http.Client, channel string) (bool, error) {
	var st struct {
		Standby string `json:"standby"`
	}
	if err := getJSON(ctx, client, "/v1/channels/"+url.PathEscape(channel), &st); err != nil {
		return false, err
	}
	return st.Standby == "ready", nil
}
