package engine

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/stepflow/stepflow/shared/domain"
)

// HashKey answers how every store keeps an API key: its SHA-256, never the
// key itself.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// EncodeCursor makes the opaque cursor of a listing that goes on after id;
// it names the tenant, so another tenant's listing refuses it.
func EncodeCursor(tenant, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenant + "|" + id))
}

// DecodeCursor reads a cursor EncodeCursor made for tenant ("" for none).
func DecodeCursor(cur, tenant string) (string, error) {
	if cur == "" {
		return "", nil
	}
	bad := domain.Invalid("cursor", "is not a cursor this listing returned")
	raw, err := base64.RawURLEncoding.DecodeString(cur)
	if err != nil {
		return "", bad
	}
	t, id, ok := strings.Cut(string(raw), "|")
	if !ok || t != tenant || id == "" {
		return "", bad
	}
	return id, nil
}
