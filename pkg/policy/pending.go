package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Pending is what a standby turn's policy file holds before a turn binds
// to it: the turn id, the standby's expiry and the credential names its
// turn will use. It names no identity and no route, so a broker that reads
// it can serve nothing: it waits for the full policy, which the host writes
// over it (in place: the broker unit binds this very file) before the worker
// gets its stdin. DeadlineUnixMs carries the expiry under the name the
// reaper reads for every policy file. Credentials lets sandbox-credset give
// the standby's broker, which starts before its turn, exactly the names the
// turn's policy will name (the host discards a standby whose turn would
// need another).
type Pending struct {
	Version        int      `json:"version"`
	TurnID         string   `json:"turnId"`
	Pending        bool     `json:"pending"`
	DeadlineUnixMs int64    `json:"deadlineUnixMs"`
	Credentials    []string `json:"credentials,omitempty"`
}

// ErrNotBound: a policy file is still a standby's placeholder, no turn is
// bound to it yet (what a standby broker refuses a connection with).
var ErrNotBound = errors.New("standby not bound yet")

// MaxPendingCredentials bounds Pending.Credentials.
const MaxPendingCredentials = 64

// Expiry is when a broker still waiting gives up and exits.
func (p *Pending) Expiry() time.Time { return time.UnixMilli(p.DeadlineUnixMs) }

// Validate checks the placeholder's few fields.
func (p *Pending) Validate() error {
	switch {
	case p.Version != Version:
		return bad("version must be %d", Version)
	case !p.Pending:
		return bad("pending must be true")
	case p.DeadlineUnixMs <= 0:
		return bad("deadlineUnixMs must be positive")
	}
	if err := ids.ValidTurnID(p.TurnID); err != nil {
		return bad("turnId: %v", err)
	}
	if len(p.Credentials) > MaxPendingCredentials {
		return bad("at most %d credentials", MaxPendingCredentials)
	}
	for _, c := range p.Credentials {
		if !validCredName(c) {
			return bad("credentials: %q is not a credential name", c)
		}
	}
	return nil
}

// Marshal validates and encodes a placeholder.
func (p *Pending) Marshal() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// CredentialNames are the distinct credential names p uses, sorted: what
// its broker may load (sandbox-credset), and what a standby's placeholder
// lists for the policy its turn will get.
func (p *Policy) CredentialNames() []string {
	set := map[string]bool{}
	add := func(n string) {
		if n != "" {
			set[n] = true
		}
	}
	add(p.Model.Credential)
	if r := p.Rich; r != nil {
		add(r.Credential)
		if r.Compactor != nil {
			add(r.Compactor.Credential)
		}
	}
	for _, t := range p.Tools {
		add(t.Credential)
	}
	for _, s := range p.MCP {
		add(s.Credential)
	}
	if p.Egress != nil {
		for _, c := range p.Egress.Credentials {
			add(c.Credential)
		}
	}
	if p.Grants != nil {
		for _, n := range p.Grants.Credentials {
			add(n)
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Read loads a policy file that is either a full policy (validated, as
// Load) or a standby's placeholder; exactly one of the results is non-nil
// when err is nil.
func Read(path string) (*Policy, *Pending, error) {
	data, err := atomicfile.ReadFile(path, MaxBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: read: %w", err)
	}
	var probe struct {
		Pending bool `json:"pending"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, nil, bad("%v", err)
	}
	if probe.Pending {
		var p Pending
		if err := protocol.DecodeStrict(data, &p); err != nil {
			return nil, nil, bad("%v", err)
		}
		if err := p.Validate(); err != nil {
			return nil, nil, err
		}
		return nil, &p, nil
	}
	p, err := decode(data)
	if err != nil {
		return nil, nil, err
	}
	return p, nil, nil
}
