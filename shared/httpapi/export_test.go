package httpapi

import (
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/stepflow/stepflow/shared/domain"
)

// Internals the tests of package httpapi_test look at.

// Key cache bounds and the longest key looked up.
const (
	KnownKeysMax   = knownKeysMax
	UnknownKeysMax = unknownKeysMax
	MaxKeyBytes    = maxKeyBytes
	UnknownKeyTTL  = unknownKeyTTL
)

// KeyCacheLens answers how many known and unknown keys a's cache holds.
func (a *API) KeyCacheLens() (known, unknown int) {
	a.keys.init()
	return a.keys.known.Len(), a.keys.unknown.Len()
}

// SetKeyCacheBounds changes a's cache bounds; it takes effect only before
// a's first request.
func (a *API) SetKeyCacheBounds(known, unknown int) {
	a.keys.knownMax, a.keys.unknownMax = known, unknown
}

// CacheUnknownKey records hash as unknown, as a refused lookup would,
// without a table read: for filling the cache to its bound quickly.
func (a *API) CacheUnknownKey(hash string) {
	a.keys.init()
	a.keys.unknown.Add(hash, a.now().Add(unknownKeyTTL))
}

// FitsResponse and MaxResponseBytes: whether GET .../output answers data in
// its body.
var FitsResponse = fitsResponse

const MaxResponseBytes = maxResponseBytes

// ErrorCodes answers every code the one error table maps to a status.
func ErrorCodes() map[domain.Code]int { return statusOf }

// Fail answers err as a's error response to ev.
func (a *API) Fail(ev events.APIGatewayV2HTTPRequest, err error) events.APIGatewayV2HTTPResponse {
	return a.fail(ev, err)
}

// KeylessRoutes answers the route keys that answer without an API key,
// sorted.
func KeylessRoutes() []string {
	var out []string
	for _, rt := range routes {
		if rt.keyless {
			out = append(out, rt.key)
		}
	}
	slices.Sort(out)
	return out
}
