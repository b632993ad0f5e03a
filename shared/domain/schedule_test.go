package domain

import (
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
)

const tickJob = `{"steps":[{"id":"a","action":{"type":"pass"}}]}`

func mustSchedule(t *testing.T, body string, now time.Time) *Schedule {
	t.Helper()
	s, _, err := ParseSchedule("t1", []byte(body), "h", now)
	require.NoError(t, err)
	return s
}

// ticks fires s at each of its ticks up to until, as a sweep running at
// every tick would, and answers them.
func ticks(t *testing.T, s *Schedule, until time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for {
		tick, due := s.Due(until)
		if !due {
			return out
		}
		out = append(out, tick)
		s.Ran(tick, s.RunID(tick), tick)
	}
}

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func TestEveryTicksOnAGridFromCreation(t *testing.T) {
	t.Parallel()
	created := time.Date(2030, 1, 1, 12, 0, 0, 250e6, time.UTC)
	s := mustSchedule(t, `{"id":"five","every":"5s","job":`+tickJob+`}`, created)
	require.Equal(t, "5s", s.Every)
	require.Equal(t, OverlapSkip, s.Overlap, "the default")
	require.Equal(t, created.Add(5*time.Second), *s.NextAt)

	_, due := s.Due(created.Add(4999 * time.Millisecond))
	require.False(t, due, "not before its time")
	got := ticks(t, s, created.Add(15*time.Second))
	require.Equal(t, []time.Time{created.Add(5 * time.Second), created.Add(10 * time.Second), created.Add(15 * time.Second)}, got)
	require.EqualValues(t, 3, s.Runs)
	require.Equal(t, created.Add(15*time.Second), *s.LastRunAt)
	require.Equal(t, s.RunID(created.Add(15*time.Second)), s.LastJobID)
	require.Equal(t, created.Add(20*time.Second), *s.NextAt)
}

// A schedule nothing swept for a while fires its missed tick once, late,
// and waits for the first tick after now: no burst makes up the others.
func TestMissedTicksFireOnce(t *testing.T) {
	t.Parallel()
	created := utc(2030, 1, 1, 12, 0)
	for _, body := range []string{
		`{"id":"s","every":"1m","job":` + tickJob + `}`,
		`{"id":"s","cron":"* * * * *","job":` + tickJob + `}`,
	} {
		s := mustSchedule(t, body, created)
		require.Equal(t, created.Add(time.Minute), *s.NextAt, body)
		now := created.Add(10*time.Minute + 30*time.Second) // ten ticks missed
		tick, due := s.Due(now)
		require.True(t, due, body)
		require.Equal(t, created.Add(time.Minute), tick, "the tick it waited for")
		s.Ran(tick, s.RunID(tick), now)
		require.Equal(t, created.Add(11*time.Minute), *s.NextAt, "%s: the first tick after now", body)
		_, due = s.Due(now)
		require.False(t, due, "%s: nothing more is due", body)
		require.EqualValues(t, 1, s.Runs)
	}
}

// Cron ticks are the instants at which the zone's wall clock matches:
// Berlin's spring-forward night has no 02:30, its fall-back night has two,
// and an hourly schedule ticks once each real hour through both.
func TestCronTicksAcrossDaylightSavingTime(t *testing.T) {
	t.Parallel()
	daily := mustSchedule(t, `{"id":"d","cron":"30 2 * * *","time_zone":"Europe/Berlin","job":`+tickJob+`}`, utc(2030, 3, 29, 12, 0))
	require.Equal(t, []time.Time{
		utc(2030, 3, 30, 1, 30), // 02:30 CET
		utc(2030, 4, 1, 0, 30),  // 02:30 CEST: 31 March has no 02:30
	}, ticks(t, daily, utc(2030, 4, 1, 12, 0)))

	daily = mustSchedule(t, `{"id":"d","cron":"30 2 * * *","time_zone":"Europe/Berlin","job":`+tickJob+`}`, utc(2030, 10, 26, 12, 0))
	require.Equal(t, []time.Time{
		utc(2030, 10, 27, 0, 30), // 02:30 CEST
		utc(2030, 10, 27, 1, 30), // 02:30 CET, an hour later
		utc(2030, 10, 28, 1, 30),
	}, ticks(t, daily, utc(2030, 10, 28, 12, 0)))

	for _, day := range []time.Time{utc(2030, 3, 30, 23, 0), utc(2030, 10, 26, 22, 0)} { // midnight in Berlin
		hourly := mustSchedule(t, `{"id":"h","cron":"0 * * * *","time_zone":"Europe/Berlin","job":`+tickJob+`}`, day)
		got := ticks(t, hourly, day.Add(6*time.Hour))
		require.Len(t, got, 6, "one tick each real hour: %v", got)
		for i, tick := range got {
			require.Equal(t, day.Add(time.Duration(i+1)*time.Hour), tick)
		}
	}

	weekdays := mustSchedule(t, `{"id":"w","cron":"0 9 * * 1-5","time_zone":"America/New_York","job":`+tickJob+`}`, utc(2030, 3, 8, 20, 0)) // a Friday, after 09:00 EST
	require.Equal(t, []time.Time{
		utc(2030, 3, 11, 13, 0), // Monday 09:00 EDT, the first weekday after Sunday's change (14:00 UTC before it)
		utc(2030, 3, 12, 13, 0),
	}, ticks(t, weekdays, utc(2030, 3, 12, 20, 0)))
}

// '?' is Quartz and AWS's "no specific value", alone in day-of-month or
// day-of-week: the days come from the other field.
func TestCronQuestionMarkLeavesTheDayToTheOtherField(t *testing.T) {
	t.Parallel()
	weekdays := mustSchedule(t, `{"id":"w","cron":"0 9 ? * 1-5","job":`+tickJob+`}`, utc(2030, 3, 8, 20, 0)) // a Friday
	require.Equal(t, "0 9 ? * 1-5", weekdays.Cron, "kept as given")
	require.Equal(t, []time.Time{utc(2030, 3, 11, 9, 0), utc(2030, 3, 12, 9, 0)}, ticks(t, weekdays, utc(2030, 3, 12, 20, 0)))
	firsts := mustSchedule(t, `{"id":"f","cron":"0 9 1 * ?","job":`+tickJob+`}`, utc(2030, 3, 8, 20, 0))
	require.Equal(t, []time.Time{utc(2030, 4, 1, 9, 0), utc(2030, 5, 1, 9, 0)}, ticks(t, firsts, utc(2030, 5, 20, 0, 0)))
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	created := utc(2030, 1, 1, 0, 0)
	s := mustSchedule(t, `{"id":"p","every":"10s","overlap":"allow","job":`+tickJob+`}`, created)
	require.True(t, s.Pause(created.Add(time.Second)))
	require.False(t, s.Pause(created.Add(time.Second)), "paused already")
	require.Nil(t, s.NextAt)
	_, due := s.Due(created.Add(time.Hour))
	require.False(t, due, "a paused schedule has no tick")

	require.True(t, s.Resume(created.Add(time.Hour+3*time.Second)))
	require.False(t, s.Resume(created.Add(time.Hour+3*time.Second)), "running already")
	require.Equal(t, created.Add(time.Hour+10*time.Second), *s.NextAt, "the first tick after the resume: none made up")
	require.Zero(t, s.Runs)
	require.Zero(t, s.Skipped)
}

func TestSkipCountsAndAdvances(t *testing.T) {
	t.Parallel()
	created := utc(2030, 1, 1, 0, 0)
	s := mustSchedule(t, `{"id":"s","every":"1m","job":`+tickJob+`}`, created)
	s.Skip("", created.Add(time.Minute))
	require.EqualValues(t, 1, s.Skipped)
	require.Equal(t, created.Add(2*time.Minute), *s.NextAt)
	s.Skip("job.steps[0].action.queue: tenant has too many worker queues", created.Add(2*time.Minute))
	require.Contains(t, s.LastError, "worker queues")
	tick, _ := s.Due(created.Add(3 * time.Minute))
	s.Ran(tick, "x", created.Add(3*time.Minute))
	require.Empty(t, s.LastError, "a run clears the last error")
}

func TestRunIDIsTheTicksAndTheSchedulesOwn(t *testing.T) {
	t.Parallel()
	created := utc(2030, 1, 1, 0, 0)
	s := mustSchedule(t, `{"id":"s","every":"1m","job":`+tickJob+`}`, created)
	tick := created.Add(time.Minute)
	id := s.RunID(tick)
	u, err := ulid.ParseStrict(id)
	require.NoError(t, err)
	require.Equal(t, ulid.Timestamp(tick), u.Time(), "its time is the tick's: listings sort runs by tick")
	require.Equal(t, id, s.RunID(tick), "the same tick, the same id")
	require.NotEqual(t, id, s.RunID(tick.Add(time.Minute)))

	other := *s
	other.ID = "t"
	require.NotEqual(t, id, other.RunID(tick), "another schedule")
	other = *s
	other.Tenant = "t2"
	require.NotEqual(t, id, other.RunID(tick), "another tenant")
	again := mustSchedule(t, `{"id":"s","every":"1m","job":`+tickJob+`}`, created.Add(time.Millisecond))
	require.NotEqual(t, id, again.RunID(tick), "the same id made again later: its runs are its own")
}

func TestRunSpecCarriesTheSchedule(t *testing.T) {
	t.Parallel()
	s := mustSchedule(t, `{"id":"s","every":"1m","job":{"queue":"q","payload":{"k":1},"steps":[{"id":"a","action":{"type":"pass"}}]}}`, utc(2030, 1, 1, 0, 0))
	spec, err := s.RunSpec()
	require.NoError(t, err)
	require.Equal(t, "s", spec.ScheduleID)
	require.Equal(t, "q", spec.Queue)
	require.JSONEq(t, `{"k":1}`, string(spec.Payload))

	_, err = ParseJobSpec([]byte(`{"schedule_id":"s","steps":[{"id":"a","action":{"type":"pass"}}]}`))
	var de *Error
	require.True(t, errors.As(err, &de))
	require.Equal(t, "schedule_id", de.Field, "a client cannot make a job look like a schedule's run")
}

func TestParseScheduleNamesTheFieldAtFault(t *testing.T) {
	t.Parallel()
	now := utc(2030, 1, 1, 0, 0)
	for _, tc := range []struct{ body, field string }{
		{`{"cron":"* * * * *","job":` + tickJob + `}`, "id"},
		{`{"id":"a b","cron":"* * * * *","job":` + tickJob + `}`, "id"},
		{`{"id":"s","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"* * * * *","every":"1m","job":` + tickJob + `}`, "every"},
		{`{"id":"s","cron":"* * * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 0 * * * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"@hourly","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"CRON_TZ=Asia/Tokyo * * * * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 0 30 2 *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"61 * * * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"* * * * *","time_zone":"Mars/Olympus","job":` + tickJob + `}`, "time_zone"},
		{`{"id":"s","cron":"* * * * *","time_zone":"Local","job":` + tickJob + `}`, "time_zone"},
		{`{"id":"s","every":"1m","time_zone":"UTC","job":` + tickJob + `}`, "time_zone"},
		{`{"id":"s","every":"soon","job":` + tickJob + `}`, "every"},
		{`{"id":"s","every":"999ms","job":` + tickJob + `}`, "every"},
		{`{"id":"s","every":"8785h","job":` + tickJob + `}`, "every"},
		{`{"id":"s","every":"1m","overlap":"queue","job":` + tickJob + `}`, "overlap"},
		{`{"id":"s","every":"1m"}`, "job"},
		{`{"id":"s","every":"1m","job":null}`, "job"},
		{`{"id":"s","every":"1m","job":{}}`, "job.steps"},
		{`{"id":"s","every":"1m","job":{"steps":[{"id":"a","action":{"type":"teleport"}}]}}`, "job.steps[0].action.type"},
		{`{"id":"s","every":"1m","job":{"steps":[{"id":"a","action":{"type":"pass","url":"http://x"}}]}}`, "job.steps[0].action.url"},
		{`{"id":"s","every":"1m","job":{"priority":7,"steps":[{"id":"a","action":{"type":"pass"}}]}}`, "job.priority"},
		{`{"id":"s","every":"1m","job":{"run_at":"2030-01-02T00:00:00Z","steps":[{"id":"a","action":{"type":"pass"}}]}}`, "job.run_at"},
		{`{"id":"s","every":"1m","jobs":` + tickJob + `}`, "jobs"},
		{`{"id":".","every":"1m","job":` + tickJob + `}`, "id"},
		{`{"id":"..","every":"1m","job":` + tickJob + `}`, "id"},
		{`{"id":"s","every":"1m","job":{"steps":[{"id":"..","action":{"type":"pass"}}]}}`, "job.steps[0].id"},
		{`{"id":"s","cron":"? * * * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 ? * * 1","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 9 * ? 1","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 9 ? * ?","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 9 1,? * *","job":` + tickJob + `}`, "cron"},
		{`{"id":"s","cron":"0 9 ?/2 * *","job":` + tickJob + `}`, "cron"},
	} {
		_, _, err := ParseSchedule("t1", []byte(tc.body), "h", now)
		var de *Error
		require.True(t, errors.As(err, &de), "%s: %v", tc.body, err)
		require.Equal(t, CodeInvalid, de.Code, tc.body)
		require.Equal(t, tc.field, de.Field, "%s: %v", tc.body, err)
	}
}

func TestParseScheduleKeepsWhatItWasGiven(t *testing.T) {
	t.Parallel()
	now := utc(2030, 1, 1, 0, 0)
	s, job, err := ParseSchedule("t1", []byte(`{"id":"nightly.report","cron":" 0 3 * * * ","time_zone":"Asia/Tokyo","overlap":"allow",
		"job": {"queue": "reports", "steps": [{"id": "a", "action": {"type": "pass"}}]}}`), "hash", now)
	require.NoError(t, err)
	require.Equal(t, "0 3 * * *", s.Cron)
	require.Equal(t, "Asia/Tokyo", s.TimeZone)
	require.Equal(t, OverlapAllow, s.Overlap)
	require.Equal(t, `{"queue":"reports","steps":[{"id":"a","action":{"type":"pass"}}]}`, string(s.Job), "kept compact")
	require.Equal(t, "reports", job.Queue)
	require.Equal(t, utc(2030, 1, 1, 18, 0), *s.NextAt, "03:00 in Tokyo")
	require.Equal(t, "t1", s.Tenant)
	require.Equal(t, "hash", s.RequestHash)

	s = mustSchedule(t, `{"id":"s","cron":"0 0 1 1 *","job":`+tickJob+`}`, now)
	require.Equal(t, "UTC", s.TimeZone, "the default zone")
	require.Equal(t, utc(2031, 1, 1, 0, 0), *s.NextAt, "strictly after now")
}
