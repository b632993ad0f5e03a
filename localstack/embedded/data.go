package embedded

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

var _ engine.Blobs = (*dataStore)(nil)

// dataStore keeps the data the engine keeps apart from jobs (large
// payloads and outputs) in memory, and hands it out by URLs a worker GETs
// without credentials, as S3's presigned URLs: served on a port of their
// own, each URL signed with this process's key, so no one makes a URL of
// another key or a later expiry. A restart makes a new key and port: the
// URLs handed out before end with it, as a worker's lease might.
type dataStore struct {
	*memory.Blobs
	now    func() time.Time
	secret []byte
	base   string
	server *http.Server
}

func serveData(b *memory.Blobs, now func() time.Time) (*dataStore, error) {
	d := &dataStore{Blobs: b, now: now, secret: make([]byte, 32)}
	if _, err := rand.Read(d.secret); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the data URLs: %w", err)
	}
	d.base = "http://" + ln.Addr().String()
	d.server = &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.server.Serve(ln) }()
	return d, nil
}

func (d *dataStore) sign(key string, expires int64) string {
	m := hmac.New(sha256.New, d.secret)
	m.Write([]byte(strconv.FormatInt(expires, 10) + "\n" + key))
	return hex.EncodeToString(m.Sum(nil))
}

// URL answers a URL that GETs the data under key until ttl from now.
func (d *dataStore) URL(_ context.Context, key string, ttl time.Duration) (string, error) {
	exp := d.now().Add(ttl).Unix()
	u := url.URL{Path: "/" + key, RawQuery: url.Values{"expires": {strconv.FormatInt(exp, 10)}, "signature": {d.sign(key, exp)}}.Encode()}
	return d.base + u.String(), nil
}

// ServeHTTP answers a GET of a URL URL made, until it expires.
func (d *dataStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/")
	exp, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	if err != nil || !hmac.Equal([]byte(d.sign(key, exp)), []byte(r.URL.Query().Get("signature"))) {
		http.Error(w, "not a URL this stack handed out", http.StatusForbidden)
		return
	}
	if !d.now().Before(time.Unix(exp, 0)) {
		http.Error(w, "this URL expired at "+time.Unix(exp, 0).UTC().Format(time.RFC3339), http.StatusForbidden)
		return
	}
	data, err := d.Get(r.Context(), key)
	if errors.Is(err, domain.ErrNotFound) {
		http.Error(w, "no such data", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}
