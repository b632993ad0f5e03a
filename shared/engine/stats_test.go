package engine_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// ones sets every int64 field of the struct v points to to 1, answering
// their names, so a counter added later is covered without editing the
// tests below.
func ones(t *testing.T, v any) []string {
	t.Helper()
	s := reflect.ValueOf(v).Elem()
	var names []string
	for i := range s.NumField() {
		if f := s.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(1)
			names = append(names, s.Type().Field(i).Name)
		}
	}
	require.NotEmpty(t, names)
	return names
}

func TestStatsDeltaAddSumsEveryCounter(t *testing.T) {
	var d, o engine.StatsDelta
	names := ones(t, &d)
	ones(t, &o)
	o.Steps.Retries = 1
	o.Steps.Move(engine.StepMove{From: domain.StepPending, To: domain.StepRunning}, 1)
	d.Add(o)
	for _, n := range names {
		require.EqualValues(t, 2, reflect.ValueOf(d).FieldByName(n).Int(), n)
	}
	require.Equal(t, o.Steps, d.Steps, "the step counters are added too")
}

func TestStatsAddSumsEveryCounter(t *testing.T) {
	var d engine.StatsDelta
	ones(t, &d)
	var st engine.Stats
	names := ones(t, &st)
	st.Add(d)
	for _, n := range names {
		if n == "SpentTodayNanoUSD" {
			continue // no delta's: the stores sum today's hours themselves
		}
		require.EqualValues(t, 2, reflect.ValueOf(st).FieldByName(n).Int(), n)
	}
}

func TestStatsDeltaHourlyKeepsTheWindowedCounters(t *testing.T) {
	var d engine.StatsDelta
	names := ones(t, &d)
	d.Steps.Retries = 1
	h := d.Hourly()
	require.True(t, h.Steps.Empty())
	for _, n := range names {
		one := engine.StatsDelta{}
		reflect.ValueOf(&one).Elem().FieldByName(n).SetInt(1)
		// What Windowed counts is what Hourly keeps; the rest is zeroed.
		want := int64(0)
		if one.Windowed() {
			want = 1
		}
		require.Equal(t, want, reflect.ValueOf(h).FieldByName(n).Int(), n)
		require.False(t, one.Zero(), n)
	}
}
