package prometheus

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
)

// WriteOperator writes what GET /v1/metrics answers an operator: the
// stack's step metrics (every tenant's, in the families a tenant's answer
// has), the live leases and waiting timers, what the last sweep did and
// read (once a sweep has kept its readings), and the requests per route
// (once there is one).
func WriteOperator(w io.Writer, m engine.OperatorMetrics) error {
	b := bufio.NewWriter(w)
	writeSteps(b, m.Steps)

	leases, timers := engine.LeasesAndTimers(m.Steps)
	gauge(b, metrics.LeasesLive, "Steps holding a lease now (LEASED, RUNNING), every tenant's.", float64(leases))
	gauge(b, metrics.TimersWaiting, "Steps waiting on a time now (WAITING, RETRYING), every tenant's.", float64(timers))

	if r := m.Readings; r != nil {
		writeReadings(b, r)
	}
	writeRequests(b, m.Requests)
	if err := b.Flush(); err != nil {
		return fmt.Errorf("write the metrics: %w", err)
	}
	return nil
}

// gauge writes a family of one sample without labels.
func gauge(b *bufio.Writer, name, help string, v float64) {
	header(b, name, "gauge", help)
	sample(b, name, v)
}

// writeReadings writes the last sweep's figures and queue readings.
func writeReadings(b *bufio.Writer, r *engine.Readings) {
	gauge(b, metrics.SweepTimestamp, "When the last sweep ended, in seconds since the epoch: the readings below are as of then.", float64(r.At.UnixMilli())/1000)
	gauge(b, metrics.SweepDuration, "How long the last sweep ran.", r.Took.Seconds())
	gauge(b, metrics.DueOldestAge, "How long the earliest entry the last sweep found due had been due (0: none was).", r.OldestDue.Seconds())
	for _, f := range metrics.SweepFigures(r.Sweep) {
		gauge(b, f.Name, "What the last sweep did: "+f.Name[len("sweep_"):]+" (engine.SweepReport).", float64(f.Value))
	}
	q := r.Queues
	if q == nil {
		return
	}
	header(b, metrics.QueueMessages, "gauge", "Messages in the stack's queues as SQS counts them, by state; workers sums the worker queue lanes read.")
	for _, d := range append(slices.Clip(q.Stack), q.WorkersTotal()) {
		for _, s := range metrics.DepthStates(d) {
			sample(b, metrics.QueueMessages, float64(s.N), "queue", d.Queue, "state", s.State)
		}
	}
	if len(q.Workers) > 0 {
		header(b, metrics.WorkerQueueMessages, "gauge", "Messages in each worker queue lane read, by its SQS name and state.")
		for _, d := range q.Workers {
			for _, s := range metrics.DepthStates(d) {
				sample(b, metrics.WorkerQueueMessages, float64(s.N), "queue", d.Queue, "state", s.State)
			}
		}
	}
	gauge(b, metrics.WorkerQueueLanes, "Worker queue lanes the last sweep listed.", float64(q.WorkerLanes))
	gauge(b, metrics.WorkerQueueLanesRead, "Worker queue lanes whose depth the last sweep read (the first by name).", float64(len(q.Workers)))
}

// writeRequests writes the request counters of each route that had one.
func writeRequests(b *bufio.Writer, reqs map[string]engine.RequestCounts) {
	routes := slices.Sorted(maps.Keys(reqs))
	routes = slices.DeleteFunc(routes, func(r string) bool { return reqs[r].Count() == 0 })
	if len(routes) == 0 {
		return
	}
	header(b, metrics.APIRequests, "counter", "HTTP API requests, by route and status class (code).")
	for _, route := range routes {
		for i, n := range reqs[route].Classes {
			if n > 0 {
				sample(b, metrics.APIRequests, float64(n), "route", route, "code", engine.StatusClasses[i])
			}
		}
	}
	header(b, metrics.APIRequestDuration, "histogram", "How long HTTP API requests took, by route, as the function measured them.")
	for _, route := range routes {
		c := reqs[route]
		var cum int64
		for i, bound := range engine.RequestBuckets {
			cum += max(c.Counts[i], 0)
			sample(b, metrics.APIRequestDuration+"_bucket", float64(cum), "route", route, "le", number(bound))
		}
		cum += max(c.Counts[len(engine.RequestBuckets)], 0)
		sample(b, metrics.APIRequestDuration+"_bucket", float64(cum), "route", route, "le", "+Inf")
		sample(b, metrics.APIRequestDuration+"_sum", float64(c.SumMicros)/1e6, "route", route)
		sample(b, metrics.APIRequestDuration+"_count", float64(cum), "route", route)
	}
}

// OperatorExposition writes m as GET /v1/metrics answers an operator
// (httpapi.API.OperatorText).
func OperatorExposition(w io.Writer, m engine.OperatorMetrics) (string, error) {
	return ContentType, WriteOperator(w, m)
}
