// Package eventbus publishes job state changes to an EventBridge bus (the
// StepflowBus of template.yaml, STEPFLOW_EVENT_BUS): the engine's Publisher
// port. Each change is one event, source "stepflow", detail-type "Job
// State Change", its detail the engine.JobStateChange as JSON. A rule on
// the bus is how another system follows jobs, e.g.
//
//	{"source": ["stepflow"], "detail-type": ["Job State Change"], "detail": {"to": ["FAILED"]}}
package eventbus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Publisher = (*Bus)(nil)

// The event's source and detail-type, what rules match on.
const (
	Source     = "stepflow"
	DetailType = "Job State Change"
)

// maxEntries is the most entries one PutEvents request takes.
const maxEntries = 10

// API is the part of the EventBridge client the bus calls.
type API interface {
	PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Bus is the EventBridge adapter.
type Bus struct {
	api  API
	name string
}

// New answers a bus that puts events on the bus named (a name or an ARN).
func New(api API, name string) *Bus { return &Bus{api: api, name: name} }

// Publish puts one event per change, up to ten a request: a change with
// one or two job-level transitions (the usual) is one request. Entries
// EventBridge refuses (throttled, an internal failure) are put once more;
// those still refused are the error.
func (b *Bus) Publish(ctx context.Context, changes []engine.JobStateChange) error {
	entries := make([]ebtypes.PutEventsRequestEntry, 0, len(changes))
	for _, c := range changes {
		detail, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("job state change of %s: %w", c.JobID, err)
		}
		entries = append(entries, ebtypes.PutEventsRequestEntry{
			EventBusName: aws.String(b.name), Source: aws.String(Source), DetailType: aws.String(DetailType),
			Detail: aws.String(string(detail)), Time: aws.Time(c.At),
		})
	}
	for start := 0; start < len(entries); start += maxEntries {
		if err := b.put(ctx, entries[start:min(start+maxEntries, len(entries))]); err != nil {
			return err
		}
	}
	return nil
}

// put puts one request's entries, and those refused once more.
func (b *Bus) put(ctx context.Context, entries []ebtypes.PutEventsRequestEntry) error {
	var refused []string
	for range 2 {
		out, err := b.api.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		if err != nil {
			return fmt.Errorf("put %d events on %s: %w", len(entries), b.name, err)
		}
		if out.FailedEntryCount == 0 {
			return nil
		}
		// Results are in the order of the entries; a failed one has an
		// error code.
		var again []ebtypes.PutEventsRequestEntry
		refused = refused[:0]
		for i, r := range out.Entries {
			if r.ErrorCode != nil && i < len(entries) {
				again = append(again, entries[i])
				refused = append(refused, aws.ToString(r.ErrorCode)+": "+aws.ToString(r.ErrorMessage))
			}
		}
		if len(again) == 0 {
			return fmt.Errorf("put %d events on %s: %d refused, none named", len(entries), b.name, out.FailedEntryCount)
		}
		entries = again
	}
	return fmt.Errorf("put events on %s: %d refused: %s", b.name, len(refused), strings.Join(refused, "; "))
}
