package main

import (
	"fmt"
	"image/color"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/stepflow/stepflow/localstack/costmeter"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func render(results []result, floor result, sweeps []sweepPoint, sizes map[string]int64, p costmeter.Prices, o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# stepflow benchmarks\n\nWritten by `make bench` on %s: the local stack (moto behind its serialising proxy) on this machine, %d submitting clients, %d external workers.\nAWS prices from [costs.md](costs.md); request charges only: DynamoDB request units, SQS requests, Lambda requests, S3 requests, EventBridge events (Job State Change, with JobStateEvents=%s, the template's default; costs.md prices each choice). Lambda duration and API Gateway are left out (see costs.md).\n\n",
		time.Now().UTC().Format("2006-01-02"), o.concurrency, o.workers, o.jobStateEvents)

	b.WriteString("## Throughput and latency\n\n| workload | jobs | jobs/s | steps/s | of floor (steps/s) | enqueue to start p50 / p95 / p99 | enqueue to done p50 / p95 / p99 |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		steps := r.jobsPerSec() * float64(r.StepsPerJob)
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %s / %s / %s | %s / %s / %s |\n", r.Name, r.Jobs, r.jobsPerSec(), steps, steps/floor.jobsPerSec(),
			ms(percentile(r.ToStart, .5)), ms(percentile(r.ToStart, .95)), ms(percentile(r.ToStart, .99)),
			ms(percentile(r.ToDone, .5)), ms(percentile(r.ToDone, .95)), ms(percentile(r.ToDone, .99)))
	}
	fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | 1.00 | | |\n\n", floor.Name, floor.Jobs, floor.jobsPerSec(), floor.jobsPerSec())
	b.WriteString("Locally every DynamoDB request is serialised (moto is not safe under concurrency), so throughput here is bounded by DynamoDB requests per job; the ratio to the floor is the figure that carries over.\n\n")

	b.WriteString("## Requests and cost per job\n\n| workload | DynamoDB requests/job | WRU/job | RRU/job | SQS requests/job | Lambda invocations/job | $ per million jobs | Step Functions Standard | Step Functions Express |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range append(append([]result{}, results...), floor) {
		n := float64(r.Jobs)
		std, exp := r.stepFunctions(p)
		sfn := fmt.Sprintf("$%.2f | $%.2f", std, exp)
		if r.Name == floor.Name {
			sfn = " | "
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | $%.2f | %s |\n", r.Name, float64(r.count("dynamodb."))/n, r.Units.WRU/n, r.Units.RRU/n,
			float64(r.count("sqs."))/n, float64(r.invocations())/n, r.total(p), sfn)
	}
	b.WriteString("\n### Cost breakdown ($ per million jobs)\n\n| workload | DynamoDB | SQS | Lambda requests | Step Functions timers | S3 requests | EventBridge events |\n|---|---|---|---|---|---|---|\n")
	for _, r := range append(append([]result{}, results...), floor) {
		d, s, l, tm, s3, ev := r.cost(p)
		fmt.Fprintf(&b, "| %s | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f |\n", r.Name, d, s, l, tm, s3, ev)
	}
	fmt.Fprintf(&b, "\nA timer beyond the threshold (%s here, so the timer workload's 5 s sleeps take it; 900 s by default) is one Step Functions Standard execution: %d billed transitions and the SQS send it makes.\n", benchTimerThreshold, timerTransitions)
	b.WriteString("\n### Requests by operation (whole workload)\n\n")
	for _, r := range append(append([]result{}, results...), floor) {
		fmt.Fprintf(&b, "- %s:", r.Name)
		for _, k := range sortedKeys(r.Requests) {
			fmt.Fprintf(&b, " %s %d,", k, r.Requests[k])
		}
		inv := []string{}
		for _, k := range sortedKeys(r.Invocations) {
			inv = append(inv, fmt.Sprintf("%s %d", k, r.Invocations[k]))
		}
		fmt.Fprintf(&b, " Lambda: %s\n", strings.Join(inv, ", "))
	}

	b.WriteString("\n## Heartbeat sweep with jobs at rest\n\n| jobs at rest | requests per sweep | read units per sweep |\n|---|---|---|\n")
	for _, s := range sweeps {
		fmt.Fprintf(&b, "| %d | %d | %.1f |\n", s.AtRest, s.Requests, s.Units)
	}
	b.WriteString("\nThe sweep reads only the sparse `due` index (one query per shard), so its cost does not grow with the jobs stored.\n")
	if len(sizes) > 0 {
		b.WriteString("\n## Lambda bootstraps (linux/arm64, -tags lambda.norpc, stripped)\n\n| function | size |\n|---|---|\n")
		for _, k := range sortedKeys(sizes) {
			fmt.Fprintf(&b, "| %s | %.1f MB |\n", k, float64(sizes[k])/1e6)
		}
	}
	b.WriteString("\n![cost per million jobs](benchmarks.png)\n")
	return b.String()
}

// chart draws $ per million jobs for each workload: stepflow, the floor and
// Step Functions.
func chart(path string, results []result, floor result, p costmeter.Prices) error {
	pl := plot.New()
	pl.Title.Text = "AWS request charges per million jobs (USD)"
	pl.Y.Label.Text = "USD per million jobs"
	var names []string
	engine, std, exp, flo := plotter.Values{}, plotter.Values{}, plotter.Values{}, plotter.Values{}
	for _, r := range results {
		names = append(names, r.Name)
		engine = append(engine, r.total(p))
		s, e := r.stepFunctions(p)
		std, exp = append(std, s), append(exp, e)
		flo = append(flo, floor.total(p)*float64(r.StepsPerJob))
	}
	w := vg.Points(14)
	for i, set := range []struct {
		label string
		v     plotter.Values
	}{{"stepflow", engine}, {"floor", flo}, {"Step Functions Express", exp}, {"Step Functions Standard", std}} {
		bars, err := plotter.NewBarChart(set.v, w)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		if i == 0 {
			bars.Color = color.RGBA{R: 30, G: 120, B: 200, A: 255}
		}
		bars.Offset = vg.Length(i-2) * w
		pl.Add(bars)
		pl.Legend.Add(set.label, bars)
	}
	pl.Legend.Top = true
	pl.NominalX(names...)
	return pl.Save(9*vg.Inch, 4.5*vg.Inch, path)
}
