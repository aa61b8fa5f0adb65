package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/livesession"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
)

// registry is every kind of sandbox the host drives (DESIGN.md section
// 16), the one place the host names them: adding a kind is its package and
// a line here. The host makes them in this order (a kind finds the ones
// before it in kind.Deps.Made: delegated jobs the sealed turn's research)
// and stops them in it: rich sessions before the standbys (no turn takes
// either any more), then the kinds whose work the host's turn count
// already waited for. Everything else loops over the kinds through the
// optional interfaces of pkg/kind.
var registry = []kind.Registration{
	richsession.Registration,
	sealedturn.Registration,
	coderun.Registration,
	delegationrun.Registration,
	precheckrun.Registration,
	livesession.Registration,
}
