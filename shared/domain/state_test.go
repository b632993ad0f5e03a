package domain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A job stored before the step state was spelled CANCELLED (its step
// CANCELED, its log step_canceled) still loads and replays.
func TestOldCanceledSpellingReads(t *testing.T) {
	t.Parallel()
	raw := `{"id": "j1", "state": "CANCELLED", "steps": [{"spec": {"id": "a", "action": {"type": "noop"}}, "state": "CANCELED"}],
		"events": [{"seq": 1, "type": "job_created"}, {"seq": 2, "type": "step_canceled", "step": "a"}, {"seq": 3, "type": "job_cancelled"}]}`
	var j Job
	require.NoError(t, json.Unmarshal([]byte(raw), &j))
	require.Equal(t, StepCancelled, j.Steps[0].State)
	require.NoError(t, CheckReplay(&j))
	require.Equal(t, StepState("CANCELLED"), StepCancelled)
	require.Equal(t, "step_cancelled", StepCancelled.EventType())
}
