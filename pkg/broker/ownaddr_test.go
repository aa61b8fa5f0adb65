package broker

import (
	"net/netip"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

type fakeLocal struct{}

func (fakeLocal) Contains(netip.Addr) (bool, error) { return false, nil }

// TestLocalAddrsWired: the broker's one dialer (fetch tools, attachments,
// and the proxy route, which New hands the same dialer) carries the box's
// own addresses it was given. TestBrokerOwnAddressIntegration shows all
// three refusing the box's own address with the real watch.
func TestLocalAddrsWired(t *testing.T) {
	p := basePolicy("https://model.example.com/v1", "https://tool.example.com/", "/bin/true")
	p.Tools = append(p.Tools, policy.Tool{Name: "fetch", Kind: policy.KindFetch})
	g := policy.DefaultEgress()
	p.Egress = &g
	var local safefetch.LocalAddrs = fakeLocal{}
	b, err := New(Config{Policy: p, Credentials: noCreds{}, LocalAddrs: local})
	if err != nil {
		t.Fatal(err)
	}
	if b.fetcher.Dialer == nil || b.fetcher.Dialer.Local != local {
		t.Errorf("the fetcher's dialer has Local %v, want the one given", b.fetcher.Dialer)
	}
}
