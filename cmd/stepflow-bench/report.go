package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/stepflow/stepflow/localstack/costmeter"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func msf(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// ownBill is what the workload's jobs say they cost (their cost.units at
// the price table's prices), in the meter's lines, $ per million jobs:
// their data's expiry is in the DynamoDB and S3 lines.
func (r result) ownBill(p costmeter.Prices) costmeter.Bill {
	u, per := r.Own, 1e6/float64(max(r.Jobs, 1))
	return costmeter.Bill{
		DynamoDB:       (u.WriteUnits*p["dynamodb_wru"] + u.ReadUnits*p["dynamodb_rru"]) * per,
		SQS:            u.SQSRequests * p["sqs_request"] * per,
		LambdaRequests: u.LambdaRequests * p["lambda_request"] * per,
		APIGateway:     u.APIRequests * p["apigw_http_request"] * per,
		Timers:         u.SFNTransitions * p["sfn_standard_transition"] * per,
		S3Requests:     (u.S3Writes*p["s3_put_request"] + u.S3Reads*p["s3_get_request"]) * per,
		Events:         u.Events * p["eventbridge_event"] * per,
		Storage: (u.TableGBMonths*(p["dynamodb_storage_gb_month"]+p["dynamodb_pitr_gb_month"]) +
			u.S3GBMonths*p["s3_storage_gb_month"]) * per,
		LambdaDuration: u.LambdaGBSeconds * p["lambda_gb_second_arm"] * per,
	}
}

// ownTotal is what the jobs say they cost, $ per million jobs, as the
// meter's total counts: all but Lambda duration (their child jobs' all
// told, as cost.usd includes them).
func (r result) ownTotal(p costmeter.Prices) float64 {
	return r.ownBill(p).Total() + r.Own.ChildrenUSD*1e6/float64(max(r.Jobs, 1))
}

// agreement is how far the jobs' own figure is from the meter's, as a
// fraction of the meter's.
func agreement(own, meter float64) float64 {
	if meter == 0 {
		return 0
	}
	return (own - meter) / meter
}

// ownTolerance is how far a workload's jobs' own cost may be from its
// meter's: make bench fails past it.
const ownTolerance = 0.10

// renderOwn holds each workload's jobs' own cost (cost.usd, less Lambda
// duration, as the meter's total is) against the meter, line by line.
func renderOwn(results []result, p costmeter.Prices) string {
	var b strings.Builder
	b.WriteString("| workload | meter: $ per million jobs | jobs' own cost.usd: $ per million | difference | WRU/job, meter / own | RRU/job | SQS requests/job | own: DynamoDB | SQS | Lambda requests | API Gateway | timers | S3 | events | storage | child jobs | beside: Lambda duration, meter / own |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		m, o, n := r.bill(p), r.ownBill(p), float64(max(r.Jobs, 1))
		u := r.usage()
		fmt.Fprintf(&b, "| %s | $%.2f | $%.2f | %+.1f%% | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f / $%.2f |\n", r.Name, m.Total(), r.ownTotal(p),
			100*agreement(r.ownTotal(p), m.Total()), (u.Units.WRU+u.Arms.WRU+u.Expiry.WRU)/n, r.Own.WriteUnits/n, (u.Units.RRU+u.Arms.RRU+u.Expiry.RRU)/n, r.Own.ReadUnits/n,
			(u.SQSRequests+u.ArmSQSRequests)/n, r.Own.SQSRequests/n,
			o.DynamoDB, o.SQS, o.LambdaRequests, o.APIGateway, o.Timers, o.S3Requests, o.Events, o.Storage, r.Own.ChildrenUSD*1e6/n, m.LambdaDuration, o.LambdaDuration)
	}
	return b.String()
}

// renderOnly is the short report of --only: each workload's time and
// what it cost, line by line of the bill.
func renderOnly(results []result, p costmeter.Prices) string {
	var b strings.Builder
	b.WriteString("| workload | jobs | enqueue to done p50 | WRU/job | RRU/job | SQS requests/job | DynamoDB | SQS | Lambda requests | API Gateway | timers | storage | total $ per million | beside: Lambda duration |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		bill, n := r.bill(p), float64(r.Jobs)
		fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %.2f | %.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f |\n", r.Name, r.Jobs, ms(percentile(r.ToDone, .5)),
			r.Units.WRU/n, r.Units.RRU/n, float64(r.count("sqs."))/n,
			bill.DynamoDB, bill.SQS, bill.LambdaRequests, bill.APIGateway, bill.Timers, bill.Storage, bill.Total(), bill.LambdaDuration)
	}
	b.WriteString("\n")
	b.WriteString(renderOwn(results, p))
	return b.String()
}

func render(results []result, floor result, sweeps []sweepPoint, exp expiryPoint, lat chainLatency, sizes map[string]int64, p costmeter.Prices, o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# stepflow benchmarks\n\nWritten by `make bench` on %s: the local stack (moto behind its serialising proxy) on this machine, %d submitting clients, %d external workers.\n"+
		"AWS prices from [costs.md](costs.md), which says how each charge is counted. \"$ per million jobs\" is all-in but Lambda duration and logs, which are reported beside it: "+
		"DynamoDB request units, SQS requests, Lambda requests, API Gateway requests (one per route call), long timers, S3 requests, "+
		"EventBridge events (Job State Change, with JobStateEvents=%s, the template's default; costs.md prices each choice), "+
		"the table's and the bucket's storage for a job's retention (%d days) and the sweep's work when its data expires. "+
		"Lambda duration is each invocation's wall time here at the function's MemorySize (an upper bound: every DynamoDB request waits at moto's proxy); "+
		"logs are what the functions write at LogLevel=%s, with the EMF metric records.\n\n"+
		"The event source mapping receives up to ten messages at once, as the local runner does; a workload marked \"AWS-like poller\" ran with one message a receive, as Lambda's pollers take them at low load.\n\n",
		time.Now().UTC().Format("2006-01-02"), o.concurrency, o.workers, o.jobStateEvents, o.retentionDays, o.logLevel)

	b.WriteString("## Throughput and latency\n\n| workload | jobs | jobs/s | steps/s | of floor (steps/s) | enqueue to start p50 / p95 / p99 | enqueue to done p50 / p95 / p99 |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		steps := r.jobsPerSec() * float64(r.StepsPerJob)
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %s / %s / %s | %s / %s / %s |\n", r.Name, r.Jobs, r.jobsPerSec(), steps, steps/floor.jobsPerSec(),
			ms(percentile(r.ToStart, .5)), ms(percentile(r.ToStart, .95)), ms(percentile(r.ToStart, .99)),
			ms(percentile(r.ToDone, .5)), ms(percentile(r.ToDone, .95)), ms(percentile(r.ToDone, .99)))
	}
	fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | 1.00 | | |\n\n", floor.Name, floor.Jobs, floor.jobsPerSec(), floor.jobsPerSec())
	b.WriteString("Locally every DynamoDB request is serialised (moto is not safe under concurrency), so throughput here is bounded by DynamoDB requests per job; the ratio to the measured floor, a bare loop of the same requests on the same emulator, is the figure that carries over.\n\n")

	floors := []struct {
		name string
		u    costmeter.Usage
	}{
		{"physical floor, one submit per request", costmeter.Floor(1, 1)},
		{"physical floor, ten submits per request", costmeter.Floor(1, 10)},
	}
	b.WriteString("## Requests and cost per job\n\n| workload | DynamoDB requests/job | WRU/job | RRU/job | SQS requests/job | Lambda invocations/job | API Gateway requests/job | $ per million jobs | Lambda duration: GB-s/job, $ per million | logs: bytes/job, $ per million | Step Functions Standard | Step Functions Express |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		n := float64(r.Jobs)
		bill := r.bill(p)
		std, exp := r.stepFunctions(p)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | $%.2f | %.4f, $%.2f | %.0f, $%.2f | $%.2f | $%.2f |\n", r.Name,
			float64(r.count("dynamodb."))/n, r.Units.WRU/n, r.Units.RRU/n, float64(r.count("sqs."))/n, r.invocations()/n, float64(r.APIRequests)/n,
			bill.Total(), r.gbSeconds()/n, bill.LambdaDuration, float64(r.Logs.Bytes)/n, bill.Logs, std, exp)
	}
	for _, f := range floors {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | $%.2f | | | | |\n", f.name,
			f.u.Units.WRU, f.u.Units.WRU, f.u.Units.RRU, f.u.SQSRequests, f.u.LambdaRequests, f.u.APIRequests, p.Bill(f.u).Total())
	}
	b.WriteString("\nThe physical floor is computed, not measured ([costs.md](costs.md#the-floor)): two writes of at most 1 KB, one send (batched for a request's submits), a tenth of a receive, a delete and an execute invocation, the submit's invocation and API Gateway request.\n")

	fmt.Fprintf(&b, "\n### Cost breakdown ($ per million jobs)\n\n| workload | DynamoDB | SQS | Lambda requests | API Gateway | timers | S3 requests | EventBridge events | storage (%d days) | expiry | total | beside: Lambda duration | beside: logs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", o.retentionDays)
	line := func(name string, c costmeter.Bill, beside bool) {
		fmt.Fprintf(&b, "| %s | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f | $%.2f |", name, c.DynamoDB, c.SQS, c.LambdaRequests, c.APIGateway, c.Timers, c.S3Requests, c.Events, c.Storage, c.Expiry, c.Total())
		if beside {
			fmt.Fprintf(&b, " $%.2f | $%.2f |\n", c.LambdaDuration, c.Logs)
		} else {
			b.WriteString(" | |\n")
		}
	}
	for _, r := range results {
		line(r.Name, r.bill(p), true)
	}
	for _, f := range floors {
		line(f.name, p.Bill(f.u), false)
	}
	fmt.Fprintf(&b, "\nA timer beyond the threshold (%s here, so the timer workload's 5 s sleeps are long timers; 900 s by default) waits in the due index, and the heartbeat's sweep sends it as an SQS delay once it is within the threshold: the timers column is what the sweeps the bench ran every %s during that workload cost beyond as many sweeps with nothing due (a read and a write of each job, the write moving its due index entry, and its send), taken out of the DynamoDB and SQS columns; what every sweep costs anyway is under Heartbeat sweep below. With LongTimers StepFunctions a timer is one Step Functions Standard execution instead: %d billed transitions and the SQS send it makes ($%.2f per million).\n",
		benchTimerThreshold, benchSweepEvery, costmeter.TimerTransitions, 1e6*(costmeter.TimerTransitions*p["sfn_standard_transition"]+p["sqs_request"]))

	fmt.Fprintf(&b, "\n### What the jobs say they cost\n\nEach job counts its own usage as it runs (`cost` on `GET /v1/jobs/{id}`, docs/model.md#what-a-job-cost). Here the mean of each workload's jobs' `cost.usd`, less its Lambda duration as the meter's total is, is held against the meter above; `make bench` fails when one is more than %.0f%% off. The jobs count what is made for each of them; the meter also sees what no job is charged for (the sweep's queries of the due index, workers' empty receives, reads after a job's last write, the tenants' counters), so the jobs' own figure runs a little below it.\n\n", 100*ownTolerance)
	b.WriteString(renderOwn(results, p))

	fmt.Fprintf(&b, "\n### Storage and expiry\n\n| workload | table bytes/job | S3 bytes/job | jobs with data in S3 |\n|---|---|---|---|\n")
	for _, r := range results {
		n := float64(r.Jobs)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %d |\n", r.Name, r.ItemBytes/n, r.ObjectBytes/n, r.DataJobs)
	}
	fmt.Fprintf(&b, "\nTable bytes are as billed: each item's size, 100 bytes of overhead, and its due-index entry with 100 more. ")
	if exp.Jobs > 0 {
		per := exp.perJob()
		fmt.Fprintf(&b, "At expiry (the engine's clock moved past the retention) %d sweeps deleted the data of %d jobs; beyond an idle sweep each such job cost %.2f S3 list (class A), %.2f S3 delete (free), %.2f WRU and %.2f RRU:",
			exp.Sweeps, exp.Jobs, per.S3Writes, per.S3Deletes, per.WRU, per.RRU)
		for _, k := range sortedKeys(exp.Requests) {
			fmt.Fprintf(&b, " %s %d,", k, exp.Requests[k])
		}
		fmt.Fprintf(&b, " $%.2f per million such jobs.\n", p.Bill(costmeter.Usage{Jobs: 1, Expiry: per}).Expiry)
	} else {
		b.WriteString("No job kept data in S3, so none had any to delete at expiry.\n")
	}

	b.WriteString("\n### Requests by operation (whole workload)\n\n")
	for _, r := range append(append([]result{}, results...), floor) {
		fmt.Fprintf(&b, "- %s:", r.Name)
		for _, k := range sortedKeys(r.Requests) {
			fmt.Fprintf(&b, " %s %d,", k, r.Requests[k])
		}
		inv := []string{}
		for _, k := range sortedKeys(r.Lambda) {
			if r.Lambda[k].GBSeconds > 0 {
				inv = append(inv, fmt.Sprintf("%s %.0f (%.2f GB-s)", k, r.Lambda[k].Requests, r.Lambda[k].GBSeconds))
			} else {
				inv = append(inv, fmt.Sprintf("%s %.0f", k, r.Lambda[k].Requests))
			}
		}
		fmt.Fprintf(&b, " Lambda: %s", strings.Join(inv, ", "))
		if r.APIRequests > 0 {
			fmt.Fprintf(&b, "; API Gateway %d; logs %d bytes in %d events", r.APIRequests, r.Logs.Bytes, r.Logs.Events)
		}
		if len(r.Sweeps.Requests) > 0 {
			fmt.Fprintf(&b, "; of which the bench's sweeps, beyond sweeps with nothing due:")
			for _, k := range sortedKeys(r.Sweeps.Requests) {
				fmt.Fprintf(&b, " %s %d,", k, r.Sweeps.Requests[k])
			}
			fmt.Fprintf(&b, " %.1f WRU, %.1f RRU", r.Sweeps.Units.WRU, r.Sweeps.Units.RRU)
		}
		b.WriteString("\n")
	}

	b.WriteString(longJobs(results, p))
	if lat.Put > 0 {
		fmt.Fprintf(&b, "\n## A chained step's latency\n\nA job of %d pass steps run alone: the median time from one step's end to the next's is %s (each step one conditional write, the next run by the same execute invocation); a conditional PutItem of a %d-byte item through the same proxy takes %s (median of %d): %.1f times.\n",
			lat.Steps, msf(lat.Step), lat.Item, msf(lat.Put), lat.Steps, float64(lat.Step)/float64(lat.Put))
	}
	b.WriteString("\n## Heartbeat sweep with jobs at rest\n\nOn the local stack (finished jobs stored in moto; the sweep's DynamoDB and SQS requests at the proxy, its read units metered):\n\n| jobs at rest | requests per sweep | read units per sweep |\n|---|---|---|\n")
	for _, s := range sweeps {
		if !s.InMemory {
			fmt.Fprintf(&b, "| %d | %d | %.1f |\n", s.AtRest, s.Requests, s.Units)
		}
	}
	b.WriteString("\nOn the engine over the in-memory store, at every size (moto answers a query of the due index by reading every item of the table: a sweep took over a minute at 100,000 jobs at rest; the engine reads jobs only through `Store.Due`, on DynamoDB one query of the sparse index per shard):\n\n| jobs at rest | engine.Store calls per sweep | due entries read |\n|---|---|---|\n")
	for _, s := range sweeps {
		if s.InMemory {
			var calls []string
			for _, m := range sortedKeys(s.Calls) {
				calls = append(calls, fmt.Sprintf("%s %d", m, s.Calls[m]))
			}
			fmt.Fprintf(&b, "| %d | %d: %s | %d |\n", s.AtRest, s.Requests, strings.Join(calls, ", "), s.DueRead)
		}
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

// chart draws $ per million jobs for each workload, all-in but Lambda
// duration and logs: stepflow, the physical floor of as many steps (one
// submit per request) and Step Functions.
func chart(path string, results []result, p costmeter.Prices) error {
	pl := plot.New()
	pl.Title.Text = "AWS charges per million jobs (USD), all-in but Lambda duration and logs"
	pl.Y.Label.Text = "USD per million jobs"
	var names []string
	engine, std, exp, flo := plotter.Values{}, plotter.Values{}, plotter.Values{}, plotter.Values{}
	for _, r := range results {
		// One line per clause, so the names fit under their bars.
		names = append(names, strings.NewReplacer(", AWS-like", "\nAWS-like", ", then", "\nthen", ": ", "\n", " via ", "\nvia ").Replace(r.Name))
		engine = append(engine, r.bill(p).Total())
		s, e := r.stepFunctions(p)
		std, exp = append(std, s), append(exp, e)
		flo = append(flo, p.Bill(costmeter.Floor(r.StepsPerJob, 1)).Total())
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

// longJobs compares the pass chains of every length the bench ran, per
// step: what a step costs against the five-step job's, and how long it
// takes against the ten-step job's (issue 19's targets: 1.25 and 1.5).
func longJobs(results []result, p costmeter.Prices) string {
	var chains []result
	var five, ten *result
	for i, r := range results {
		switch {
		case r.Name == "five-step pass":
			five = &results[i]
		case r.Name == "10-step pass":
			ten = &results[i]
		}
		if strings.HasSuffix(r.Name, "-step pass") || strings.HasPrefix(r.Name, "map:") {
			chains = append(chains, r)
		}
	}
	if five == nil || ten == nil {
		return ""
	}
	perStep := func(r result) (usd, wru, ms float64) {
		n := float64(r.Jobs * r.StepsPerJob)
		return r.bill(p).Total() / float64(r.StepsPerJob), r.Units.WRU / n, float64(percentile(r.ToDone, .5)) / float64(time.Millisecond) / float64(r.StepsPerJob)
	}
	var b strings.Builder
	b.WriteString("\n## Long jobs, per step\n\nPass steps in a line, each after the one before, and a map of pass items (per item, its map step counted as one: issue 20's target is at most $0.70 a million items): a job's cost and its enqueue-to-done median, divided by its steps; cost against the five-step job's, time against the ten-step job's.\n\n| job | jobs | $ per million, per step | WRU per step | ms per step (p50) | cost per step / five-step's | time per step / ten-step's |\n|---|---|---|---|---|---|---|\n")
	u5, _, _ := perStep(*five)
	_, _, m10 := perStep(*ten)
	for _, r := range chains {
		u, w, m := perStep(r)
		fmt.Fprintf(&b, "| %s | %d | $%.2f | %.2f | %.1f | %.2f | %.2f |\n", r.Name, r.Jobs, u, w, m, u/u5, m/m10)
	}
	return b.String()
}

// offMeter answers the workloads whose jobs' own cost is more than
// ownTolerance from their meter's, saying by how much.
func offMeter(results []result, p costmeter.Prices) []string {
	var off []string
	for _, r := range results {
		if d := agreement(r.ownTotal(p), r.bill(p).Total()); math.Abs(d) > ownTolerance {
			off = append(off, fmt.Sprintf("%s: jobs say $%.2f per million, the meter $%.2f (%+.1f%%)", r.Name, r.ownTotal(p), r.bill(p).Total(), 100*d))
		}
	}
	return off
}
