// Package prometheus writes the step metrics in the Prometheus text
// exposition format GET /v1/metrics answers; it is apart from package
// metrics so the functions that only write EMF records do not carry it.
//
// It writes the text format itself rather than through expfmt: expfmt
// encodes client_model's protobuf types, and the protobuf runtime they
// bring was 1.6 MB of the enqueue function's bootstrap (over the 15 MB
// each may have). The tests read what it writes with expfmt's own parser
// and promlint, as Prometheus and promtool would.
package prometheus

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
)

// ContentType is the Prometheus text exposition format's (version 0.0.4).
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// WritePrometheus writes c in the Prometheus text exposition format:
// step_retries_total and steps_by_state always, the transitions and
// durations once there is one to show.
func WritePrometheus(w io.Writer, c engine.StepCounts) error {
	b := bufio.NewWriter(w)
	writeSteps(b, c)
	if err := b.Flush(); err != nil {
		return fmt.Errorf("write the metrics: %w", err)
	}
	return nil
}

// writeSteps writes the step families of c.
func writeSteps(b *bufio.Writer, c engine.StepCounts) {
	keys := slices.SortedFunc(maps.Keys(c.Moves), func(x, y engine.StepMove) int {
		if x.From != y.From {
			return strings.Compare(string(x.From), string(y.From))
		}
		return strings.Compare(string(x.To), string(y.To))
	})
	if len(keys) > 0 {
		header(b, metrics.Transitions, "counter", "Step state transitions, by the state left and the state entered.")
		for _, m := range keys {
			sample(b, metrics.Transitions, float64(c.Moves[m]), "from_state", string(m.From), "to_state", string(m.To))
		}
	}

	first := true
	for _, st := range domain.AllAttemptStates() {
		h, ok := c.Durations[st]
		if !ok {
			continue
		}
		if first {
			header(b, metrics.Duration, "histogram", "How long step attempts ran, by how they ended (status).")
			first = false
		}
		var cum uint64
		for i, bound := range engine.DurationBuckets {
			cum += uint64(max(h.Counts[i], 0))
			sample(b, metrics.Duration+"_bucket", float64(cum), "status", string(st), "le", number(bound))
		}
		cum += uint64(max(h.Counts[len(engine.DurationBuckets)], 0))
		sample(b, metrics.Duration+"_bucket", float64(cum), "status", string(st), "le", "+Inf")
		sample(b, metrics.Duration+"_sum", float64(h.SumMs)/1000, "status", string(st))
		sample(b, metrics.Duration+"_count", float64(cum), "status", string(st))
	}

	header(b, metrics.Retries, "counter", "Step retries: moves into RETRYING after a retryable failure or a timeout.")
	sample(b, metrics.Retries, float64(c.Retries))

	header(b, metrics.StepsByState, "gauge", "Steps in each state now (terminal states count every step that ended there since counting began).")
	inState := engine.StepsByState(c)
	for _, st := range domain.AllStepStates() {
		sample(b, metrics.StepsByState, float64(inState[st]), "state", string(st))
	}
}

// header writes a family's HELP and TYPE lines.
func header(b *bufio.Writer, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, helpEscaper.Replace(help), name, typ)
}

// sample writes one sample line; labels are name, value pairs.
func sample(b *bufio.Writer, name string, v float64, labels ...string) {
	b.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, "%s=\"%s\"", labels[i], labelEscaper.Replace(labels[i+1]))
	}
	if len(labels) > 0 {
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(number(v))
	b.WriteByte('\n')
}

// number writes a value as the format's floats are written.
func number(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// Exposition writes c as GET /v1/metrics answers it (httpapi.API.MetricsText).
func Exposition(w io.Writer, c engine.StepCounts) (string, error) {
	return ContentType, WritePrometheus(w, c)
}
