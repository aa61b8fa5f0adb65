package broker

import (
	"errors"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/chat"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/rpc"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// The categories every refusal wraps are pkg/broker/envelope's (and its
// route packages'); status maps them to an HTTP status and a generic public
// text in this one place.

type category struct {
	err    error
	status int
	public string
}

// categories is the one table from error category to status and public text.
// The public text is the body's "error" value: never a URL, header, input or
// upstream text.
var categories = []category{
	{envelope.ErrMethod, http.StatusMethodNotAllowed, "method not allowed"},
	{envelope.ErrNotFound, http.StatusNotFound, "not found"},
	{rpc.ErrUnknownTool, http.StatusNotFound, "not found"},
	{envelope.ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{envelope.ErrLengthRequired, http.StatusLengthRequired, "length required"},
	{envelope.ErrTooLarge, http.StatusRequestEntityTooLarge, "request too large"},
	{envelope.ErrMediaType, http.StatusUnsupportedMediaType, "unsupported media type"},
	{envelope.ErrRefused, http.StatusBadRequest, "request refused"},
	{strictjson.ErrInvalid, http.StatusBadRequest, "request refused"},
	{chat.ErrInvalid, http.StatusBadRequest, "request refused"},
	{toolschema.ErrInvalid, http.StatusBadRequest, "request refused"},
	{rpc.ErrInvalid, http.StatusBadRequest, "request refused"},
	{envelope.ErrCallLimit, http.StatusTooManyRequests, "call limit reached"},
	{envelope.ErrBusy, http.StatusTooManyRequests, "call in flight"},
	{envelope.ErrClientGone, envelope.StatusClientClosed, "client closed request"},
	{envelope.ErrRefusalLimit, http.StatusTooManyRequests, "refusal limit reached"},
	{envelope.ErrTurnOver, http.StatusServiceUnavailable, "turn over"},
	{errGrantConflict, http.StatusConflict, "grant conflict"},
	{errNoGrant, http.StatusGone, "no such grant"},
	{richroute.ErrIncompatibleWorker, http.StatusConflict, "worker incompatible"},
	{credential.ErrMissing, http.StatusServiceUnavailable, "unavailable"},
	{credential.ErrInvalid, http.StatusServiceUnavailable, "unavailable"},
	{envelope.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{hosttool.ErrTimeout, http.StatusGatewayTimeout, "tool timed out"},
	{hosttool.ErrTooLarge, http.StatusBadGateway, "tool failed"},
	{hosttool.ErrFailed, http.StatusBadGateway, "tool failed"},
	{envelope.ErrToolFailed, http.StatusBadGateway, "tool failed"},
	{envelope.ErrUpstreamTime, http.StatusGatewayTimeout, "upstream timed out"},
	{envelope.ErrUpstream, http.StatusBadGateway, "upstream failed"},
}

// status maps an error to its HTTP status and public text. Anything
// uncategorized is an internal error with a generic text.
func status(err error) (int, string) {
	for _, c := range categories {
		if errors.Is(err, c.err) {
			return c.status, c.public
		}
	}
	return http.StatusInternalServerError, "internal error"
}
