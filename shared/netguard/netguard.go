// Package netguard keeps outbound HTTP calls made on behalf of tenants (the
// http action) out of the network they run in: loopback (the emulator, the
// Lambda Runtime API on 127.0.0.1:9001), link-local (cloud metadata at
// 169.254.169.254 and fd00:ec2::254), private and unique-local ranges (VPC
// services), and every other address that is not public unicast, in every
// spelling (IPv4-mapped and NAT64 IPv6 forms, odd numeric host names).
//
// The check is made on the address actually dialled, through a net.Dialer
// Control function, so DNS answers and redirects cannot route around it.
// An allow list (STEPFLOW_HTTP_ALLOW) opens narrow exceptions.
//
// The package depends on the standard library only.
package netguard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// EnvAllow is the environment variable ParseAllow reads.
const EnvAllow = "STEPFLOW_HTTP_ALLOW"

// MaxRedirects is how many redirects a guarded client follows.
const MaxRedirects = 5

const hint = " (set " + EnvAllow + " to allow it)"

// RefusedError says a target was refused and by which rule.
type RefusedError struct {
	Target string // what was refused: a URL, or a dialled host:port
	Rule   string // why, e.g. "127.0.0.1 is a loopback address (set STEPFLOW_HTTP_ALLOW to allow it)"
}

func (e *RefusedError) Error() string { return e.Target + " refused: " + e.Rule }

// Policy decides which destinations outbound calls may reach. The zero
// Policy refuses every address that is not public unicast and every scheme
// but http and https; an allow list opens exceptions. A Policy is
// immutable and safe for concurrent use.
type Policy struct {
	nets  []netip.Prefix
	hosts map[string]bool // lower case, no trailing dot
}

// ParseAllow reads an allow list: comma-separated CIDRs ("10.1.0.0/16"),
// single addresses ("127.0.0.1", "::1") and host names ("localhost"). A
// CIDR or address allows dialled addresses in it; a host name allows URLs
// with that host, whatever it resolves to. The empty string is the default
// Policy.
func ParseAllow(s string) (Policy, error) {
	var p Policy
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if strings.Contains(item, "/") {
			pfx, err := netip.ParsePrefix(item)
			if err != nil {
				return Policy{}, fmt.Errorf("%q is not a CIDR like 10.1.0.0/16: %v", item, err)
			}
			p.nets = append(p.nets, pfx.Masked())
			continue
		}
		if a, err := netip.ParseAddr(strings.Trim(item, "[]")); err == nil {
			p.nets = append(p.nets, netip.PrefixFrom(a.WithZone(""), a.BitLen()))
			continue
		}
		h := normHost(item)
		if looksNumeric(h) {
			return Policy{}, fmt.Errorf("%q is not a canonical IP address; write IPv4 as a dotted quad like 127.0.0.1", item)
		}
		if !validHostName(h) {
			return Policy{}, fmt.Errorf("%q is neither a CIDR, an IP address nor a host name", item)
		}
		if p.hosts == nil {
			p.hosts = map[string]bool{}
		}
		p.hosts[h] = true
	}
	return p, nil
}

// String answers the allow list in ParseAllow's syntax.
func (p Policy) String() string {
	var parts []string
	for _, n := range p.nets {
		parts = append(parts, n.String())
	}
	hosts := make([]string, 0, len(p.hosts))
	for h := range p.hosts {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return strings.Join(append(parts, hosts...), ",")
}

// CheckURL is the static check made when a job is submitted: the scheme,
// the spelling of the host, and a literal IP host that is refused and not
// allowed. Host names are not resolved here; the dial-time check covers
// what they resolve to.
func (p Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &RefusedError{Target: raw, Rule: "not a URL"}
	}
	return p.checkURL(u)
}

func (p Policy) checkURL(u *url.URL) error {
	target := u.Redacted()
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	default:
		return &RefusedError{Target: target, Rule: fmt.Sprintf("scheme %q is not http or https", u.Scheme)}
	}
	if u.Host == "" {
		return &RefusedError{Target: target, Rule: "the URL has no host"}
	}
	if err := p.checkHost(u.Hostname()); err != nil {
		err.Target = target
		return err
	}
	return nil
}

// checkHost is the check of a URL host before any DNS lookup: allowed
// names pass, odd numeric spellings are refused, and a literal address is
// checked like a dialled one.
func (p Policy) checkHost(host string) *RefusedError {
	h := normHost(host)
	if p.hosts[h] {
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return p.checkAddr(a)
	}
	if looksNumeric(h) {
		return &RefusedError{Target: host, Rule: fmt.Sprintf("host %q is a numeric address that is not a canonical dotted quad (forms like 2130706433, 0x7f000001, 0177.0.0.1 and 127.1 are refused)", host)}
	}
	// net/http maps a Unicode host to ASCII (IDNA) before it dials, so
	// "１２７。０。０。１" is dialled as 127.0.0.1: the dial-time check
	// catches that, and here a non-ASCII host made of digits and dots in
	// any script is refused as well.
	if !isASCII(h) {
		if folded, ascii := foldWide(h); ascii {
			if rerr := p.checkHost(folded); rerr != nil {
				rerr.Target = host
				return rerr
			}
		} else if numericUnicode(folded) {
			return &RefusedError{Target: host, Rule: fmt.Sprintf("host %q is made of digits and dots outside ASCII (IDNA would read it as a numeric address)", host)}
		}
	}
	return nil
}

// foldWide maps fullwidth and halfwidth ASCII forms and the ideographic
// full stops to ASCII, as IDNA does, and reports whether the result is
// ASCII.
func foldWide(h string) (string, bool) {
	ascii := true
	folded := strings.Map(func(r rune) rune {
		switch {
		case r >= 0xFF01 && r <= 0xFF5E:
			r -= 0xFEE0
		case r == 0x3002 || r == 0xFF61:
			r = '.'
		}
		if r >= utf8.RuneSelf {
			ascii = false
		}
		return r
	}, h)
	return strings.ToLower(folded), ascii
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// numericUnicode reports whether a host holds only numbers (in any
// script), dots and the letters of hexadecimal numbers.
func numericUnicode(h string) bool {
	for _, r := range h {
		switch {
		case r == '.' || r == 'x' || unicode.IsNumber(r) || 'a' <= r && r <= 'f':
		case unicode.IsPunct(r) && r >= utf8.RuneSelf:
		default:
			return false
		}
	}
	return true
}

// CheckAddr checks one address as it would be dialled. It answers nil or a
// *RefusedError.
func (p Policy) CheckAddr(a netip.Addr) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	return nil
}

func (p Policy) checkAddr(a netip.Addr) *RefusedError {
	a = a.WithZone("")
	if p.allowsAddr(a) {
		return nil
	}
	rule := Classify(a)
	if rule == "" {
		return nil
	}
	return &RefusedError{Target: a.String(), Rule: rule + hint}
}

func (p Policy) allowsAddr(a netip.Addr) bool {
	for _, n := range p.nets {
		if n.Contains(a) || n.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

var (
	nat64         = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local    = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	v4Compatible  = netip.MustParsePrefix("::/96")
	metadataV4    = netip.MustParseAddr("169.254.169.254")
	metadataV6    = netip.MustParseAddr("fd00:ec2::254")
	broadcast     = netip.MustParseAddr("255.255.255.255")
	v4Unspecified = netip.MustParsePrefix("0.0.0.0/8")
	cgnat         = netip.MustParsePrefix("100.64.0.0/10")
	reservedV4    = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved
	}
	reservedV6 = []netip.Prefix{
		netip.MustParsePrefix("100::/64"),      // discard-only
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("fec0::/10"),     // deprecated site-local
	}
)

// Classify answers why an address may not be dialled by default ("127.0.0.1
// is a loopback address"), or "" for a public unicast address. IPv6 forms
// that carry an IPv4 address (IPv4-mapped, NAT64, 6to4) are judged by the
// address they carry.
func Classify(a netip.Addr) string {
	a = a.WithZone("")
	if !a.IsValid() {
		return "the address is not valid"
	}
	if a.Is4In6() {
		if r := classify4(a.Unmap()); r != "" {
			return fmt.Sprintf("%s is the IPv4-mapped form of %s, %s", a, a.Unmap(), r)
		}
		return ""
	}
	if a.Is4() {
		if r := classify4(a); r != "" {
			return fmt.Sprintf("%s is %s", a, r)
		}
		return ""
	}
	if r := classify6(a); r != "" {
		return fmt.Sprintf("%s is %s", a, r)
	}
	b := a.As16()
	embedded := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	switch {
	case nat64.Contains(a):
		if r := classify4(embedded(12)); r != "" {
			return fmt.Sprintf("%s is the NAT64 form of %s, %s", a, embedded(12), r)
		}
	case sixToFour.Contains(a):
		if r := classify4(embedded(2)); r != "" {
			return fmt.Sprintf("%s is the 6to4 form of %s, %s", a, embedded(2), r)
		}
	}
	return ""
}

// classify4 names the class of a non-public IPv4 address ("a loopback
// address"), or "" for public unicast.
func classify4(a netip.Addr) string {
	switch {
	case a == metadataV4:
		return "a link-local address (the cloud metadata service)"
	case a == broadcast:
		return "the broadcast address"
	case a.IsUnspecified():
		return "the unspecified address"
	case v4Unspecified.Contains(a):
		return "in 0.0.0.0/8 (this network)"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsPrivate():
		return "a private address"
	case cgnat.Contains(a):
		return "a shared (CGNAT) address"
	case a.IsMulticast():
		return "a multicast address"
	}
	for _, n := range reservedV4 {
		if n.Contains(a) {
			return "a reserved address (" + n.String() + ")"
		}
	}
	return ""
}

// classify6 names the class of a non-public native IPv6 address, or "".
func classify6(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a == metadataV6:
		return "a unique-local address (the cloud metadata service)"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsPrivate():
		return "a unique-local address"
	case a.IsMulticast():
		return "a multicast address"
	case nat64Local.Contains(a):
		return "a local-use NAT64 address (64:ff9b:1::/48)"
	case v4Compatible.Contains(a):
		return "a deprecated IPv4-compatible address (::/96)"
	}
	for _, n := range reservedV6 {
		if n.Contains(a) {
			return "a reserved address (" + n.String() + ")"
		}
	}
	return ""
}

// Control is the net.Dialer Control function that refuses a connection to
// an address the policy refuses. It sees the address actually dialled,
// after DNS.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		host, _, serr := net.SplitHostPort(address)
		if serr != nil {
			host = address
		}
		a, perr := netip.ParseAddr(host)
		if perr != nil {
			return &RefusedError{Target: address, Rule: "the dialled address is not an IP address"}
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	if rerr := p.checkAddr(ap.Addr()); rerr != nil {
		rerr.Target = address
		return rerr
	}
	return nil
}

// DialContext dials like a net.Dialer, refusing what the policy refuses:
// a host name on the allow list is dialled as is; any other host is checked
// for odd numeric spellings before DNS, and every address it resolves to
// is checked as it is dialled.
func (p Policy) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	open := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	guarded := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if p.hosts[normHost(host)] {
			return open.DialContext(ctx, network, addr)
		}
		if rerr := p.checkHost(host); rerr != nil {
			rerr.Target = addr
			return nil, &net.OpError{Op: "dial", Net: network, Err: rerr}
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// Transport answers an http.Transport that dials through the policy. It
// never uses a proxy (one from the environment would hide the real
// destination from the check).
func (p Policy) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           p.DialContext(30 * time.Second),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// CheckRedirect is an http.Client CheckRedirect that follows at most
// MaxRedirects redirects and refuses a target the static check refuses
// (another scheme, an odd spelling, a refused literal address).
func (p Policy) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return &RefusedError{Target: req.URL.Redacted(), Rule: fmt.Sprintf("more than %d redirects", MaxRedirects)}
	}
	return p.checkURL(req.URL)
}

// Client answers an http.Client whose every connection, including those
// of redirects, goes through the policy.
func (p Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: p.Transport(), CheckRedirect: p.CheckRedirect, Timeout: timeout}
}

// normHost lower-cases a host and drops one trailing dot and IPv6 brackets.
func normHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
	return h
}

// looksNumeric reports whether a host is made only of numeric labels
// (decimal, octal with a leading 0, or 0x-hex), the forms inet_aton and
// some resolvers read as an IPv4 address: 2130706433, 0x7f000001,
// 0177.0.0.1, 127.1. A canonical dotted quad also looks numeric; callers
// parse it as an address first.
func looksNumeric(h string) bool {
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		digits := label
		if strings.HasPrefix(label, "0x") {
			digits = label[2:]
			for _, c := range digits {
				if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
					return false
				}
			}
			continue
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// validHostName is a loose check of an allow-list host name: letters,
// digits, '-', '_' and dots.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
