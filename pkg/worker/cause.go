package worker

import (
	"errors"
	"syscall"

	"github.com/roundtable-sandbox/sandbox/pkg/memory"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Cause classifies err as one of protocol's fixed failure causes, or ""
// when none applies. It reads only error identities (an errno anywhere in
// the chain first, then the worker's sentinel errors), never error text,
// which could carry a path or a payload; so its result is safe to log and
// to report to the host.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoCause(errno)
	}
	var refused *RefusedError
	switch {
	case errors.As(err, &refused), errors.Is(err, ErrBroker), errors.Is(err, errToolAnswer):
		return protocol.CauseBroker
	case errors.Is(err, memory.ErrCorrupt), errors.Is(err, ErrHistory):
		return protocol.CauseStore
	}
	return ""
}

func errnoCause(e syscall.Errno) string {
	switch e {
	case syscall.ENOSPC:
		return protocol.CauseNoSpace
	case syscall.EDQUOT:
		return protocol.CauseQuota
	case syscall.EROFS:
		return protocol.CauseReadOnly
	case syscall.EACCES, syscall.EPERM:
		return protocol.CausePermission
	case syscall.EIO:
		return protocol.CauseIO
	case syscall.EMFILE, syscall.ENFILE:
		return protocol.CauseTooManyFiles
	case syscall.ENOENT, syscall.ENOTDIR:
		return protocol.CauseNoFile
	case syscall.ENOMEM:
		return protocol.CauseOutOfMemory
	case syscall.ELOOP:
		// O_NOFOLLOW met a symlink where a workspace file belongs.
		return protocol.CauseStore
	}
	return protocol.CauseSystem
}

// turnError is a failed turn: the message for the worker's log and the
// fixed cause for its reply.
type turnError struct{ msg, cause string }

func (e *turnError) Error() string { return e.msg + ": " + ErrTurn.Error() }
func (e *turnError) Unwrap() error { return ErrTurn }

// failureCause is the cause a failed Run or a refused turn reports.
func failureCause(err error) string {
	var te *turnError
	switch {
	case errors.As(err, &te) && te.cause != "":
		return te.cause
	case errors.Is(err, protocol.ErrInvalid), errors.Is(err, protocol.ErrTooLarge):
		return protocol.CauseInvalidTurn
	}
	if c := Cause(err); c != "" {
		return c
	}
	return protocol.CauseInternal
}
