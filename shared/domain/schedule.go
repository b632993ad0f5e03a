package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // the Lambda runtime (provided.al2023) has no zoneinfo of its own

	"github.com/oklog/ulid/v2"
	"github.com/robfig/cron/v3"
)

// Limits of a schedule.
const (
	MinScheduleEvery = time.Second
	MaxScheduleEvery = 366 * 24 * time.Hour
)

// Overlap says what a tick does while the schedule's last run is
// unfinished.
type Overlap string

const (
	OverlapSkip  Overlap = "skip"  // the tick makes no job (counted in Skipped)
	OverlapAllow Overlap = "allow" // the tick makes its job anyway
)

// ScheduleSpec is the body of POST /v1/schedules.
type ScheduleSpec struct {
	ID       string          `json:"id"`
	Cron     string          `json:"cron,omitempty"`
	TimeZone string          `json:"time_zone,omitempty"`
	Every    string          `json:"every,omitempty"`
	Overlap  Overlap         `json:"overlap,omitempty"`
	Job      json.RawMessage `json:"job"`
}

// Schedule makes a job at each of its ticks: on a cron expression in a
// time zone, or every fixed interval from its creation.
type Schedule struct {
	Tenant   string  `json:"tenant"`
	ID       string  `json:"id"`
	Cron     string  `json:"cron,omitempty"`
	TimeZone string  `json:"time_zone,omitempty"` // with Cron
	Every    string  `json:"every,omitempty"`     // a Go duration, as time.Duration prints it
	Overlap  Overlap `json:"overlap"`
	// Job is the body each tick submits, as POST /v1/jobs takes it.
	Job    json.RawMessage `json:"job"`
	Paused bool            `json:"paused,omitempty"`
	// NextAt is the tick the schedule waits for; nil while paused.
	NextAt *time.Time `json:"next_at,omitempty"`
	// LastRunAt is the tick of the last job made; LastJobID that job.
	LastRunAt *time.Time `json:"last_run_at,omitempty"`
	LastJobID string     `json:"last_job_id,omitempty"`
	// LastError is why the last tick made no job, when its job was refused.
	LastError string `json:"last_error,omitempty"`
	Runs      int64  `json:"runs"`
	Skipped   int64  `json:"skipped"` // ticks that made no job
	Version   int64  `json:"version"`
	// RequestHash identifies the body that created it: creating it again
	// with the same body answers it, with another one is a conflict.
	RequestHash string    `json:"request_hash,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// cronParser reads the standard five fields (minute, hour, day of month,
// month, day of week) and nothing else: no seconds, no @descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// checkCronQuestionMarks takes '?' as Quartz and AWS's cron expressions
// do: "no specific value", alone in day-of-month or day-of-week, so that
// "0 9 ? * MON-FRI" written for EventBridge means here what it means
// there. The parser reads '?' as '*' in any field, which is that meaning
// in those two (a '*' there leaves the day to the other field) and a
// surprise anywhere else ("? * * * *" would run every minute), so '?'
// elsewhere, in a list or a range, or in both day fields, is refused.
func checkCronQuestionMarks(expr string) error {
	if !strings.Contains(expr, "?") {
		return nil
	}
	fields := strings.Fields(expr) // five: the parser took it
	names := [5]string{"minute", "hour", "day-of-month", "month", "day-of-week"}
	for i, f := range fields {
		if !strings.Contains(f, "?") {
			continue
		}
		if (i != 2 && i != 4) || f != "?" {
			return Invalid("cron", "%q: '?' (no specific value) may stand only alone, in day-of-month or day-of-week, not in %s %q; use '*' for every %s", expr, names[i], f, names[i])
		}
	}
	if fields[2] == "?" && fields[4] == "?" {
		return Invalid("cron", "%q: '?' may stand in day-of-month or in day-of-week, not both: give the days in the other, or '*' for every day", expr)
	}
	return nil
}

// ValidScheduleID reports whether s may name a schedule (as a step id).
func ValidScheduleID(s string) bool { return validID(s) }

// ParseSchedule decodes and validates the body of POST /v1/schedules and
// answers the schedule it makes for tenant at now, its first tick ahead,
// and its job's spec (for the checks that need the world: targets, worker
// queues, priority). Every error is an *Error naming the field; the job's
// fields are named under job (job.steps[0].action.type).
func ParseSchedule(tenant string, body []byte, requestHash string, now time.Time) (*Schedule, *JobSpec, error) {
	if len(body) > MaxBodyBytes {
		return nil, nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("body is %d bytes; the limit is %d", len(body), MaxBodyBytes)}
	}
	var spec ScheduleSpec
	if err := DecodeStrict(body, &spec); err != nil {
		return nil, nil, err
	}
	if !ValidScheduleID(spec.ID) {
		return nil, nil, Invalid("id", "%s", idRule)
	}
	s := &Schedule{
		Tenant: tenant, ID: spec.ID, Overlap: spec.Overlap, RequestHash: requestHash,
		CreatedAt: now, UpdatedAt: now,
	}
	if err := s.setTiming(spec); err != nil {
		return nil, nil, err
	}
	switch s.Overlap {
	case "":
		s.Overlap = OverlapSkip
	case OverlapSkip, OverlapAllow:
	default:
		return nil, nil, Invalid("overlap", "%q is not skip or allow", s.Overlap)
	}
	job, compact, err := parseScheduledJob(spec.Job)
	if err != nil {
		return nil, nil, err
	}
	s.Job = compact
	next := s.next(now)
	if next.IsZero() {
		return nil, nil, Invalid("cron", "%q never matches a date (within five years)", s.Cron)
	}
	s.NextAt = &next
	return s, job, nil
}

// setTiming sets when s ticks: by cron in a time zone, or every so long.
func (s *Schedule) setTiming(spec ScheduleSpec) error {
	switch {
	case spec.Cron != "" && spec.Every != "":
		return Invalid("every", "cannot be given with cron: a schedule runs on one or the other")
	case spec.Cron == "" && spec.Every == "":
		return Invalid("cron", `is required (five fields, e.g. "0 9 * * 1-5"), or every (a duration, e.g. "15m")`)
	case spec.Every != "":
		if spec.TimeZone != "" {
			return Invalid("time_zone", "applies only with cron: every counts real time")
		}
		d, err := time.ParseDuration(spec.Every)
		if err != nil {
			return Invalid("every", "%q is not a duration such as 30s, 15m or 24h", spec.Every)
		}
		if d < MinScheduleEvery || d > MaxScheduleEvery {
			return Invalid("every", "must be between 1s and 8784h (366 days)")
		}
		s.Every = d.String()
		return nil
	}
	s.Cron, s.TimeZone = strings.TrimSpace(spec.Cron), spec.TimeZone
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	if _, err := time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "Local" {
		return Invalid("time_zone", "%q is not an IANA time zone such as Europe/Berlin or UTC", s.TimeZone)
	}
	if strings.Contains(s.Cron, "TZ=") {
		return Invalid("cron", "must not name a time zone; use time_zone")
	}
	if _, err := cronParser.Parse(s.Cron); err != nil {
		return Invalid("cron", "%q is not five cron fields (minute hour day-of-month month day-of-week): %v", s.Cron, err)
	}
	return checkCronQuestionMarks(s.Cron)
}

// parseScheduledJob checks the job a schedule's ticks submit, and answers
// it and its JSON compacted, as the schedule keeps it.
func parseScheduledJob(raw json.RawMessage) (*JobSpec, []byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, Invalid("job", "is required: the job each tick submits, as POST /v1/jobs takes it")
	}
	job, err := ParseJobSpec(raw)
	if err != nil {
		return nil, nil, UnderField("job", err)
	}
	if job.RunAt != nil {
		return nil, nil, Invalid("job.run_at", "does not apply to a scheduled job: its ticks say when it runs")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, nil, Invalid("job", "is not JSON: %v", err) // DecodeStrict read it already
	}
	return job, compact.Bytes(), nil
}

// UnderField names err's field under parent (job.steps[0].id), for a body
// nested in another.
func UnderField(parent string, err error) error {
	var de *Error
	if !errors.As(err, &de) || de.Code != CodeInvalid {
		return err
	}
	field := parent
	if de.Field != "" && de.Field != "body" {
		field = parent + "." + de.Field
	}
	return &Error{Code: de.Code, Field: field, Message: de.Message}
}

// next answers the first tick strictly after t, or the zero time for a
// cron expression that never matches. Every ticks on a grid from the
// schedule's creation; cron ticks are the instants at which the time
// zone's wall clock matches: a time a spring-forward skips has no tick
// that day, and one a fall-back repeats ticks at each of its two instants.
func (s *Schedule) next(t time.Time) time.Time {
	if s.Every != "" {
		d, _ := time.ParseDuration(s.Every) // validated at creation
		if d <= 0 {
			return time.Time{}
		}
		k := t.Sub(s.CreatedAt)/d + 1
		if t.Before(s.CreatedAt) {
			k = 1
		}
		return s.CreatedAt.Add(k * d).UTC()
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return time.Time{}
	}
	c, err := cronParser.Parse(s.Cron)
	if err != nil {
		return time.Time{}
	}
	n := c.Next(t.In(loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Due answers the tick due at now: the one the schedule waits for, if its
// time has come, however long ago (a tick missed while nothing swept
// fires once, late).
func (s *Schedule) Due(now time.Time) (time.Time, bool) {
	if s.Paused || s.NextAt == nil || s.NextAt.After(now) {
		return time.Time{}, false
	}
	return *s.NextAt, true
}

// advance moves the schedule to its first tick after now: ticks missed in
// between are not made up, so downtime never ends in a burst.
func (s *Schedule) advance(now time.Time) {
	s.UpdatedAt = now
	if s.Paused {
		s.NextAt = nil
		return
	}
	if n := s.next(now); !n.IsZero() {
		s.NextAt = &n
	} else {
		s.NextAt = nil
	}
}

// Ran records that tick made job id.
func (s *Schedule) Ran(tick time.Time, id string, now time.Time) {
	t := tick
	s.LastRunAt, s.LastJobID, s.LastError = &t, id, ""
	s.Runs++
	s.advance(now)
}

// Skip records that the tick due made no job; why is set when its job
// was refused (empty when the last run was unfinished).
func (s *Schedule) Skip(why string, now time.Time) {
	s.Skipped++
	s.LastError = Truncate(why, 1024)
	s.advance(now)
}

// Replace gives the schedule next's definition (timing, overlap, job),
// keeping what it has done (runs, skips, its last run), whether it is
// paused, and its version: its next tick is the new timing's first after
// now. It reports whether anything changed.
func (s *Schedule) Replace(next *Schedule, now time.Time) bool {
	if s.RequestHash == next.RequestHash {
		return false // the same body: as it is
	}
	s.Cron, s.TimeZone, s.Every, s.Overlap, s.Job, s.RequestHash = next.Cron, next.TimeZone, next.Every, next.Overlap, next.Job, next.RequestHash
	s.LastError = ""
	s.advance(now)
	return true
}

// Pause stops the ticks until Resume; it reports whether anything changed.
func (s *Schedule) Pause(now time.Time) bool {
	if s.Paused {
		return false
	}
	s.Paused = true
	s.advance(now)
	return true
}

// Resume starts the ticks again from the first one after now: none missed
// while paused is made up. It reports whether anything changed.
func (s *Schedule) Resume(now time.Time) bool {
	if !s.Paused {
		return false
	}
	s.Paused = false
	s.advance(now)
	return true
}

// RunID answers the id of the job tick makes: a ULID whose time is the
// tick's and whose entropy is drawn from the schedule and the tick, so two
// sweeps that fire one tick make one job (the second write finds its id
// taken), and a schedule deleted and made again under the same id never
// meets its predecessor's jobs.
func (s *Schedule) RunID(tick time.Time) string {
	h := sha256.New()
	h.Write([]byte(s.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(s.ID))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(s.CreatedAt.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], uint64(tick.UnixNano()))
	h.Write(b[:])
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(tick)) // fails only past the year 10889
	_ = id.SetEntropy(h.Sum(nil)[:10])   // exactly 10 bytes
	return id.String()
}

// RunSpec answers the spec of the job a tick makes.
func (s *Schedule) RunSpec() (*JobSpec, error) {
	spec, err := ParseJobSpec(s.Job)
	if err != nil {
		return nil, UnderField("job", err)
	}
	if spec.RunAt != nil {
		return nil, Invalid("job.run_at", "does not apply to a scheduled job: its ticks say when it runs")
	}
	spec.ScheduleID = s.ID
	return spec, nil
}
