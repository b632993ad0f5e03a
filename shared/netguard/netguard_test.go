package netguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/netguard"
)

func mustAllow(t *testing.T, s string) netguard.Policy {
	t.Helper()
	p, err := netguard.ParseAllow(s)
	require.NoError(t, err)
	return p
}

// urlHost writes an address as a URL host.
func urlHost(addr string) string {
	if strings.Contains(addr, ":") {
		return "[" + strings.ReplaceAll(addr, "%", "%25") + "]"
	}
	return addr
}

func requireRefused(t *testing.T, err error, rule string) *netguard.RefusedError {
	t.Helper()
	require.Error(t, err)
	var re *netguard.RefusedError
	require.True(t, errors.As(err, &re), "%v (%T) is not a *RefusedError", err, err)
	require.Contains(t, re.Rule, rule)
	require.Contains(t, err.Error(), " refused: ")
	return re
}

// Every range the default policy refuses, in IPv4, IPv6, IPv4-mapped and
// NAT64 forms, checked as a literal URL host, as an address and as a
// dialled address.
func TestDefaultPolicyRefusesNonPublicAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ addr, rule string }{
		{"127.0.0.1", "127.0.0.1 is a loopback address"},
		{"127.255.255.254", "loopback"},
		{"::1", "::1 is a loopback address"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fd00:ec2::254", "cloud metadata"},
		{"10.0.0.1", "10.0.0.1 is a private address"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "this network"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.2.1", "reserved"},
		{"198.18.0.1", "reserved"},
		{"2001:db8::1", "reserved"},
		{"fec0::1", "reserved"},
		{"::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback address"},
		{"::ffff:7f00:1", "IPv4-mapped form of 127.0.0.1"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, a loopback address"},
		{"64:ff9b::127.0.0.1", "NAT64 form of 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, a link-local address (the cloud metadata service)"},
		{"64:ff9b::10.1.2.3", "NAT64 form of 10.1.2.3, a private address"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"2002:7f00:1::1", "6to4 form of 127.0.0.1"},
		{"2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			p := netguard.Policy{}
			a := netip.MustParseAddr(tc.addr)

			re := requireRefused(t, p.CheckAddr(a), tc.rule)
			require.Contains(t, re.Rule, "set STEPFLOW_HTTP_ALLOW to allow it")
			require.Contains(t, netguard.Classify(a), tc.rule)

			requireRefused(t, p.CheckURL("http://"+urlHost(tc.addr)+":8080/x"), tc.rule)
			requireRefused(t, p.CheckURL("https://"+urlHost(tc.addr)+"/"), tc.rule)

			dialled := netip.AddrPortFrom(a.WithZone(""), 9001).String()
			re = requireRefused(t, p.Control("tcp", dialled, nil), tc.rule)
			require.Equal(t, dialled, re.Target)
		})
	}
}

func TestDefaultPolicyLetsPublicAddressesThrough(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "11.0.0.1", "172.15.255.255", "172.32.0.1", "100.63.255.255", "100.128.0.1",
		"169.253.255.255", "192.167.255.255", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			p := netguard.Policy{}
			a := netip.MustParseAddr(addr)
			require.Empty(t, netguard.Classify(a))
			require.NoError(t, p.CheckAddr(a))
			require.NoError(t, p.CheckURL("https://"+urlHost(addr)+"/hook"))
			require.NoError(t, p.Control("tcp4", netip.AddrPortFrom(a, 443).String(), nil))
		})
	}
}

// Numeric hosts that are not canonical dotted quads are what inet_aton and
// some resolvers read as an address: refused before any DNS lookup, with a
// rule of their own, whatever the allow list says.
func TestOddNumericSpellingsAreRefused(t *testing.T) {
	t.Parallel()
	allowAll := mustAllow(t, "0.0.0.0/0,::/0")
	for _, host := range []string{
		"2130706433", "0x7f000001", "0X7F000001", "0177.0.0.1", "017700000001", "127.1", "127.0.1", "0x7f.1",
		"0x7f.0x0.0x0.0x1", "127.000.000.001", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376", "10.1", "0", "0x0",
		"2130706433.",
	} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			for _, p := range []netguard.Policy{{}, allowAll} {
				re := requireRefused(t, p.CheckURL("http://"+host+"/latest/meta-data"), "not a canonical dotted quad")
				require.Equal(t, "http://"+host+"/latest/meta-data", re.Target)
				require.NotContains(t, re.Rule, "STEPFLOW_HTTP_ALLOW", "no allow list opens an odd spelling")
			}
			_, err := netguard.ParseAllow(host)
			require.Error(t, err, "an allow list cannot name an odd spelling")
		})
	}
	// Host names that merely look hexadecimal or start with digits are
	// names, resolved and checked when dialled.
	for _, host := range []string{"example.com", "dead.beef", "cafe", "1password.com", "123.example.com", "0x7f.example", "a.0x"} {
		require.NoError(t, netguard.Policy{}.CheckURL("https://"+host+"/"), host)
	}
	// Fullwidth forms and other scripts' digits, which IDNA folds to ASCII.
	for _, tc := range []struct{ host, rule string }{
		{"１２７.０.０.１", "127.0.0.1 is a loopback address"},
		{"127。0。0。1", "loopback"},
		{"１６９．２５４．１６９．２５４", "cloud metadata"},
		{"２１３０７０６４３３", "not a canonical dotted quad"},
		{"０ｘ７ｆ０００００１", "not a canonical dotted quad"},
		{"①②⑦.0.0.①", "digits and dots outside ASCII"},
		{"𝟏𝟐𝟕.𝟎.𝟎.𝟏", "digits and dots outside ASCII"},
	} {
		requireRefused(t, netguard.Policy{}.CheckURL("http://"+tc.host+"/"), tc.rule)
	}
	require.NoError(t, netguard.Policy{}.CheckURL("https://münchen.de/"))
	require.NoError(t, netguard.Policy{}.CheckURL("https://例え.jp/"))
	// A canonical quad with a trailing dot is that address.
	requireRefused(t, netguard.Policy{}.CheckURL("http://127.0.0.1./"), "loopback")
}

func TestOnlyHTTPAndHTTPSSchemes(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"ftp://example.com/", "file:///etc/passwd", "gopher://example.com:70/_x", "dict://example.com:11211/",
		"ldap://example.com/", "javascript:alert(1)", "//example.com/x", "/relative", "unix:///var/run/docker.sock",
	} {
		requireRefused(t, netguard.Policy{}.CheckURL(raw), "scheme")
	}
	require.NoError(t, netguard.Policy{}.CheckURL("HTTPS://Example.COM/x"))
	requireRefused(t, netguard.Policy{}.CheckURL("http:///x"), "no host")
	requireRefused(t, netguard.Policy{}.CheckURL("http://[::1"), "not a URL")
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"", ""},
		{" , ", ""},
		{"127.0.0.1/32", "127.0.0.1/32"},
		{"127.0.0.1", "127.0.0.1/32"},
		{"10.1.2.3/16", "10.1.0.0/16"},
		{"::1", "::1/128"},
		{"[::1]", "::1/128"},
		{"fd00::/8", "fd00::/8"},
		{"LocalHost.", "localhost"},
		{"127.0.0.1/32, localhost ,10.1.0.0/16", "127.0.0.1/32,10.1.0.0/16,localhost"},
	} {
		p, err := netguard.ParseAllow(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, p.String(), tc.in)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0/8", "not a host", "exa mple.com", "http://x", "127.1", "0x7f000001", "a..b"} {
		_, err := netguard.ParseAllow(bad)
		require.Error(t, err, bad)
	}
}

// The allow list opens exactly what it names: a CIDR the addresses in it
// (in any form that carries them), a host name that URL host.
func TestAllowListOpensNarrowExceptions(t *testing.T) {
	t.Parallel()
	p := mustAllow(t, "127.0.0.1/32,localhost,10.1.0.0/16,::1")
	for _, tc := range []struct {
		url  string
		rule string // "" when allowed
	}{
		{"http://127.0.0.1:9001/x", ""},
		{"http://[::ffff:127.0.0.1]/x", ""},
		{"http://127.0.0.2/x", "loopback"},
		{"http://localhost:8080/", ""},
		{"http://LOCALHOST./", ""},
		{"http://localhost.localdomain/", ""}, // a name: resolved and checked when dialled
		{"http://10.1.200.3/", ""},
		{"http://10.2.0.1/", "private"},
		{"http://[::1]:3000/", ""},
		{"http://169.254.169.254/latest/meta-data", "cloud metadata"},
		{"http://2130706433/", "canonical dotted quad"},
		{"gopher://127.0.0.1/", "scheme"},
	} {
		err := p.CheckURL(tc.url)
		if tc.rule == "" {
			require.NoError(t, err, tc.url)
			continue
		}
		requireRefused(t, err, tc.rule)
	}
	require.NoError(t, p.Control("tcp", "127.0.0.1:9001", nil))
	require.NoError(t, p.Control("tcp", "10.1.0.9:443", nil))
	requireRefused(t, p.Control("tcp", "10.0.0.9:443", nil), "private")
	requireRefused(t, p.Control("tcp", "[fe80::1]:80", nil), "link-local")
}

func TestErrorMessageNamesTargetAndRule(t *testing.T) {
	t.Parallel()
	err := netguard.Policy{}.CheckURL("http://127.0.0.1:9001/2018-06-01/runtime/invocation/next")
	require.EqualError(t, err, "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next refused: 127.0.0.1 is a loopback address (set STEPFLOW_HTTP_ALLOW to allow it)")
	err = netguard.Policy{}.CheckURL("http://user:secret@10.0.0.1/")
	require.NotContains(t, err.Error(), "secret")
}

// The guarded client checks the address it dials, so a host name that
// resolves to a refused address is refused, and a redirect is checked like
// the first request.
func TestClientChecksWhatItDials(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	var srvURL string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, "ok")
		case "/to-v6-loopback":
			_, port, _ := net.SplitHostPort(r.Host)
			http.Redirect(w, r, "http://[::1]:"+port+"/ok", http.StatusTemporaryRedirect)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
		case "/to-decimal":
			http.Redirect(w, r, "http://2130706433/", http.StatusFound)
		case "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case "/to-gopher":
			http.Redirect(w, r, "gopher://127.0.0.1:70/_x", http.StatusFound)
		case "/to-localhost":
			_, port, _ := net.SplitHostPort(r.Host)
			http.Redirect(w, r, "http://localhost:"+port+"/ok", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, srvURL+"/loop", http.StatusFound)
		case "/to-ok":
			http.Redirect(w, r, srvURL+"/ok", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	srvURL = srv.URL
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	localhost := "http://localhost:" + port

	get := func(p netguard.Policy, u string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		require.NoError(t, err)
		c := p.Client(10 * time.Second)
		defer c.CloseIdleConnections()
		res, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	cidr := mustAllow(t, "127.0.0.1/32")
	name := mustAllow(t, "localhost")
	for _, tc := range []struct {
		name   string
		policy netguard.Policy
		url    string
		rule   string // "" for success
	}{
		{"literal loopback refused by default", netguard.Policy{}, srv.URL + "/ok", "127.0.0.1 is a loopback address"},
		{"a name resolving to loopback is refused when dialled", netguard.Policy{}, localhost + "/ok", "loopback"},
		{"fullwidth digits, folded to ASCII before the dial", netguard.Policy{}, "http://１２７.０.０.１:" + port + "/ok", "loopback"},
		{"decimal spelling refused before any lookup", cidr, "http://2130706433:" + port + "/ok", "canonical dotted quad"},
		{"allowed by CIDR", cidr, srv.URL + "/ok", ""},
		{"allowed by host name", name, localhost + "/ok", ""},
		{"allowed by host name, not by address", name, srv.URL + "/ok", "loopback"},
		{"redirect within the allowed CIDR", cidr, srv.URL + "/to-ok", ""},
		{"redirect to IPv6 loopback", cidr, srv.URL + "/to-v6-loopback", "::1 is a loopback address"},
		{"redirect to cloud metadata", cidr, srv.URL + "/to-metadata", "cloud metadata"},
		{"redirect to a decimal address", cidr, srv.URL + "/to-decimal", "canonical dotted quad"},
		{"redirect to file", cidr, srv.URL + "/to-file", `scheme "file"`},
		{"redirect to gopher", cidr, srv.URL + "/to-gopher", `scheme "gopher"`},
		{"redirect from an allowed name to a refused address", name, localhost + "/to-metadata", "cloud metadata"},
		{"redirect loop", cidr, srv.URL + "/loop", fmt.Sprintf("more than %d redirects", netguard.MaxRedirects)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body, err := get(tc.policy, tc.url)
			if tc.rule == "" {
				require.NoError(t, err)
				require.Equal(t, "ok", body)
				return
			}
			requireRefused(t, err, tc.rule)
			var ue *url.Error
			require.True(t, errors.As(err, &ue))
		})
	}
	before := hits.Load()
	_, err = get(netguard.Policy{}, srv.URL+"/ok")
	requireRefused(t, err, "loopback")
	require.Equal(t, before, hits.Load(), "a refused request never reaches the server")
}

// A proxy from the environment would hide the destination from the dialler;
// the guarded transport never uses one.
func TestTransportUsesNoProxy(t *testing.T) {
	t.Parallel()
	require.Nil(t, netguard.Policy{}.Transport().Proxy)
	c := netguard.Policy{}.Client(time.Second)
	require.Equal(t, time.Second, c.Timeout)
	require.NotNil(t, c.CheckRedirect)
}
