package actions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/netguard"
)

func allow(t *testing.T, s string) netguard.Policy {
	t.Helper()
	p, err := netguard.ParseAllow(s)
	require.NoError(t, err)
	return p
}

func post(r *actions.Runner, url string) (json.RawMessage, *domain.Failure) {
	return r.Run(context.Background(), engine.ActionCall{
		Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionHTTP, HTTPAction: domain.HTTPAction{URL: url}}}, Input: json.RawMessage(`{"x":1}`), IdempotencyKey: "j/s/1",
	})
}

// guardServer answers "ok" on /ok and redirects elsewhere; it counts the
// requests that reach it.
func guardServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, port, _ := net.SplitHostPort(r.Host)
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/to-v6-loopback":
			http.Redirect(w, r, "http://[::1]:"+port+"/ok", http.StatusTemporaryRedirect)
		case "/to-localhost":
			http.Redirect(w, r, "http://localhost:"+port+"/ok", http.StatusTemporaryRedirect)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
		case "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case "/to-gopher":
			http.Redirect(w, r, "gopher://127.0.0.1:"+port+"/_x", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A destination the guard refuses fails the step as fatal, naming the
// rule, and the request never leaves.
func TestHTTPActionRefusesTheLocalNetwork(t *testing.T) {
	t.Parallel()
	srv, hits := guardServer(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	localhost := "http://localhost:" + port
	byCIDR := allow(t, "127.0.0.1/32")
	for _, tc := range []struct {
		name   string
		runner *actions.Runner
		url    string
		want   string // in the message; "" for success
		hits   int64  // requests that reach the server
	}{
		{"loopback refused by default", &actions.Runner{}, srv.URL + "/ok",
			"POST " + srv.URL + "/ok refused: 127.0.0.1 is a loopback address (set STEPFLOW_HTTP_ALLOW to allow it)", 0},
		{"allowed by CIDR", &actions.Runner{Guard: byCIDR}, srv.URL + "/ok", "", 1},
		{"localhost resolves to loopback", &actions.Runner{}, localhost + "/ok", "is a loopback address", 0},
		{"localhost allowed by name", &actions.Runner{Guard: allow(t, "localhost")}, localhost + "/ok", "", 1},
		{"a custom client still gets the static check", &actions.Runner{HTTP: srv.Client()}, srv.URL + "/ok", "127.0.0.1 is a loopback address", 0},
		{"redirect to IPv6 loopback", &actions.Runner{Guard: byCIDR}, srv.URL + "/to-v6-loopback",
			"POST " + srv.URL + "/to-v6-loopback refused: redirect to http://[::1]:" + port + "/ok: ::1 is a loopback address", 1},
		{"redirect to a name that resolves into the allowed CIDR", &actions.Runner{Guard: allow(t, "127.0.0.1/32,10.0.0.0/8")}, srv.URL + "/to-localhost", "", 2}, // localhost is 127.0.0.1, allowed by CIDR
		{"redirect to cloud metadata", &actions.Runner{Guard: byCIDR}, srv.URL + "/to-metadata", "169.254.169.254 is a link-local address (the cloud metadata service)", 1},
		{"redirect to file", &actions.Runner{Guard: byCIDR}, srv.URL + "/to-file", `scheme "file" is not http or https`, 1},
		{"redirect to gopher", &actions.Runner{Guard: byCIDR}, srv.URL + "/to-gopher", `scheme "gopher"`, 1},
		{"redirect loop", &actions.Runner{Guard: byCIDR}, srv.URL + "/loop", fmt.Sprintf("more than %d redirects", netguard.MaxRedirects), int64(netguard.MaxRedirects)},
		{"decimal spelling", &actions.Runner{Guard: byCIDR}, "http://2130706433:" + port + "/ok", "not a canonical dotted quad", 0},
		{"hex spelling", &actions.Runner{Guard: byCIDR}, "http://0x7f000001:" + port + "/ok", "not a canonical dotted quad", 0},
		{"octal spelling", &actions.Runner{Guard: byCIDR}, "http://0177.0.0.1:" + port + "/ok", "not a canonical dotted quad", 0},
		{"short spelling", &actions.Runner{Guard: byCIDR}, "http://127.1:" + port + "/ok", "not a canonical dotted quad", 0},
		{"IPv4-mapped metadata", &actions.Runner{Guard: byCIDR}, "http://[::ffff:169.254.169.254]/", "cloud metadata", 0},
		{"NAT64 loopback", &actions.Runner{Guard: byCIDR}, "http://[64:ff9b::7f00:1]:" + port + "/", "NAT64 form of 127.0.0.1", 0},
		{"private", &actions.Runner{Guard: byCIDR}, "http://10.0.0.1/", "10.0.0.1 is a private address", 0},
		{"ftp", &actions.Runner{}, "ftp://example.com/", `scheme "ftp"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: each case counts the server's requests.
			before := hits.Load()
			out, f := post(tc.runner, tc.url)
			require.Equal(t, tc.hits, hits.Load()-before, "requests that reached the server")
			if tc.want == "" {
				require.Nil(t, f)
				require.JSONEq(t, `{"ok":true}`, string(out))
				return
			}
			require.NotNil(t, f)
			require.Equal(t, domain.ClassFatal, f.Class, f.Message)
			require.Contains(t, f.Message, tc.want)
			require.True(t, strings.HasPrefix(f.Message, "POST "), f.Message)
		})
	}
}

func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	r := &actions.Runner{Guard: allow(t, "127.0.0.1/32")}
	far := time.Now().Add(30 * 24 * time.Hour).UTC().Format(http.TimeFormat)
	soon := time.Now().Add(2 * time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		after string
		want  time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"3600", actions.MaxRetryAfter},
		{"3601", actions.MaxRetryAfter},
		{"999999999", actions.MaxRetryAfter},
		{"99999999999999999999999", actions.MaxRetryAfter}, // overflows int64
		{"-5", 0},
		{"0", 0},
		{"soon", 0},
		{far, actions.MaxRetryAfter},
		{soon, actions.MaxRetryAfter},
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0}, // in the past
	} {
		_, f := post(r, srv.URL+"/?after="+strings.ReplaceAll(tc.after, " ", "%20"))
		require.NotNil(t, f)
		require.Equal(t, domain.ClassRetryable, f.Class)
		require.Equal(t, tc.want, f.RetryAfter, "Retry-After %q", tc.after)
	}
	require.Equal(t, time.Hour, actions.MaxRetryAfter)
}

func TestHTTPResponseBounds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big": // valid JSON, one byte over the limit
			_, _ = w.Write([]byte(`"` + strings.Repeat("a", actions.MaxOutputBytes-1) + `"`))
		case "/huge": // far more than anyone reads
			w.WriteHeader(http.StatusOK)
			chunk := []byte(strings.Repeat("b", 64*1024))
			for range 2 * actions.MaxOutputBytes / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/limit": // exactly the limit
			_, _ = w.Write([]byte(`"` + strings.Repeat("a", actions.MaxOutputBytes-2) + `"`))
		case "/bad":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(strings.Repeat("x", 10000)))
		}
	}))
	t.Cleanup(srv.Close)
	r := &actions.Runner{Guard: allow(t, "127.0.0.1/32")}

	for _, p := range []string{"/big", "/huge"} {
		_, f := post(r, srv.URL+p)
		require.NotNil(t, f, p)
		require.Equal(t, domain.ClassFatal, f.Class, p)
		require.Contains(t, f.Message, fmt.Sprintf("over the limit of %d bytes", actions.MaxOutputBytes), p)
	}
	out, f := post(r, srv.URL+"/limit")
	require.Nil(t, f)
	require.Len(t, out, actions.MaxOutputBytes)

	_, f = post(r, srv.URL+"/bad")
	require.Equal(t, domain.ClassFatal, f.Class)
	require.Less(t, len(f.Message), 400, "a failure quotes at most ~200 bytes of the body")
	require.Contains(t, f.Message, "answered 400: xxx")
}
