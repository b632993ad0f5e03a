package domain

import (
	"cmp"
	"math"
	"time"
)

// Long timers (docs/model.md#waits-sleeps-and-timers). A message that
// brings a step back at an instant (a sleep's wake time, a gate's or a
// wait's deadline, a retry's backoff, run_at) is sent with the rest of
// its delay as an SQS delay, which reaches 15 minutes at most. One further
// off than the job's timer threshold is not sent at once: the step keeps
// its instant as Unsent, which makes the job due at the arm time (the
// instant less the threshold), and the heartbeat's sweep sends it then
// (Arm), one send for however long the wait. Where the queue holds long
// delays itself (a Step Functions timer), the engine sends them at once
// instead (ArmAll).

// timerThreshold is the longest delay the job's messages are sent with.
func (j *Job) timerThreshold() time.Duration {
	return cmp.Or(time.Duration(j.ParkAfterSeconds)*time.Second, DefaultTimerThreshold)
}

// sendAt answers the message that brings step s back at instant at: sent
// now with its delay, or none yet when at is beyond the timer threshold
// (holdUnsent).
func (j *Job) sendAt(s *Step, at, now time.Time) []Dispatch {
	if j.holdUnsent(s, at, now) {
		return nil
	}
	return []Dispatch{{Step: s, Delay: max(at.Sub(now), 0)}}
}

// holdUnsent keeps instant at as the step's unsent one when it is further
// off than the timer threshold, and reports whether it did.
func (j *Job) holdUnsent(s *Step, at, now time.Time) bool {
	s.Unsent = nil
	if at.Sub(now) <= j.timerThreshold() {
		return false
	}
	s.Unsent = &at
	return true
}

// pendingAt answers the instant the step's next message is for: a
// runnable step's ReadyAt, else its timer's.
func (s *Step) pendingAt() *time.Time {
	if s.State.leasable() {
		return s.ReadyAt
	}
	return s.timerAt()
}

// AwaitsArm reports whether the step's message was not sent yet: it waits
// in the due index for the sweep to send it (Arm). A mark left from an
// instant the step has moved on from does not count.
func (s *Step) AwaitsArm() bool {
	at := s.pendingAt()
	return s.Unsent != nil && at != nil && at.Equal(*s.Unsent)
}

// armAt is when the sweep sends an unsent message: when its instant comes
// within the timer threshold.
func (j *Job) armAt(s *Step) time.Time { return s.Unsent.Add(-j.timerThreshold()) }

// Arm sends the unsent messages whose instant is now within the timer
// threshold, each with the rest of its delay: the sweep's, at the arm
// time. The job is then due as for a message sent at once (the instant
// plus DispatchGrace), so the next sweeps do not send it again. It
// answers what to send.
func (j *Job) Arm(now time.Time) []Dispatch { return j.arm(now, j.timerThreshold()) }

// ArmAll sends every unsent message now, however far off: for a queue
// that holds a long delay itself (a Step Functions timer).
func (j *Job) ArmAll(now time.Time) []Dispatch { return j.arm(now, math.MaxInt64) }

// ToArm answers the messages Arm would send at now, changing nothing: for
// a sweep that sends them before its write (SentBeforeWrite).
func (j *Job) ToArm(now time.Time) []Dispatch {
	if j.State.Terminal() {
		return nil
	}
	var out []Dispatch
	reach := j.timerThreshold()
	for _, s := range j.Steps {
		if s.AwaitsArm() && s.Unsent.Sub(now) <= reach {
			out = append(out, Dispatch{Step: s, Delay: max(s.Unsent.Sub(now), 0)})
		}
	}
	return out
}

func (j *Job) arm(now time.Time, reach time.Duration) []Dispatch {
	if j.State.Terminal() {
		return nil
	}
	var out []Dispatch
	for _, s := range j.Steps {
		if !s.AwaitsArm() || s.Unsent.Sub(now) > reach {
			continue
		}
		at := *s.Unsent
		s.Unsent = nil
		if s.State.leasable() && at.Before(now) {
			// Sent late (no sweep ran in time): as a re-dispatch, so the
			// re-dispatch rule does not send it a second time.
			s.ReadyAt = &now
		}
		out = append(out, Dispatch{Step: s, Delay: max(at.Sub(now), 0)})
	}
	if len(out) > 0 {
		j.Resweep()
	}
	return out
}

// dropStaleUnsent clears the marks of instants the steps have moved on
// from (a wait its signal ended, a step leased or cancelled).
func (j *Job) dropStaleUnsent() {
	for _, s := range j.Steps {
		if s.Unsent != nil && !s.AwaitsArm() {
			s.Unsent = nil
		}
	}
}
