package safefetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ConnectTimeout bounds one TCP connect (and TLS handshake, when the fetcher
// asks for one) to one vetted address; the next vetted address is tried after
// it.
const ConnectTimeout = 3 * time.Second

// ResolveTimeout bounds one resolution, inside whatever deadline the caller's
// context carries.
const ResolveTimeout = 5 * time.Second

// maxVetted bounds how many addresses of one answer are tried; every address
// of the answer is still vetted.
const maxVetted = 16

// Resolver answers a host name's addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer is the one way out: DialContext resolves a host once, refuses it
// unless every address is public and none is this box's own (ClassifyLocal),
// or it is an exact Allow entry, and connects only to those vetted
// addresses. The zero value is ready to use.
type Dialer struct {
	// Allow lists exact destinations (address and port) that may be dialled
	// although their address is not public: the operator's escape hatch for,
	// say, a LAN package mirror. Empty by default; nothing else widens the
	// dialer. Check it with ValidateAllow.
	Allow []netip.AddrPort

	// Local is this box's own addresses. nil means SystemLocalAddrs, the
	// process's rtnetlink watch; a fake in tests.
	Local LocalAddrs

	// Resolver answers host names. nil means Go's own resolver. A trusted test
	// seam: never set from configuration or guest input.
	Resolver Resolver

	// DialAddr connects to one vetted "ip:port". nil means a net.Dialer that
	// re-checks the socket address it connects to. A trusted test seam: never
	// set from configuration or guest input.
	DialAddr func(ctx context.Context, network, address string) (net.Conn, error)

	// connectTimeout replaces ConnectTimeout in tests.
	connectTimeout time.Duration
}

var goResolver = &net.Resolver{PreferGo: true}

// DialContext connects to address ("host:port", host a DNS name, a dotted
// IPv4 address or a bracketed IPv6 address) over network "tcp", "tcp4" or
// "tcp6". It has the signature of net.Dialer.DialContext so that an
// http.Transport or a proxy can use it directly.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	addrs, err := d.vetHostPort(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c, _, err := d.dialPinned(ctx, addrs, nil)
	return c, err
}

// vetHostPort parses and vets a dial address.
func (d *Dialer) vetHostPort(ctx context.Context, network, address string) ([]netip.AddrPort, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &Error{Kind: ErrAddress, msg: fmt.Sprintf("network %q is not tcp", network)}
	}
	h, p, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &Error{Kind: ErrAddress, msg: fmt.Sprintf("%q is not host:port", address)}
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return nil, &Error{Kind: ErrAddress, msg: fmt.Sprintf("port %q is not in 1-65535", p)}
	}
	var host string
	var lit netip.Addr
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" {
			return nil, &Error{Kind: ErrAddress, msg: fmt.Sprintf("host %q is not an IPv6 address without zone", h)}
		}
		host, lit = a.String(), a
	} else {
		host, lit, err = checkHost(h)
		if err != nil {
			return nil, err
		}
	}
	return d.resolve(ctx, network, host, lit, uint16(n))
}

// resolve looks host up once (unless it is a literal) and vets every address.
func (d *Dialer) resolve(ctx context.Context, network, host string, lit netip.Addr, port uint16) ([]netip.AddrPort, error) {
	var addrs []netip.Addr
	if lit.IsValid() {
		addrs = []netip.Addr{lit}
	} else {
		r := d.Resolver
		if r == nil {
			r = goResolver
		}
		rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
		// The trailing dot keeps the resolver's search list out of it.
		got, err := r.LookupNetIP(rctx, "ip", host+".")
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, &Error{Kind: ctxKind(ctx.Err()), msg: "resolving " + host, err: ctx.Err()}
			}
			return nil, &Error{Kind: ErrResolve, msg: host, err: err}
		}
		// Go's resolver returns /etc/hosts IPv4 entries in IPv4-mapped form,
		// so mapping carries no meaning in an answer: classify (and dial)
		// the IPv4 address the kernel would use. Literals keep their form and
		// a mapped literal is refused.
		for i := range got {
			got[i] = got[i].Unmap()
		}
		addrs = got
	}
	if len(addrs) == 0 {
		return nil, &Error{Kind: ErrResolve, msg: host + " has no addresses"}
	}
	var out []netip.AddrPort
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		if c := ClassifyLocal(a, d.Local); c != ClassPublic && !d.allowed(ap) {
			msg := fmt.Sprintf("%s is %s", ap, c)
			if a != lit {
				msg = fmt.Sprintf("%s resolves to %s, %s", host, ap, c)
			}
			if e, ok := Embedded(a); ok {
				msg += fmt.Sprintf(" (embeds %s, %s)", e, ClassifyLocal(e, d.Local))
			}
			return nil, &Error{Kind: ErrAddress, msg: msg}
		}
		if network == "tcp4" && !a.Is4() || network == "tcp6" && !a.Is6() || slices.Contains(out, ap) {
			continue
		}
		if len(out) < maxVetted {
			out = append(out, ap)
		}
	}
	if len(out) == 0 {
		return nil, &Error{Kind: ErrResolve, msg: fmt.Sprintf("%s has no %s address", host, network)}
	}
	return out, nil
}

func (d *Dialer) allowed(ap netip.AddrPort) bool {
	return slices.Contains(d.Allow, ap)
}

// dialPinned connects to the first of addrs that answers within the connect
// deadline (TLS handshake included when tlsConf is set) and reports which.
func (d *Dialer) dialPinned(ctx context.Context, addrs []netip.AddrPort, tlsConf *tls.Config) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, ap := range addrs {
		if ctx.Err() != nil {
			break
		}
		c, err := d.dialOne(ctx, ap, tlsConf)
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ap, err))
	}
	if err := ctx.Err(); err != nil {
		return nil, netip.AddrPort{}, &Error{Kind: ctxKind(err), msg: "connecting", err: errors.Join(append(errs, err)...)}
	}
	return nil, netip.AddrPort{}, &Error{Kind: ErrConnect, msg: fmt.Sprintf("%d vetted address(es)", len(addrs)), err: errors.Join(errs...)}
}

func (d *Dialer) dialOne(ctx context.Context, ap netip.AddrPort, tlsConf *tls.Config) (net.Conn, error) {
	timeout := d.connectTimeout
	if timeout <= 0 {
		timeout = ConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := d.DialAddr
	if dial == nil {
		nd := &net.Dialer{KeepAlive: 30 * time.Second, Control: pinControl(ap)}
		dial = nd.DialContext
	}
	c, err := dial(cctx, "tcp", ap.String())
	if err != nil {
		return nil, err
	}
	if tlsConf == nil {
		return c, nil
	}
	tc := tls.Client(c, tlsConf)
	if err := tc.HandshakeContext(cctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// pinControl refuses, at the socket, any connect to an address other than the
// vetted one: the last word before the kernel, whatever the code above did.
func pinControl(want netip.AddrPort) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		got, err := netip.ParseAddrPort(address)
		if err != nil || got.Addr().Unmap() != want.Addr().Unmap() || got.Port() != want.Port() {
			return fmt.Errorf("safefetch: socket address %s is not the vetted %s", address, want)
		}
		return nil
	}
}

// ValidateAllow checks an operator's Allow list: each entry an exact address
// and port, never unspecified, multicast, broadcast, IPv4-mapped, zoned, port
// 0, or a cloud metadata endpoint (those stay closed whatever the config says).
func ValidateAllow(allow []netip.AddrPort) error {
	for _, ap := range allow {
		a := ap.Addr()
		if !ap.IsValid() || ap.Port() == 0 {
			return &Error{Kind: ErrOptions, msg: fmt.Sprintf("allow entry %s needs an address and a port in 1-65535", ap)}
		}
		switch c := Classify(a); {
		case a.Zone() != "", a.Is4In6(),
			c == ClassUnspecified, c == ClassThisNetwork, c == ClassMulticast,
			c == ClassBroadcast, c == ClassMetadata:
			return &Error{Kind: ErrOptions, msg: fmt.Sprintf("allow entry %s is %s; only exact unicast destinations may be allowed", ap, c)}
		}
	}
	return nil
}

// ParseAllow parses "address:port" strings ("10.0.0.5:3142",
// "[fd00::5]:443") into a validated Allow list; the error names the entry.
func ParseAllow(entries []string) ([]netip.AddrPort, error) {
	out := make([]netip.AddrPort, 0, len(entries))
	for _, e := range entries {
		ap, err := netip.ParseAddrPort(e)
		if err != nil {
			return nil, &Error{Kind: ErrOptions, msg: fmt.Sprintf("allow entry %q is not address:port", e)}
		}
		if err := ValidateAllow([]netip.AddrPort{ap}); err != nil {
			return nil, err
		}
		out = append(out, ap)
	}
	return out, nil
}
