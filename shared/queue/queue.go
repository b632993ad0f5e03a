// Package queue carries work and time on SQS. A message names one runnable
// step; its visibility timeout is the lease. A delay up to the timer
// threshold (at most SQS's 900 s) is the message's DelaySeconds. The
// engine sends nothing further off unless the queue has the timer state
// machine (the template's LongTimers StepFunctions): then a longer delay is
// a Step Functions Standard execution of statemachine/timer.asl.json that
// waits until the instant and then sends the message. Without it, a longer
// delay the engine still sends (an early message sent again for the rest)
// goes at 900 s and is sent again until due
// (docs/model.md#waits-sleeps-and-timers). The engine says
// where each message goes (engine.Destination), and the queue maps that to
// a URL: the ready queues, one per priority, or the lane of a queue per
// tenant and worker queue name, created when work for it is first
// submitted (never by a claim), at most Config.MaxWorkerQueues per tenant.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// API is the part of the SQS client the queue uses (fault layers and
// the cost meter sit in the SDK middleware stack, localstack/awsfault).
type API interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	DeleteQueue(context.Context, *sqs.DeleteQueueInput, ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error)
}

// TimerAPI is the part of the Step Functions client the timer uses.
type TimerAPI interface {
	StartExecution(context.Context, *sfn.StartExecutionInput, ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
}

// MaxDelay is the longest DelaySeconds SQS allows. Without a timer state
// machine a longer delay (which the engine sends only for an early
// message) is sent at this one and re-sent by the receiver until it is
// due.
const MaxDelay = 900 * time.Second

// Config names the queues.
type Config struct {
	ReadyURLs          [domain.MaxPriority + 1]string // index = priority
	DLQARN             string                         // worker queues redrive here
	DLQURL             string                         // the same queue, whose depth the sweep reads (depths.go)
	WorkerQueuePrefix  string                         // e.g. "<stack>-w-"
	WorkerMaxReceives  int                            // redrive after this many receives of one worker message
	WorkerQueueVisible time.Duration                  // visibility before a claim sets the lease's
	MaxWorkerQueues    int                            // worker queues one tenant may have; 0 means DefaultMaxWorkerQueues
	// TimerARN is the timer state machine (STEPFLOW_TIMER_STATE_MACHINE);
	// TimerThreshold the longest delay sent as an SQS delay
	// (STEPFLOW_TIMER_THRESHOLD, at most MaxDelay; 0 means MaxDelay).
	TimerARN       string
	TimerThreshold time.Duration
}

// DefaultMaxWorkerQueues bounds a tenant's worker queues unless configured
// (STEPFLOW_MAX_WORKER_QUEUES): each is an SQS queue that costs nothing idle
// but must not be created without bound by one tenant.
const DefaultMaxWorkerQueues = 50

// ErrNoWorkerQueue answers a lookup of a worker queue no work was ever
// submitted for.
var ErrNoWorkerQueue = engine.ErrNoWorkerQueue

// Queue is the SQS adapter.
type Queue struct {
	api    API
	timers TimerAPI // nil: no timer state machine
	cfg    Config
	urls   sync.Map // worker queue name -> url
	// noLane remembers, for a minute, that a worker queue has no P0 or P2
	// lane, so a claim does not ask SQS each time.
	noLane sync.Map // lane name -> time.Time checked
}

// WithTimers lets the queue send delays beyond the threshold through the
// timer state machine cfg.TimerARN names.
func (q *Queue) WithTimers(t TimerAPI) *Queue {
	if q.cfg.TimerARN != "" && t != nil {
		q.timers = t
	}
	return q
}

// TimerService reports whether the queue holds delays beyond the threshold
// itself (the timer state machine): the engine then sends them at once
// (engine.Config.TimerService) rather than have the sweep send them within
// reach.
func (q *Queue) TimerService() bool { return q.timers != nil }

// New answers a queue adapter.
func New(api API, cfg Config) *Queue {
	if cfg.TimerThreshold <= 0 || cfg.TimerThreshold > MaxDelay {
		cfg.TimerThreshold = MaxDelay
	}
	if cfg.WorkerMaxReceives == 0 {
		cfg.WorkerMaxReceives = 100
	}
	if cfg.WorkerQueueVisible == 0 {
		cfg.WorkerQueueVisible = 30 * time.Second
	}
	if cfg.MaxWorkerQueues == 0 {
		cfg.MaxWorkerQueues = DefaultMaxWorkerQueues
	}
	return &Queue{api: api, cfg: cfg}
}

// WorkerQueueName is the SQS name of a tenant's worker queue. Tenant and
// queue names may both contain '-', so the tenant's length is written before
// it: no two (tenant, queue) pairs share a name (tenant "a" with queue
// "x-q1" is "1-a-x-q1", tenant "a-x" with queue "q1" is "3-a-x-q1"). A name
// over SQS's 80 characters is hashed, still led by a tag of its tenant, so
// one prefix lists each tenant's queues.
func (q *Queue) WorkerQueueName(tenant, name string) string {
	if n := q.readablePrefix(tenant) + name; len(n) <= 80 {
		return n
	}
	sum := sha256.Sum256([]byte(tenant + "/" + name)) // '/' is in neither name
	return q.hashedPrefix(tenant) + hex.EncodeToString(sum[:])[:32]
}

func (q *Queue) readablePrefix(tenant string) string {
	return q.cfg.WorkerQueuePrefix + strconv.Itoa(len(tenant)) + "-" + tenant + "-"
}

// hashedPrefix starts with "h", which no readable name does (they start
// with the tenant's length).
func (q *Queue) hashedPrefix(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return q.cfg.WorkerQueuePrefix + "h" + hex.EncodeToString(sum[:])[:12] + "-"
}

// forget drops a worker queue's cached URL.
func (q *Queue) forget(url string) {
	q.urls.Range(func(name, u any) bool {
		if u == url {
			q.urls.Delete(name)
		}
		return true
	})
}

// WorkerQueueURL answers the URL of an existing worker queue, or
// ErrNoWorkerQueue: a claim on a name no work was submitted for creates
// nothing.
func (q *Queue) WorkerQueueURL(ctx context.Context, tenant, name string) (string, error) {
	qn := q.WorkerQueueName(tenant, name)
	if u, ok := q.urls.Load(qn); ok {
		return u.(string), nil
	}
	out, err := q.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &qn})
	var missing *sqstypes.QueueDoesNotExist
	switch {
	case errors.As(err, &missing):
		return "", fmt.Errorf("worker queue %q of tenant %s: %w", name, tenant, ErrNoWorkerQueue)
	case err != nil:
		return "", fmt.Errorf("worker queue %s: %w", qn, err)
	}
	q.urls.Store(qn, *out.QueueUrl)
	return *out.QueueUrl, nil
}

// EnsureWorkerQueue answers a worker queue's URL, creating it when work is
// submitted for it the first time, unless the tenant already has
// MaxWorkerQueues (an *domain.Error, CodeInvalid). CreateQueue is
// idempotent for equal attributes, so two creators at once are harmless;
// the bound is checked with one ListQueues per creation, never per job.
func (q *Queue) EnsureWorkerQueue(ctx context.Context, tenant, name string) error {
	_, err := q.ensureWorkerQueue(ctx, tenant, name)
	return err
}

func (q *Queue) ensureWorkerQueue(ctx context.Context, tenant, name string) (string, error) {
	u, err := q.WorkerQueueURL(ctx, tenant, name)
	if !errors.Is(err, ErrNoWorkerQueue) {
		return u, err
	}
	n, err := q.countWorkerQueues(ctx, tenant)
	if err != nil {
		return "", err
	}
	if n >= q.cfg.MaxWorkerQueues {
		return "", &domain.Error{Code: domain.CodeInvalid, Message: fmt.Sprintf(
			"tenant %s already has %d worker queues, the limit; use one of them or raise STEPFLOW_MAX_WORKER_QUEUES", tenant, n)}
	}
	return q.createWorkerQueue(ctx, tenant, name)
}

// createWorkerQueue makes a worker queue (the bound checked by the caller).
func (q *Queue) createWorkerQueue(ctx context.Context, tenant, name string) (string, error) {
	qn := q.WorkerQueueName(tenant, name)
	attrs := map[string]string{
		"VisibilityTimeout":      strconv.Itoa(int(q.cfg.WorkerQueueVisible.Seconds())),
		"MessageRetentionPeriod": "1209600",
	}
	if q.cfg.DLQARN != "" {
		rp, _ := json.Marshal(map[string]any{"deadLetterTargetArn": q.cfg.DLQARN, "maxReceiveCount": q.cfg.WorkerMaxReceives})
		attrs["RedrivePolicy"] = string(rp)
	}
	created, err := q.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &qn, Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("create worker queue %s: %w", qn, err)
	}
	q.urls.Store(qn, *created.QueueUrl)
	return *created.QueueUrl, nil
}

// countWorkerQueues counts a tenant's worker queues under both name forms.
func (q *Queue) countWorkerQueues(ctx context.Context, tenant string) (int, error) {
	n := 0
	for _, prefix := range []string{q.readablePrefix(tenant), q.hashedPrefix(tenant)} {
		in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)}
		for {
			out, err := q.api.ListQueues(ctx, in)
			if err != nil {
				return 0, fmt.Errorf("count worker queues of tenant %s: %w", tenant, err)
			}
			n += len(out.QueueUrls)
			if out.NextToken == nil || n >= q.cfg.MaxWorkerQueues {
				break
			}
			in.NextToken = out.NextToken
		}
	}
	return n, nil
}

// URLFor answers the URL of a tenant's destination: the ready queue of
// its lane, or its lane of the tenant's worker queue, made if missing (at
// submit, or again if deleted since; the queue within the bound). It is
// also where a dead-lettered message is sent back (stepflow dlq).
func (q *Queue) URLFor(ctx context.Context, tenant string, to engine.Destination) (string, error) {
	p := to.Lane
	if p < 0 || p > domain.MaxPriority {
		return "", fmt.Errorf("no lane %d", p)
	}
	if to.Kind == engine.ToWorker {
		u, err := q.ensureWorkerQueue(ctx, tenant, to.Queue)
		if err != nil || p == domain.DefaultPriority {
			return u, err
		}
		return q.ensureLane(ctx, tenant, to.Queue, p)
	}
	if q.cfg.ReadyURLs[p] == "" {
		return "", fmt.Errorf("no ready queue for priority %d", p)
	}
	return q.cfg.ReadyURLs[p], nil
}

// Dispatch sends one message per send, batched per queue (up to ten a
// request). The caller relies on the sweep to re-send what did not go.
func (q *Queue) Dispatch(ctx context.Context, j *domain.Job, ds []engine.Send) error {
	return q.DispatchJobs(ctx, []engine.JobSends{{Job: j, Sends: ds}})
}

// DispatchJobs sends the messages of several jobs together: each queue's
// entries, whatever job they belong to, in SendMessageBatch calls of up
// to ten. A job whose queue cannot be found is not sent and named in the
// error; the others go.
func (q *Queue) DispatchJobs(ctx context.Context, batch []engine.JobSends) error {
	type entry struct {
		job   *domain.Job
		entry sqstypes.SendMessageBatchRequestEntry
	}
	byURL := map[string][]entry{}
	var order []string
	var errs []error
	failed := map[string]bool{} // jobs with an error already, named once
jobs:
	for ji, js := range batch {
		j := js.Job
		var mine []entry
		var urls []string
		for i, d := range js.Sends {
			url, err := q.URLFor(ctx, j.Tenant, d.To)
			if err != nil {
				errs = append(errs, fmt.Errorf("dispatch job %s step %s: %w", j.ID, d.Step.ID(), err))
				continue jobs // nothing of this job is sent
			}
			body, _ := json.Marshal(engine.Message{Tenant: j.Tenant, Job: j.ID, Step: d.Step.ID(), Wake: d.Wake, Doc: d.Doc})
			if d.Delay > q.cfg.TimerThreshold && q.timers != nil {
				if err := q.startTimer(ctx, j, d.Dispatch, url, string(body)); err != nil {
					errs = append(errs, err)
					continue jobs
				}
				continue
			}
			// Rounded up: a message must not arrive before its step is due.
			delay := int32((min(max(d.Delay, 0), MaxDelay) + time.Second - 1) / time.Second)
			e := sqstypes.SendMessageBatchRequestEntry{
				// Unique within the batch: job and send.
				Id: aws.String(strconv.Itoa(ji) + "_" + strconv.Itoa(i)), MessageBody: aws.String(string(body)), DelaySeconds: delay,
			}
			if d.To.Kind != engine.ToWorker {
				// The tenant is the message group: on a standard queue that makes
				// it an SQS fair queue, which serves a quiet tenant's messages
				// ahead of another's backlog (a worker queue is the tenant's own).
				e.MessageGroupId = aws.String(j.Tenant)
			}
			mine = append(mine, entry{job: j, entry: e})
			urls = append(urls, url)
		}
		for i, e := range mine {
			if _, ok := byURL[urls[i]]; !ok {
				order = append(order, urls[i])
			}
			byURL[urls[i]] = append(byURL[urls[i]], e)
		}
	}
	for _, url := range order {
		entries := byURL[url]
		for len(entries) > 0 {
			n := min(len(entries), 10)
			call := entries[:n]
			entries = entries[n:]
			in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
			jobOf := map[string]*domain.Job{}
			for _, e := range call {
				in.Entries = append(in.Entries, e.entry)
				jobOf[aws.ToString(e.entry.Id)] = e.job
			}
			out, err := q.api.SendMessageBatch(ctx, in)
			if err != nil {
				if missing := (*sqstypes.QueueDoesNotExist)(nil); errors.As(err, &missing) {
					q.forget(url) // deleted since: the sweep's re-send makes it again
				}
				for _, e := range call {
					if !failed[e.job.ID] {
						failed[e.job.ID] = true
						errs = append(errs, fmt.Errorf("dispatch job %s: %w", e.job.ID, err))
					}
				}
				continue
			}
			for _, f := range out.Failed {
				if j := jobOf[aws.ToString(f.Id)]; j != nil && !failed[j.ID] {
					failed[j.ID] = true
					errs = append(errs, fmt.Errorf("dispatch job %s: a message was refused: %s", j.ID, aws.ToString(f.Message)))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// timerInput is what the timer state machine reads: wait until At, then
// send Body to QueueURL in Group.
type timerInput struct {
	At       string `json:"at"`
	QueueURL string `json:"queue_url"`
	Body     string `json:"body"`
	Group    string `json:"group"`
}

// startTimer starts a timer execution that sends body to url after d's
// delay. Its name is the timer's identity (job, step, attempt, instant),
// so a second start of the same timer (a retried request, a re-sent
// dispatch) is refused by Step Functions and changes nothing.
func (q *Queue) startTimer(ctx context.Context, j *domain.Job, d domain.Dispatch, url, body string) error {
	at := time.Now().Add(d.Delay).UTC().Truncate(time.Second).Add(time.Second) // never early
	_, idx, _ := j.Step(d.Step.ID())
	in, _ := json.Marshal(timerInput{At: at.Format(time.RFC3339), QueueURL: url, Body: body, Group: j.Tenant})
	name := TimerName(j.ID, idx, d.Step.Attempt, at)
	_, err := q.timers.StartExecution(ctx, &sfn.StartExecutionInput{
		StateMachineArn: aws.String(q.cfg.TimerARN), Name: aws.String(name), Input: aws.String(string(in)),
	})
	if exists := (*sfntypes.ExecutionAlreadyExists)(nil); errors.As(err, &exists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("timer for job %s step %s: %w", j.ID, d.Step.ID(), err)
	}
	return nil
}

// TimerName is a timer execution's name: at most 80 of [A-Za-z0-9-_].
func TimerName(jobID string, stepIndex, attempt int, at time.Time) string {
	return fmt.Sprintf("%s-%d-%d-%d", jobID, stepIndex, attempt, at.Unix())
}

// Token is the engine's handle on a delivery: the queue's URL and the
// message's receipt handle, which is all SQS needs to extend or delete it.
func Token(url, receipt string) string { return url + " " + receipt }

func splitToken(token string) (url, receipt string, err error) {
	url, receipt, ok := strings.Cut(token, " ")
	if !ok || url == "" || receipt == "" {
		return "", "", fmt.Errorf("delivery token %.40q is not a queue's", token)
	}
	return url, receipt, nil
}

// ReadyTokens answers how the execute function makes the token of a
// message it received from one of the ready queues (at readyURLs), named by
// the queue's ARN (arn:aws:sqs:region:account:name); "" for another queue.
func ReadyTokens(readyURLs [domain.MaxPriority + 1]string) func(queueARN, receipt string) string {
	return func(queueARN, receipt string) string {
		name := queueARN[strings.LastIndex(queueARN, ":")+1:]
		for _, u := range readyURLs {
			if u != "" && u[strings.LastIndex(u, "/")+1:] == name {
				return Token(u, receipt)
			}
		}
		return ""
	}
}

// LaneSlice bounds each long-poll of a worker queue that has more than one
// priority lane: SQS long-polls one queue at a time, so work arriving on
// another lane waits at most this long for a claim that is waiting.
const LaneSlice = 5 * time.Second

// Take long-polls a tenant's worker queue for up to max deliveries, from
// its lanes in the order given (those that exist).
func (q *Queue) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	main, err := q.WorkerQueueURL(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, p := range lanes {
		if p == domain.DefaultPriority {
			urls = append(urls, main)
		} else if u := q.laneURL(ctx, tenant, name, p); u != "" {
			urls = append(urls, u)
		}
	}
	// Each round looks at every lane in turn without waiting, then
	// long-polls the last if none had anything: with one lane for the whole
	// wait, with several for a slice of it, so that work arriving on
	// another lane is seen within LaneSlice (a lane's empty receives cost
	// a request each; a three-lane queue's idle claimer makes about 12 a
	// minute where one lane makes 3).
	deadline := time.Now().Add(wait)
	for {
		var res []engine.Delivery
		for i, url := range urls {
			w := time.Duration(0)
			if i == len(urls)-1 && len(res) == 0 {
				if left := time.Until(deadline).Round(time.Second); left > 0 {
					w = left
				}
				if len(urls) > 1 {
					w = min(w, LaneSlice)
				}
			}
			got, err := q.receive(ctx, tenant, name, url, max-len(res), w)
			if err != nil {
				return res, err
			}
			if res = append(res, got...); len(res) >= max {
				break
			}
		}
		if len(res) > 0 || len(urls) == 1 || time.Until(deadline) < time.Second || ctx.Err() != nil {
			return res, nil
		}
	}
}

// LaneName is the SQS name of a worker queue's P0 or P2 lane: the queue's
// own name with "p<n>" after the prefix (readable names start with a digit,
// hashed ones with "h", so none is another queue's).
func (q *Queue) LaneName(tenant, name string, p int) string {
	base := strings.TrimPrefix(q.WorkerQueueName(tenant, name), q.cfg.WorkerQueuePrefix)
	if len(q.cfg.WorkerQueuePrefix)+2+len(base) > 80 {
		sum := sha256.Sum256([]byte(tenant + "/" + name))
		base = strings.TrimPrefix(q.hashedPrefix(tenant), q.cfg.WorkerQueuePrefix) + hex.EncodeToString(sum[:])[:32]
	}
	return q.cfg.WorkerQueuePrefix + "p" + strconv.Itoa(p) + base
}

// laneURL answers a lane's URL, or "" when it does not exist (remembered
// for a minute: a lane made meanwhile is seen within a minute).
func (q *Queue) laneURL(ctx context.Context, tenant, name string, p int) string {
	ln := q.LaneName(tenant, name, p)
	if u, ok := q.urls.Load(ln); ok {
		return u.(string)
	}
	if at, ok := q.noLane.Load(ln); ok && time.Since(at.(time.Time)) < time.Minute {
		return ""
	}
	out, err := q.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &ln})
	if err != nil {
		q.noLane.Store(ln, time.Now())
		return ""
	}
	q.urls.Store(ln, *out.QueueUrl)
	return *out.QueueUrl
}

// ensureLane makes a worker queue's P0 or P2 lane when a job of that
// priority first names the queue; lanes do not count against the
// tenant's bound of worker queues (the queue itself does).
func (q *Queue) ensureLane(ctx context.Context, tenant, name string, p int) (string, error) {
	ln := q.LaneName(tenant, name, p)
	if u, ok := q.urls.Load(ln); ok {
		return u.(string), nil
	}
	attrs := map[string]string{
		"VisibilityTimeout":      strconv.Itoa(int(q.cfg.WorkerQueueVisible.Seconds())),
		"MessageRetentionPeriod": "1209600",
	}
	if q.cfg.DLQARN != "" {
		rp, _ := json.Marshal(map[string]any{"deadLetterTargetArn": q.cfg.DLQARN, "maxReceiveCount": q.cfg.WorkerMaxReceives})
		attrs["RedrivePolicy"] = string(rp)
	}
	created, err := q.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &ln, Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("create worker queue lane %s: %w", ln, err)
	}
	q.urls.Store(ln, *created.QueueUrl)
	q.noLane.Delete(ln)
	return *created.QueueUrl, nil
}

func (q *Queue) receive(ctx context.Context, tenant, name, url string, max int, wait time.Duration) ([]engine.Delivery, error) {
	out, err := q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: int32(max), WaitTimeSeconds: int32(wait / time.Second),
		// How often it was received: a first receive of a new job's
		// message may lease on the job it carries, without a read.
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if missing := (*sqstypes.QueueDoesNotExist)(nil); errors.As(err, &missing) {
		q.forget(url)
		return nil, fmt.Errorf("worker queue %q of tenant %s: %w", name, tenant, ErrNoWorkerQueue)
	}
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", url, err)
	}
	res := make([]engine.Delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		d := engine.Delivery{Token: Token(url, aws.ToString(m.ReceiptHandle))}
		d.Receives, _ = strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &d.Message); err != nil || d.Message.Job == "" {
			// Not a dispatch: drop it rather than hand it out again and again.
			_ = q.Ack(ctx, d.Token)
			continue
		}
		res = append(res, d)
	}
	return res, nil
}

// Ack deletes a delivered message that needs no more delivery.
func (q *Queue) Ack(ctx context.Context, token string) error {
	url, receipt, err := splitToken(token)
	if err != nil {
		return err
	}
	if _, err := q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &receipt}); err != nil {
		return fmt.Errorf("delete message: %w", err)
	}
	return nil
}

// Extend makes a delivered message invisible for d from now: the lease
// timer. SQS caps it at 12 hours.
func (q *Queue) Extend(ctx context.Context, token string, d time.Duration) error {
	url, receipt, err := splitToken(token)
	if err != nil {
		return err
	}
	secs := visibilitySeconds(d)
	if _, err := q.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: &receipt, VisibilityTimeout: secs}); err != nil {
		return fmt.Errorf("change visibility: %w", err)
	}
	return nil
}

// Release makes a delivered message visible again now.
func (q *Queue) Release(ctx context.Context, token string) error { return q.Extend(ctx, token, 0) }

// visibilitySeconds is d as a visibility timeout: whole seconds, at most
// SQS's 12 hours.
func visibilitySeconds(d time.Duration) int32 {
	return int32(min(max(d.Round(time.Second), 0), 12*time.Hour) / time.Second)
}

// batchEntry is one entry of a batched settle: its place in the caller's
// list and its receipt handle.
type batchEntry struct {
	at      int
	receipt string
	secs    int32 // ChangeMessageVisibilityBatch only
}

// settleBatched groups tokens by queue URL and calls send once per ten of
// a queue; send answers, per entry id (its place in the caller's list),
// why SQS refused it. A request that fails whole fails each of its
// entries.
func settleBatched(tokens []string, secs func(int) int32, errs []error, send func(url string, entries []batchEntry) (map[int]error, error)) {
	byURL := map[string][]batchEntry{}
	var order []string
	for i, t := range tokens {
		url, receipt, err := splitToken(t)
		if err != nil {
			errs[i] = err
			continue
		}
		if _, ok := byURL[url]; !ok {
			order = append(order, url)
		}
		byURL[url] = append(byURL[url], batchEntry{at: i, receipt: receipt, secs: secs(i)})
	}
	for _, url := range order {
		entries := byURL[url]
		for len(entries) > 0 {
			n := min(len(entries), 10)
			failed, err := send(url, entries[:n])
			for _, e := range entries[:n] {
				if err != nil {
					errs[e.at] = err
				} else if f := failed[e.at]; f != nil {
					errs[e.at] = f
				}
			}
			entries = entries[n:]
		}
	}
}

// refusedEntries maps a batch's failed entries (their Id is the caller's
// place) to errors worded as the single call's: what the entry would
// have answered alone.
func refusedEntries(what string, failed []sqstypes.BatchResultErrorEntry) map[int]error {
	out := map[int]error{}
	for _, f := range failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil {
			continue
		}
		out[i] = fmt.Errorf("%s: %s: %s", what, aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return out
}

// ExtendAll changes the visibility of several deliveries with one
// ChangeMessageVisibilityBatch per ten of a queue.
func (q *Queue) ExtendAll(ctx context.Context, es []engine.Extension) []error {
	errs := make([]error, len(es))
	tokens := make([]string, len(es))
	for i, e := range es {
		tokens[i] = e.Token
	}
	settleBatched(tokens, func(i int) int32 { return visibilitySeconds(es[i].For) }, errs, func(url string, entries []batchEntry) (map[int]error, error) {
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url)}
		for _, e := range entries {
			in.Entries = append(in.Entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(e.at)), ReceiptHandle: aws.String(e.receipt), VisibilityTimeout: e.secs,
			})
		}
		out, err := q.api.ChangeMessageVisibilityBatch(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("change visibility: %w", err)
		}
		return refusedEntries("change visibility", out.Failed), nil
	})
	return errs
}

// AckAll deletes several deliveries with one DeleteMessageBatch per ten of
// a queue.
func (q *Queue) AckAll(ctx context.Context, tokens []string) []error {
	errs := make([]error, len(tokens))
	settleBatched(tokens, func(int) int32 { return 0 }, errs, func(url string, entries []batchEntry) (map[int]error, error) {
		in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url)}
		for _, e := range entries {
			in.Entries = append(in.Entries, sqstypes.DeleteMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(e.at)), ReceiptHandle: aws.String(e.receipt),
			})
		}
		out, err := q.api.DeleteMessageBatch(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("delete message: %w", err)
		}
		return refusedEntries("delete message", out.Failed), nil
	})
	return errs
}
