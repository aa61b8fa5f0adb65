package broker

import (
	"errors"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/chat"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/rpc"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// Error categories of the broker. Every refusal wraps exactly one category
// (of this package or of one of its subpackages); status maps categories to
// an HTTP status and a generic public text in this one place.
var (
	ErrMethod         = errors.New("method not allowed")
	ErrNotFound       = errors.New("not found")
	ErrRefused        = errors.New("request refused")
	ErrUnauthorized   = errors.New("unauthorized")
	ErrLengthRequired = errors.New("length required")
	ErrTooLarge       = errors.New("request too large")
	ErrMediaType      = errors.New("unsupported media type")
	ErrCallLimit      = errors.New("call limit reached")
	ErrBusy           = errors.New("call in flight")
	ErrTurnOver       = errors.New("turn over")
	ErrUnavailable    = errors.New("unavailable")
	ErrUpstream       = errors.New("upstream failed")
	ErrUpstreamTime   = errors.New("upstream timed out")
	ErrToolFailed     = errors.New("tool failed")
	// ErrClientGone: the caller (the worker) closed its connection mid-call;
	// nothing upstream failed. The answer cannot reach anyone: its status
	// is for the log.
	ErrClientGone = errors.New("client closed the request")
	// ErrRefusalLimit: the turn spent its MaxRefusals.
	ErrRefusalLimit = errors.New("refusal limit reached")
)

// StatusClientClosed is the status logged for ErrClientGone (nginx's 499:
// not an HTTP status any client sees).
const StatusClientClosed = 499

type category struct {
	err    error
	status int
	public string
}

// categories is the one table from error category to status and public text.
// The public text is the body's "error" value: never a URL, header, input or
// upstream text.
var categories = []category{
	{ErrMethod, http.StatusMethodNotAllowed, "method not allowed"},
	{ErrNotFound, http.StatusNotFound, "not found"},
	{rpc.ErrUnknownTool, http.StatusNotFound, "not found"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{ErrLengthRequired, http.StatusLengthRequired, "length required"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, "request too large"},
	{ErrMediaType, http.StatusUnsupportedMediaType, "unsupported media type"},
	{ErrRefused, http.StatusBadRequest, "request refused"},
	{strictjson.ErrInvalid, http.StatusBadRequest, "request refused"},
	{chat.ErrInvalid, http.StatusBadRequest, "request refused"},
	{toolschema.ErrInvalid, http.StatusBadRequest, "request refused"},
	{rpc.ErrInvalid, http.StatusBadRequest, "request refused"},
	{ErrCallLimit, http.StatusTooManyRequests, "call limit reached"},
	{ErrBusy, http.StatusTooManyRequests, "call in flight"},
	{ErrClientGone, StatusClientClosed, "client closed request"},
	{ErrRefusalLimit, http.StatusTooManyRequests, "refusal limit reached"},
	{ErrTurnOver, http.StatusServiceUnavailable, "turn over"},
	{ErrIncompatibleWorker, http.StatusConflict, "worker incompatible"},
	{credential.ErrMissing, http.StatusServiceUnavailable, "unavailable"},
	{credential.ErrInvalid, http.StatusServiceUnavailable, "unavailable"},
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{hosttool.ErrTimeout, http.StatusGatewayTimeout, "tool timed out"},
	{hosttool.ErrTooLarge, http.StatusBadGateway, "tool failed"},
	{hosttool.ErrFailed, http.StatusBadGateway, "tool failed"},
	{ErrToolFailed, http.StatusBadGateway, "tool failed"},
	{ErrUpstreamTime, http.StatusGatewayTimeout, "upstream timed out"},
	{ErrUpstream, http.StatusBadGateway, "upstream failed"},
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
