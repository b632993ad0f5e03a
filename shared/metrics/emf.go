package metrics

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// MaxValues is the most values one EMF metric member may hold.
const MaxValues = 100

// EMF writes each batch of metrics as CloudWatch Embedded Metric Format
// records, one JSON object a line on w (a function's stdout, which Lambda
// sends to its log group; CloudWatch extracts the metrics from there). A
// record holds one value of each of its dimensions, so a batch makes one
// record per distinct dimension value: per step move (from_state,
// to_state), per attempt end state (status, with up to MaxValues
// durations each), per step state (state), per queue and state, per route
// (with its status class, code, for the counts), and one for the metrics
// that have no dimension (the retries; the sweep's figures). Neither
// tenant, job, step nor worker queue names are dimensions: each distinct
// set of dimension values is a billed custom metric (docs/metrics.md).
type EMF struct {
	Namespace string
	mu        sync.Mutex
	w         io.Writer
}

// NewEMF answers an EMF sink writing to w under namespace.
func NewEMF(w io.Writer, namespace string) *EMF { return &EMF{w: w, Namespace: namespace} }

// Record is one EMF record as written: the metadata under "_aws", the
// dimensions' values and the metrics' values at the root.
type Record map[string]any

// Metadata is a record's "_aws" member.
type Metadata struct {
	Timestamp         int64       `json:"Timestamp"` // ms since the epoch
	CloudWatchMetrics []Directive `json:"CloudWatchMetrics"`
}

// Directive says which root members are metrics and which dimensions.
type Directive struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []Definition `json:"Metrics"`
}

// Definition names a metric and its unit.
type Definition struct {
	Name string `json:"Name"`
	Unit string `json:"Unit,omitempty"`
}

// Records answers the EMF records of b, in a stable order.
func (m *EMF) Records(b engine.MetricsBatch) []Record {
	ts := b.At.UnixMilli()
	if b.At.IsZero() {
		ts = time.Now().UnixMilli()
	}
	rec := func(metric, unit string, value any, dims map[string]string) Record {
		return m.record(ts, dims, metricValue{metric, unit, value})
	}
	var out []Record
	moves := slices.SortedFunc(maps.Keys(b.Moves), func(a, c engine.StepMove) int {
		if a.From != c.From {
			return compare(a.From, c.From)
		}
		return compare(a.To, c.To)
	})
	for _, mv := range moves {
		if n := b.Moves[mv]; n > 0 {
			out = append(out, rec(Transitions, "Count", n, map[string]string{"from_state": string(mv.From), "to_state": string(mv.To)}))
		}
	}
	if b.Retries > 0 {
		out = append(out, rec(Retries, "Count", b.Retries, nil))
	}
	for _, st := range slices.Sorted(maps.Keys(b.Durations)) {
		for v := range slices.Chunk(b.Durations[st], MaxValues) {
			out = append(out, rec(Duration, "Seconds", v, map[string]string{"status": string(st)}))
		}
	}
	for _, st := range domain.AllStepStates() {
		if n, ok := b.InState[st]; ok {
			out = append(out, rec(StepsByState, "Count", n, map[string]string{"state": string(st)}))
		}
	}
	if r := b.Readings; r != nil {
		out = append(out, m.readings(ts, r)...)
	}
	for _, route := range slices.Sorted(maps.Keys(b.Requests)) {
		rb := b.Requests[route]
		for i, n := range rb.Classes {
			if n > 0 {
				out = append(out, rec(APIRequests, "Count", n, map[string]string{"route": route, "code": engine.StatusClasses[i]}))
			}
		}
		for v := range slices.Chunk(rb.Seconds, MaxValues) {
			out = append(out, rec(APIRequestDuration, "Seconds", v, map[string]string{"route": route}))
		}
	}
	return out
}

// metricValue is one metric of a record: its name, unit and value (a number,
// or at most MaxValues of them).
type metricValue struct {
	name, unit string
	value      any
}

// record makes one EMF record of values, all under the same dimensions.
func (m *EMF) record(ts int64, dims map[string]string, values ...metricValue) Record {
	keys := slices.Sorted(maps.Keys(dims))
	if keys == nil {
		keys = []string{} // an empty dimension set: the metrics have no dimension
	}
	defs := make([]Definition, len(values))
	r := Record{}
	for i, v := range values {
		defs[i] = Definition{Name: v.name, Unit: v.unit}
		r[v.name] = v.value
	}
	r["_aws"] = Metadata{Timestamp: ts, CloudWatchMetrics: []Directive{{Namespace: m.Namespace, Dimensions: [][]string{keys}, Metrics: defs}}}
	for k, v := range dims {
		r[k] = v
	}
	return r
}

// readings are the records of the heartbeat's readings: one without a
// dimension for the sweep (its duration, every time: the sweep-stale
// alarm counts it; what it did, each count when not zero, so a count
// that stays zero is no billed metric; the leases and timers), and, when
// the queues were read, one per queue and state (the ready queues, the
// dead-letter queue, the worker queue lanes read summed as "workers").
func (m *EMF) readings(ts int64, r *engine.Readings) []Record {
	vs := []metricValue{
		{SweepDuration, "Seconds", r.Took.Seconds()},
		{LeasesLive, "Count", r.LeasesLive},
		{TimersWaiting, "Count", r.TimersWaiting},
		{DueOldestAge, "Seconds", r.OldestDue.Seconds()},
	}
	for _, f := range SweepFigures(r.Sweep) {
		if f.Value != 0 || f.Name == "sweep_due" {
			vs = append(vs, metricValue{f.Name, "Count", f.Value})
		}
	}
	q := r.Queues
	if q != nil {
		vs = append(vs, metricValue{WorkerQueueLanes, "Count", q.WorkerLanes}, metricValue{WorkerQueueLanesRead, "Count", len(q.Workers)})
	}
	out := []Record{m.record(ts, nil, vs...)}
	if q == nil {
		return out
	}
	for _, d := range append(slices.Clip(q.Stack), q.WorkersTotal()) {
		for _, s := range DepthStates(d) {
			out = append(out, m.record(ts, map[string]string{"queue": d.Queue, "state": s.State}, metricValue{QueueMessages, "Count", s.N}))
		}
	}
	return out
}

// StateCount is one of a queue's counts, by the state it goes under.
type StateCount struct {
	State string
	N     int64
}

// DepthStates answers a queue's counts by state: visible, in_flight
// (received and hidden: a lease) and delayed.
func DepthStates(d engine.QueueDepth) []StateCount {
	return []StateCount{{"visible", d.Visible}, {"in_flight", d.InFlight}, {"delayed", d.Delayed}}
}

func compare[S ~string](a, b S) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Emit writes b's records, a line each. Best effort: a record that cannot
// be written is dropped.
func (m *EMF) Emit(_ context.Context, b engine.MetricsBatch) {
	recs := m.Records(b)
	if len(recs) == 0 {
		return
	}
	var buf []byte
	for _, r := range recs {
		line, err := json.Marshal(r) // no newline inside: one record a line
		if err != nil {
			continue
		}
		buf = append(append(buf, line...), '\n')
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(buf)
}
