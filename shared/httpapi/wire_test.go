package httpapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/wire"
)

// A field added to an engine type and not to its wire type (or the other
// way round) would silently drop out of the API.
func TestWireTypesHaveTheEngineTypesFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine, wire any
		only         []string // fields on one side only, and why
	}{
		{engine.ClaimRequest{}, wire.ClaimRequest{}, nil},
		{engine.ClaimedLease{}, wire.ClaimedLease{}, nil},
		{engine.ClaimedResource{}, wire.ClaimedResource{}, nil},
		{engine.HeartbeatResult{}, wire.HeartbeatResult{}, nil},
		{engine.Outcome{}, wire.Outcome{}, []string{"Output", "Cost", "CostUSD"}}, // /complete's, not Fail's; cost {"usd"} is the engine's CostUSD
		{engine.OutcomeResult{}, wire.OutcomeResult{}, nil},
		{engine.Decision{}, wire.Decision{}, []string{"Key"}}, // the calling key's, not the body's
	} {
		fields := func(v any) map[string]bool {
			m := map[string]bool{}
			rt := reflect.TypeOf(v)
			for i := range rt.NumField() {
				m[rt.Field(i).Name] = true
			}
			for _, n := range c.only {
				delete(m, n)
			}
			return m
		}
		require.Equal(t, fields(c.engine), fields(c.wire), "%T", c.wire)
	}
}

func TestAClaimedLeaseIsAnsweredWithEveryField(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ref := domain.DataRef{Key: "k", Size: 3, SHA256: "abc"}
	l := engine.ClaimedLease{
		LeaseID: "l", JobID: "j", StepID: "s", Attempt: 2, MaxAttempts: 3, Input: json.RawMessage(`{"a":1}`),
		ExpiresAt: at, LeaseSeconds: 60, IdempotencyKey: "i", Deadline: &at,
		Resource: &engine.ClaimedResource{ID: "r", Capabilities: []string{"gpu"}, Labels: map[string]string{"z": "1"}},
		InputRef: &ref, InputURL: "u",
	}
	b, err := json.Marshal(claimed([]engine.ClaimedLease{l, {LeaseID: "m"}}))
	require.NoError(t, err)
	refJSON, err := json.Marshal(ref)
	require.NoError(t, err)
	require.JSONEq(t, `{"leases":[`+
		`{"lease_id":"l","job_id":"j","step_id":"s","attempt":2,"max_attempts":3,"input":{"a":1},"expires_at":"2025-01-02T03:04:05Z",`+
		`"lease_seconds":60,"idempotency_key":"i","deadline":"2025-01-02T03:04:05Z","resource":{"id":"r","capabilities":["gpu"],"labels":{"z":"1"}},`+
		`"input_ref":`+string(refJSON)+`,"input_url":"u"},`+
		`{"lease_id":"m","job_id":"","step_id":"","attempt":0,"max_attempts":0,"input":null,"expires_at":"0001-01-01T00:00:00Z","lease_seconds":0,"idempotency_key":""}]}`, string(b))

	b, err = json.Marshal(claimed(nil))
	require.NoError(t, err)
	require.Equal(t, `{"leases":[]}`, string(b), "no lease is an empty list, not null")
}

// Refusals name the API's fields, and a body that is not an object the
// engine type it has always been named by.
func TestAWorkerBodyIsRefusedNamingItsField(t *testing.T) {
	t.Parallel()
	r := &request{ev: events.APIGatewayV2HTTPRequest{Body: `[1]`}}
	var c wire.ClaimRequest
	require.EqualError(t, r.decodeWire(&c, domain.MaxBodyBytes), "body: must be engine.ClaimRequest, not JSON array")
	r.ev.Body = `{"max":"2"}`
	require.EqualError(t, r.decodeWire(&c, domain.MaxBodyBytes), "max: must be int, not JSON string")
	r.ev.Body = `{"by":"ann","Key":"k"}`
	var d wire.Decision
	require.EqualError(t, r.decodeWire(&d, domain.MaxBodyBytes), "Key: is not a known field", "the key is the caller's, never the body's")
}
