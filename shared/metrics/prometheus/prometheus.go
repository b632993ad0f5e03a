// Package prometheus writes the step metrics in the Prometheus text
// exposition format GET /v1/metrics answers; it is apart from package
// metrics so the functions that only write EMF records do not carry
// expfmt.
package prometheus

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
)

// ContentType is the Prometheus text exposition format's.
const ContentType = string(expfmt.FmtText)

// Families answers c as Prometheus metric families: step_retries_total
// and steps_by_state always, the transitions and durations once there is
// one to show.
func Families(c engine.StepCounts) []*dto.MetricFamily {
	label := func(name, value string) *dto.LabelPair {
		return &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)}
	}
	counter := func(v float64, labels ...*dto.LabelPair) *dto.Metric {
		return &dto.Metric{Label: labels, Counter: &dto.Counter{Value: proto.Float64(v)}}
	}

	moves := &dto.MetricFamily{Name: proto.String(metrics.Transitions), Type: dto.MetricType_COUNTER.Enum(),
		Help: proto.String("Step state transitions, by the state left and the state entered.")}
	keys := slices.SortedFunc(maps.Keys(c.Moves), func(a, b engine.StepMove) int {
		if a.From != b.From {
			return strings.Compare(string(a.From), string(b.From))
		}
		return strings.Compare(string(a.To), string(b.To))
	})
	for _, m := range keys {
		moves.Metric = append(moves.Metric, counter(float64(c.Moves[m]), label("from_state", string(m.From)), label("to_state", string(m.To))))
	}

	retries := &dto.MetricFamily{Name: proto.String(metrics.Retries), Type: dto.MetricType_COUNTER.Enum(),
		Help:   proto.String("Step retries: moves into RETRYING after a retryable failure or a timeout."),
		Metric: []*dto.Metric{counter(float64(c.Retries))}}

	durations := &dto.MetricFamily{Name: proto.String(metrics.Duration), Type: dto.MetricType_HISTOGRAM.Enum(),
		Help: proto.String("How long step attempts ran, by how they ended (status).")}
	for _, st := range domain.AllAttemptStates() {
		h, ok := c.Durations[st]
		if !ok {
			continue
		}
		var cum uint64
		hist := &dto.Histogram{SampleSum: proto.Float64(float64(h.SumMs) / 1000)}
		for i, bound := range engine.DurationBuckets {
			cum += uint64(max(h.Counts[i], 0))
			hist.Bucket = append(hist.Bucket, &dto.Bucket{UpperBound: proto.Float64(bound), CumulativeCount: proto.Uint64(cum)})
		}
		cum += uint64(max(h.Counts[len(engine.DurationBuckets)], 0))
		hist.SampleCount = proto.Uint64(cum)
		durations.Metric = append(durations.Metric, &dto.Metric{Label: []*dto.LabelPair{label("status", string(st))}, Histogram: hist})
	}

	gauge := &dto.MetricFamily{Name: proto.String(metrics.StepsByState), Type: dto.MetricType_GAUGE.Enum(),
		Help: proto.String("Steps in each state now (terminal states count every step that ended there since counting began).")}
	inState := engine.StepsByState(c)
	for _, st := range domain.AllStepStates() {
		gauge.Metric = append(gauge.Metric, &dto.Metric{Label: []*dto.LabelPair{label("state", string(st))}, Gauge: &dto.Gauge{Value: proto.Float64(float64(inState[st]))}})
	}

	var out []*dto.MetricFamily
	for _, f := range []*dto.MetricFamily{moves, durations, retries, gauge} {
		if len(f.Metric) > 0 { // a family with no metric cannot be written
			out = append(out, f)
		}
	}
	return out
}

// WritePrometheus writes c in the Prometheus text exposition format.
func WritePrometheus(w io.Writer, c engine.StepCounts) error {
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range Families(c) {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("write metric %s: %w", f.GetName(), err)
		}
	}
	return nil
}

// Exposition writes c as GET /v1/metrics answers it (httpapi.API.MetricsText).
func Exposition(w io.Writer, c engine.StepCounts) (string, error) {
	return ContentType, WritePrometheus(w, c)
}
