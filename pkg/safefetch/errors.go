package safefetch

import (
	"context"
	"errors"
)

// Error kinds: every error safefetch returns wraps exactly one, so a caller can
// map it to its own words (errors.Is) without parsing messages. Messages name
// the refused host, address and rule for operators; they are not for guests.
var (
	ErrURL      = errors.New("URL refused")
	ErrAddress  = errors.New("address refused")
	ErrResolve  = errors.New("name resolution failed")
	ErrOptions  = errors.New("options out of range")
	ErrConnect  = errors.New("connection failed")
	ErrRedirect = errors.New("redirect refused")
	ErrTooLarge = errors.New("body too large")
	ErrEncoding = errors.New("content encoding refused")
	ErrHTTP     = errors.New("HTTP exchange failed")
	ErrDeadline = errors.New("deadline exceeded")
	ErrCanceled = errors.New("canceled by the caller")
)

// ctxKind is the kind of an ended context: its deadline, or the caller's
// cancellation.
func ctxKind(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrDeadline
	}
	return ErrCanceled
}

// Error is a refusal or failure with its kind.
type Error struct {
	Kind error
	msg  string
	err  error // underlying cause, if any
}

func (e *Error) Error() string {
	s := "safefetch: " + e.Kind.Error()
	if e.msg != "" {
		s += ": " + e.msg
	}
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

// Unwrap exposes the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.err != nil {
		return []error{e.Kind, e.err}
	}
	return []error{e.Kind}
}
