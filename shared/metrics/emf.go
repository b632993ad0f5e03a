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

// EMF writes each batch of step metrics as CloudWatch Embedded Metric
// Format records, one JSON object a line on w (a function's stdout, which
// Lambda sends to its log group; CloudWatch extracts the metrics from
// there). A record holds one value of each of its dimensions, so a batch
// makes one record per distinct dimension value: per step move
// (from_state, to_state), per attempt end state (status, with up to
// MaxValues durations each), per step state (state), and one with the
// retries, which have no dimension. Neither tenant, job nor step ids are
// dimensions: each distinct set of dimension values is a billed custom
// metric (docs/metrics.md).
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
		keys := slices.Sorted(maps.Keys(dims))
		if keys == nil {
			keys = []string{} // an empty dimension set: the metric has no dimension
		}
		r := Record{
			"_aws": Metadata{Timestamp: ts, CloudWatchMetrics: []Directive{{
				Namespace: m.Namespace, Dimensions: [][]string{keys}, Metrics: []Definition{{Name: metric, Unit: unit}},
			}}},
			metric: value,
		}
		for k, v := range dims {
			r[k] = v
		}
		return r
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
	return out
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
