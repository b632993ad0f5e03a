// Package chaos is stepflow's fault-injection suite: a seeded, replayable
// fault layer in the AWS SDK middleware stack of every client the engine
// calls AWS with (and of the SQS event source mapping's), and a run that
// submits a random mix of jobs to a local stack under those faults, with
// misbehaving workers and concurrent sweeps, then holds every job to the
// history invariants (check.go) and to its workload's table of what a job
// of its kind ends as given the faults.
//
// Time is under fault too: the chaos stack runs with a timer threshold of
// two seconds (RunTimerThreshold), so a sleep, an approval gate's or a
// wait's deadline past it is a Step Functions timer on moto and a shorter
// one an SQS delay. A timer step's message may be delivered twice
// (KindTimerTwice), a delayed send may go out seconds late
// (KindTimerLate), and a Step Functions start may fail after the write
// (KindSFNStartLost), leaving the timer to the sweep's due index. Racers
// (race.go) send concurrent decisions to approval gates, signals to waits
// (early, late, repeated, against a cancel) and redrives to failed jobs,
// each from a plan drawn from StreamRacers, and every answer is held
// against what the job's log shows of it.
//
// Every random decision comes from PCG generators seeded from one seed,
// under one mutex. Each kind of decision has its own stream (the workload
// plan, the engine's AWS calls, their attempts, deliveries, leases handed
// to workers, sweeps), so the n-th decision of a stream is the same for a
// seed however the goroutines interleave; which call, message or lease
// meets it follows wall-clock scheduling and may differ from one run of a
// seed to the next.
package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
)

// Kind names a fault.
type Kind string

// The fault kinds.
const (
	KindCrashBefore  Kind = "crash_before"   // the invocation dies before an AWS call
	KindCrashAfter   Kind = "crash_after"    // the invocation dies right after an AWS call returned
	KindThrottle     Kind = "throttle"       // DynamoDB answers ProvisionedThroughputExceeded
	KindServerError  Kind = "5xx"            // DynamoDB answers an internal server error
	KindAmbiguous    Kind = "ambiguous"      // a DynamoDB write is applied, then reported as a timeout
	KindSendLost     Kind = "send_lost"      // SendMessageBatch fails after the DynamoDB write committed
	KindDuplicate    Kind = "duplicate"      // the event source mapping hands a message out twice at once
	KindDoubleSweep  Kind = "double_sweep"   // two heartbeat sweeps run at once
	KindZombie       Kind = "zombie"         // a worker stalls past its lease, then reports anyway
	KindSkew         Kind = "skew"           // a worker's clock is off by seconds
	KindTimerTwice   Kind = "timer_twice"    // the event source mapping hands a timer step's message out twice at once
	KindTimerLate    Kind = "timer_late"     // a delayed SQS send (DelaySeconds > 0) goes out seconds later than asked
	KindSFNStartLost Kind = "sfn_start_lost" // Step Functions StartExecution fails after the DynamoDB write committed
	// Racers: not faults of the stack but of its callers, counted once per
	// job whose racer ran (race.go).
	KindApprovalRace Kind = "approval_race" // approve, approve again, reject and cancel sent at one approval gate at once
	KindSignalRace   Kind = "signal_race"   // signals (repeated, early, late) sent to a wait, some against a cancel
	KindRedriveRace  Kind = "redrive_race"  // two redrives of one failed job at once
	// Resource pools (resources.go): planned in the resource jobs, counted
	// when carried out.
	KindSlotHolderKilled Kind = "slot_holder_killed" // a worker holding a slot goes silent: no heartbeat, no outcome
	KindResourceFailed   Kind = "resource_failed"    // an attempt fails with class resource (a worker's report or a built-in fail step)
	KindSlotRace         Kind = "slot_race"          // a wave of resource jobs submitted at once, met by a storm of extra claimers
)

// Kinds lists every fault kind in report order.
var Kinds = [...]Kind{
	KindCrashBefore, KindCrashAfter, KindThrottle, KindServerError, KindAmbiguous,
	KindSendLost, KindDuplicate, KindDoubleSweep, KindZombie, KindSkew,
	KindTimerTwice, KindTimerLate, KindSFNStartLost, KindApprovalRace, KindSignalRace, KindRedriveRace,
	KindSlotHolderKilled, KindResourceFailed, KindSlotRace,
}

// Probabilities are the chance of each fault at each opportunity: per
// AWS call of the engine for CrashBefore and CrashAfter (every call),
// SendLost (SendMessageBatch) and SFNStartLost (Step Functions
// StartExecution); per attempt, each request the SDK sends for a call, its
// retries included, for Throttle and ServerError (DynamoDB calls) and
// Ambiguous (DynamoDB writes); per message received by the event source
// mapping for Duplicate, and for TimerTwice per such message for a timer
// step (one a Duplicate did not take already); per delayed entry of a
// SendMessageBatch for TimerLate; per sweeper tick for DoubleSweep and
// Advance, per lease handed to a chaos worker for Zombie and Skew. (aws.go
// says why each sits where it does in the SDK's middleware stack.) The
// racers are planned, not drawn here.
type Probabilities struct {
	CrashBefore  float64
	CrashAfter   float64
	Throttle     float64
	ServerError  float64
	Ambiguous    float64
	SendLost     float64
	Duplicate    float64
	DoubleSweep  float64
	Zombie       float64
	Skew         float64
	TimerTwice   float64
	TimerLate    float64
	SFNStartLost float64
	// Advance is the chance a sweeper tick moves the stack's clock past
	// domain.DispatchGrace, so overdue work is found (not a fault itself).
	Advance float64
}

// DefaultProbabilities are what the chaos command runs with.
func DefaultProbabilities() Probabilities {
	return Probabilities{
		CrashBefore: 0.015, CrashAfter: 0.015, Throttle: 0.01, ServerError: 0.01, Ambiguous: 0.02,
		SendLost: 0.06, Duplicate: 0.06, DoubleSweep: 0.5, Zombie: 0.25, Skew: 0.3, Advance: 0.3,
		TimerTwice: 0.3, TimerLate: 0.25, SFNStartLost: 0.4,
	}
}

// faultRange is one kind's share of a draw.
type faultRange struct {
	kind Kind
	p    float64
}

// call-fault layout: one draw per AWS call (StreamCalls), and one per
// attempt (StreamAttempts), each compared against its consecutive ranges,
// so the n-th decision of a stream is the same for a seed whatever
// operation meets it. A range the operation does not support (losing a
// DynamoDB read's send) is no fault.
func (p Probabilities) callRanges() []faultRange {
	return []faultRange{{KindCrashBefore, p.CrashBefore}, {KindCrashAfter, p.CrashAfter}, {KindSendLost, p.SendLost}, {KindSFNStartLost, p.SFNStartLost}}
}

func (p Probabilities) attemptRanges() []faultRange {
	return []faultRange{{KindThrottle, p.Throttle}, {KindServerError, p.ServerError}, {KindAmbiguous, p.Ambiguous}}
}

// Stream is an independent sequence of decisions.
type Stream int

// The decision streams.
const (
	StreamPlan     Stream = iota // the jobs a run submits
	StreamCalls                  // the engine's AWS calls, once per call
	StreamDeliver                // messages the event source mapping receives
	StreamWorkers                // leases handed to chaos workers
	StreamSweeps                 // sweeper ticks
	StreamAttempts               // the engine's AWS calls, once per attempt (the SDK's retries included)
	StreamTimers                 // timer steps' messages received, and delayed entries sent
	StreamRacers                 // the racers' plans, drawn with the workload plan
	StreamPool                   // the resource jobs' plan (resources.go)
	StreamReplans                // the replans' and signal floods' plan (race.go)
	numStreams
)

// Crash is what a crash fault panics with: the Lambda invocation dies at
// an AWS call boundary. The local runner (and shared/handlers, per SQS
// record) turn it into what Lambda does: a 5xx, or a redelivery.
type Crash struct {
	Call  string // "DynamoDB.PutItem", "SQS.SendMessageBatch", "SFN.StartExecution", ...
	After bool   // the call was made (and took effect) before the crash
	N     int64  // the call's decision number in StreamCalls
}

// Error makes a recovered Crash print well wherever it is formatted.
func (c Crash) Error() string {
	return fmt.Sprintf("chaos: invocation crashed %s %s (call #%d)", map[bool]string{false: "before", true: "after"}[c.After], c.Call, c.N)
}

// Decision is one injected fault, for replay traces.
type Decision struct {
	Stream Stream
	N      int64 // the decision's number within its stream
	Kind   Kind
	Call   string // the AWS call, for call and attempt faults
}

// maxTrace bounds the decisions a Faults remembers.
const maxTrace = 100000

// Faults is the fault layer's state: the seeded streams, the
// probabilities, and a counter per kind.
type Faults struct {
	P    Probabilities
	Seed uint64

	mu      sync.Mutex
	streams [numStreams]*rand.Rand
	drawn   [numStreams]int64
	trace   []Decision
	calls   map[string]int64 // "Service.Operation" -> every call the layer saw

	counts map[Kind]*atomic.Int64 // by kind, made for every kind in New
	paused atomic.Bool
}

// New answers a fault layer seeded with seed.
func New(seed uint64, p Probabilities) *Faults {
	f := &Faults{P: p, Seed: seed, counts: map[Kind]*atomic.Int64{}, calls: map[string]int64{}}
	for _, k := range Kinds {
		f.counts[k] = new(atomic.Int64)
	}
	for s := range numStreams {
		// Both PCG words come from the seed and the stream through
		// SplitMix64, so small neighbouring seeds (1, 2, 3) start far apart.
		x := seed ^ 0x9e3779b97f4a7c15*uint64(s+1)
		hi := splitmix64(&x)
		lo := splitmix64(&x)
		f.streams[s] = rand.New(rand.NewPCG(hi, lo))
	}
	return f
}

func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Pause stops injecting (calls pass straight through the layer and draw
// nothing); a run pauses while it drains the queues.
func (f *Faults) Pause() { f.paused.Store(true) }

// Draw runs fn with a stream's generator, under the lock, for decisions
// that take several numbers at once.
func (f *Faults) Draw(s Stream, fn func(r *rand.Rand)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drawn[s]++
	fn(f.streams[s])
}

// Chance decides a fault of kind with probability p on stream s, and
// counts it when it is injected.
func (f *Faults) Chance(s Stream, kind Kind, p float64) bool {
	injected, _ := f.decide(s, []faultRange{{kind, p}}, "", func(Kind) bool { return true })
	return injected != ""
}

// Count records a fault injected without a draw of its own (a racer
// that ran).
func (f *Faults) Count(kind Kind) { f.counts[kind].Add(1) }

func (f *Faults) record(d Decision) {
	f.counts[d.Kind].Add(1)
	if len(f.trace) < maxTrace {
		f.trace = append(f.trace, d)
	}
}

// countCall counts a call the layer saw.
func (f *Faults) countCall(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[call]++
}

// decide draws the fault for one AWS call (StreamCalls) or attempt
// (StreamAttempts) against ranges; supported says which of them the
// operation can suffer. It answers "" for none, and the decision's number.
func (f *Faults) decide(s Stream, ranges []faultRange, call string, supported func(Kind) bool) (Kind, int64) {
	if f.paused.Load() {
		return "", 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drawn[s]++
	n := f.drawn[s]
	x := f.streams[s].Float64()
	for _, r := range ranges {
		if x < r.p {
			if !supported(r.kind) {
				return "", n
			}
			f.record(Decision{Stream: s, N: n, Kind: r.kind, Call: call})
			return r.kind, n
		}
		x -= r.p
	}
	return "", n
}

// Counts answers how many faults of each kind were injected.
func (f *Faults) Counts() map[Kind]int64 {
	out := make(map[Kind]int64, len(Kinds))
	for k, n := range f.counts {
		out[k] = n.Load()
	}
	return out
}

// Calls answers how many calls (not attempts) of each operation went
// through the fault layer.
func (f *Faults) Calls() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls)
}

// Trace answers the faults injected so far, in the order they were
// decided (at most the first 100 000).
func (f *Faults) Trace() []Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Decision(nil), f.trace...)
}

// FormatCounts renders counts as "kind n, kind n" in report order,
// leaving out kinds with none.
func FormatCounts(c map[Kind]int64) string {
	var parts []string
	for _, k := range Kinds {
		if c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
