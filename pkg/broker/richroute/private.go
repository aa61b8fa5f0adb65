package richroute

import (
	"errors"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// Private tool exchanges (issue 16): an exec or http host tool of a rich
// channel may answer the private envelope (hosttool.SplitPrivate); the
// broker checks privateTo against the bound turn's principal and passes it
// to the worker beside the result ({"result": ..., "privateTo": ...}),
// but only to a worker that declared both capabilities of the handshake
// (richproto.Capabilities). A private result meeting any other worker is
// never sent: the turn fails (ErrIncompatibleWorker reaches the host, which
// names the image to rebuild) and no further call of it is admitted.

// ErrIncompatibleWorker: the worker lacks the capabilities a private
// exchange or its retained private history needs.
var ErrIncompatibleWorker = errors.New("worker lacks the private-exchange capabilities")

// errIncompatible settles a turn whose worker met a private result.
var errIncompatible = errors.New("a private tool result met a worker without the privateTo and readerRecords capabilities")

// errHistoryIncompatible settles (or refuses) a turn for a worker that
// reports retained private history without both capabilities.
var errHistoryIncompatible = errors.New("worker reports private history without the capabilities")

// historyAllowed: the seed's rule that retained private history needs both
// capabilities (no announcement yet: nothing to refuse).
func historyAllowed(r *richproto.Ready) bool {
	return r == nil || !r.PrivateHistory || capable(r)
}

// capable reports whether a worker's announcement declares both
// capabilities.
func capable(r *richproto.Ready) bool {
	return r != nil && r.Capabilities.PrivateTo && r.Capabilities.ReaderRecords
}

// AdmitPrivate lets a private result through to a capable worker; for any
// other it poisons the bound turn (no later call of it is admitted) and
// settles it failed.
func (b *Routes) AdmitPrivate() error {
	s := b.rich
	s.mu.Lock()
	bd, ok := s.bound, capable(s.ready)
	if !ok && bd != nil {
		bd.poisoned = true
		bd.packet = true // no reply packet of the failed turn is admitted
	}
	s.mu.Unlock()
	if ok {
		return nil
	}
	if bd != nil {
		bd.settle(settleOutcome{err: errIncompatible})
	}
	b.log.Error("private tool result withheld: the worker lacks the privateTo and readerRecords capabilities; the turn fails")
	return refused("private result for an incompatible worker", ErrIncompatibleWorker)
}

// wellFormedReady: a nonempty ready body is one object without duplicate
// keys whose capabilities, when present, are an object of booleans
// (DecodeStrict has checked the names and types; null would slip through
// it as "no capabilities" and is refused here as malformed).
func wellFormedReady(body []byte) bool {
	obj, err := strictjson.DecodeObject(body)
	if err != nil {
		return false
	}
	if c, ok := obj["capabilities"]; ok {
		m, isObj := c.(map[string]any)
		if !isObj {
			return false
		}
		for _, v := range m {
			if _, isBool := v.(bool); !isBool {
				return false
			}
		}
	}
	if p, ok := obj["privateHistory"]; ok {
		if _, isBool := p.(bool); !isBool {
			return false
		}
	}
	return true
}
