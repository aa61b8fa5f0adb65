package richsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// ErrBroker: the session's broker could not be reached or closed the
// control request without an answer (stopped, crashed, its socket gone).
var ErrBroker = errors.New("rich channel broker unreachable")

// HTTPControl speaks the control routes on a session's broker socket.
// It opens a connection per call (the broker checks each connection's
// peer uid) and never follows anything but the socket path it is given.
type HTTPControl struct{}

func (HTTPControl) client(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 16 << 10,
	}}
}

func (c HTTPControl) post(ctx context.Context, socket, route string, body []byte, max int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+route, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client(socket).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, context.Cause(ctx)
		}
		return 0, nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, context.Cause(ctx)
		}
		return 0, nil, fmt.Errorf("%w: answer cut: %v", ErrBroker, err)
	}
	if int64(len(data)) > max {
		return 0, nil, fmt.Errorf("control answer over %d bytes", max)
	}
	return resp.StatusCode, data, nil
}

// Status asks the broker whether its worker is up.
func (c HTTPControl) Status(ctx context.Context, socket string) (policy.ControlStatus, error) {
	var st policy.ControlStatus
	code, data, err := c.post(ctx, socket, policy.RouteControlStatus, nil, 4<<10)
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("control status answered %d", code)
	}
	if err := protocol.DecodeStrict(data, &st); err != nil {
		return st, fmt.Errorf("control status answer malformed")
	}
	return st, nil
}

// Turn binds b and waits for the worker's reply packet, which is checked
// again here (the broker validated it; the host trusts no packet unread).
func (c HTTPControl) Turn(ctx context.Context, socket string, b policy.Bind) (*richproto.Result, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	code, data, err := c.post(ctx, socket, policy.RouteControlTurn, body, richproto.MaxPacketBytes)
	if err != nil {
		return nil, err
	}
	if code == http.StatusConflict {
		// The broker withheld a private tool result from a worker without
		// the privateTo and readerRecords capabilities (or the worker
		// reported private history without them).
		return nil, ErrWorkerIncompatible
	}
	if code != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		// The broker's public words only (a fixed category).
		return nil, fmt.Errorf("rich broker refused or failed the turn: %d %.64q", code, e.Error)
	}
	var res richproto.Result
	if err := protocol.DecodeStrict(data, &res); err != nil {
		return nil, errors.New("reply packet malformed")
	}
	if err := res.Validate(); err != nil {
		return nil, fmt.Errorf("reply packet invalid: %w", err)
	}
	return &res, nil
}
