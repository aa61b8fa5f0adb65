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

// do sends one control request; the caller reads and closes the answer.
func (c HTTPControl) do(ctx context.Context, socket, route string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+route, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client(socket).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	return resp, nil
}

func (c HTTPControl) post(ctx context.Context, socket, route string, body []byte, max int64) (int, []byte, error) {
	resp, err := c.do(ctx, socket, route, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return 0, nil, c.cut(ctx, err)
	}
	if int64(len(data)) > max {
		return 0, nil, fmt.Errorf("control answer over %d bytes", max)
	}
	return resp.StatusCode, data, nil
}

// cut names a control answer whose reading failed: the turn's end, or the
// broker's.
func (HTTPControl) cut(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("%w: answer cut: %v", ErrBroker, err)
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
// The packet is decoded as it is read (richproto.DecodeResult), after
// reserve took its length from the host's reply budget: the caller
// releases what reserve took once it is done with the files.
func (c HTTPControl) Turn(ctx context.Context, socket string, b policy.Bind, reserve ReserveFunc) (*richproto.Result, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, socket, policy.RouteControlTurn, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		// The broker withheld a private tool result from a worker without
		// the privateTo and readerRecords capabilities (or the worker
		// reported private history without them).
		return nil, ErrWorkerIncompatible
	default:
		var e struct {
			Error string `json:"error"`
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if err != nil {
			return nil, c.cut(ctx, err)
		}
		_ = json.Unmarshal(data, &e)
		// The broker's public words only (a fixed category).
		return nil, fmt.Errorf("rich broker refused or failed the turn: %d %.64q", resp.StatusCode, e.Error)
	}
	n := resp.ContentLength
	if n > richproto.MaxPacketBytes {
		return nil, fmt.Errorf("reply packet of %d bytes, over %d", n, richproto.MaxPacketBytes)
	}
	if n < 0 {
		n = richproto.MaxPacketBytes // the broker always sends a length
	}
	if reserve != nil {
		if err := reserve(ctx, n); err != nil {
			return nil, err
		}
	}
	res, err := richproto.DecodeResult(resp.Body)
	var re *richproto.ReadError
	switch {
	case errors.As(err, &re):
		return nil, c.cut(ctx, re.Err)
	case err != nil:
		// DecodeResult's categories and bounds, never the packet's text.
		return nil, fmt.Errorf("reply packet refused: %w", err)
	}
	return res, nil
}
