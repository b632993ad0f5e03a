package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/store"
)

// sweepPoint is one sweep's cost with some jobs at rest: on the local
// stack, its DynamoDB and SQS requests and read units; InMemory, on the
// engine over the in-memory store, its engine.Store calls (Requests) and
// the due entries it read.
type sweepPoint struct {
	AtRest   int
	InMemory bool
	Requests int64
	Units    float64 // read units
	DueRead  int
	Calls    map[string]int64 // InMemory: Requests by Store method
}

const (
	// restTenant owns the jobs at rest.
	restTenant = "rest"
	// restOnMoto is the most jobs at rest stored in moto. It stores about
	// 1,700 items a second (ten minutes for a million), and answers a
	// query of the due index by reading every item of the table: at
	// 100,000 jobs at rest a sweep took over a minute here, and every
	// sweep after it (the expiry's) as long, so larger backlogs are
	// measured on the in-memory store only (sweepInMemory).
	restOnMoto = 10000
	// restDocBytes is the size of a job at rest's document: about what a
	// finished one-step job's compressed document is (random bytes, as
	// incompressible as flate's output).
	restDocBytes = 500
)

// sweepAtRest measures one heartbeat sweep at each backlog size: on the
// local stack up to restOnMoto jobs at rest, and on the in-memory store at
// every size. Its requests must stay flat as the stored jobs grow.
func (b *bench) sweepAtRest(ctx context.Context, sizes []int) ([]sweepPoint, error) {
	var onMoto []int
	for _, n := range sizes {
		if n <= restOnMoto {
			onMoto = append(onMoto, n)
		}
	}
	out, err := b.sweepOnMoto(ctx, onMoto)
	if err != nil {
		return nil, err
	}
	mem, err := sweepInMemory(ctx, sizes)
	if err != nil {
		return nil, fmt.Errorf("in memory: %w", err)
	}
	return append(out, mem...), nil
}

// sweepOnMoto stores finished jobs (written straight to the emulator, past
// the proxy and the meter) and measures one heartbeat sweep at each
// backlog size.
func (b *bench) sweepOnMoto(ctx context.Context, sizes []int) ([]sweepPoint, error) {
	cfg, err := devstack.AWSConfig(ctx, b.stack.Emulator.MotoURL, "us-east-1")
	if err != nil {
		return nil, err
	}
	direct := dynamoFrom(cfg)
	table := b.stack.Resources.Tables["JobsTable"]
	// One document shared by every job at rest: moto keeps each item's
	// own copy, and making a million random ones would only cost time.
	doc := make([]byte, restDocBytes)
	_, _ = rand.Read(doc)
	ttl := strconv.FormatInt(time.Now().Add(30*24*time.Hour).Unix(), 10)
	stored := 0
	var out []sweepPoint
	for _, n := range sizes {
		if n > stored {
			start := time.Now()
			for first := stored; first < n; first += 25 {
				if err := writeAtRest(ctx, direct, table, first, min(first+25, n), doc, ttl); err != nil {
					return nil, fmt.Errorf("store jobs at rest: %w", err)
				}
			}
			fmt.Fprintf(os.Stderr, "bench: stored %d jobs at rest (%d in all) in %s\n", n-stored, n, time.Since(start).Round(time.Second))
			stored = n
		}
		before, units := b.stack.Emulator.Counts(), b.meter.Units()
		ev := events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: time.Now()}
		start := time.Now()
		if err := b.stack.Handlers.Schedule["HeartbeatFunction"](ctx, ev); err != nil {
			return nil, err
		}
		// moto answers an index query by reading every item, so its time
		// grows with the jobs stored; DynamoDB reads only the index.
		fmt.Fprintf(os.Stderr, "bench: a sweep over %d jobs at rest took %s on moto\n", n, time.Since(start).Round(time.Millisecond))
		var reqs int64
		for k, v := range diff(b.stack.Emulator.Counts(), before) {
			// The sweep's own calls; the event source mapping's idle polls
			// run beside it and are not its cost.
			if strings.HasPrefix(k, "dynamodb.") || k == "sqs.SendMessageBatch" {
				reqs += v
			}
		}
		out = append(out, sweepPoint{AtRest: n, Requests: reqs, Units: b.meter.Units().RRU - units.RRU})
	}
	return out, nil
}

// writeAtRest stores jobs from..to-1 (at most 25) in one BatchWriteItem:
// each a finished job's item as the store writes it, outside the due
// index (its key, state, version, queue, document, document version,
// write token and ttl). moto takes about 1,700 such items a second here,
// one call at a time or several at once alike.
func writeAtRest(ctx context.Context, db *dynamodb.Client, table string, from, to int, doc []byte, ttl string) error {
	reqs := make([]ddb.WriteRequest, 0, to-from)
	for i := from; i < to; i++ {
		id := fmt.Sprintf("rest-%08d", i)
		pk, sk := store.ItemKey(restTenant, id)
		reqs = append(reqs, ddb.WriteRequest{PutRequest: &ddb.PutRequest{Item: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk},
			"state": &ddb.AttributeValueMemberS{Value: "COMPLETED"}, "version": &ddb.AttributeValueMemberN{Value: "3"},
			"queue": &ddb.AttributeValueMemberS{Value: "default"}, "doc": &ddb.AttributeValueMemberB{Value: doc},
			"dv": &ddb.AttributeValueMemberN{Value: "2"}, "w": &ddb.AttributeValueMemberS{Value: rand.Text()[:16]},
			"ttl": &ddb.AttributeValueMemberN{Value: ttl},
		}}})
	}
	for len(reqs) > 0 {
		res, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddb.WriteRequest{table: reqs}})
		if err != nil {
			return err
		}
		reqs = res.UnprocessedItems[table] // none from moto; DynamoDB may leave some
	}
	return nil
}

// sweepInMemory measures one heartbeat sweep at each backlog size on the
// engine over the in-memory store: the engine.Store calls it makes and
// the due entries it reads. moto answers an index query by reading every
// item of the table, so a million jobs at rest there cost minutes a sweep
// (and every sweep after it); the engine reads the jobs only through
// Store.Due, which on DynamoDB is one query of the sparse due index per
// shard, so the calls counted here are the sweep's requests whatever the
// store holds.
func sweepInMemory(ctx context.Context, sizes []int) ([]sweepPoint, error) {
	ms := memory.NewStore()
	cs := &countingStore{Store: ms}
	q := memory.NewQueue(time.Now)
	eng := engine.New(engine.Config{
		Store: cs, Resources: ms, WorkerQueueUses: ms, Queue: q, Runner: &actions.Runner{},
		Schedules: memory.NewSchedules(ms), Blobs: memory.NewBlobs(time.Now),
		BuiltinLease: memory.DefaultReadyVisibility, Now: time.Now,
		Log: slog.New(slog.DiscardHandler),
	})
	done, err := finishedJob(ctx, eng, ms, q)
	if err != nil {
		return nil, fmt.Errorf("a finished job to store at rest: %w", err)
	}
	heartbeat := handlers.Heartbeat(eng)
	now := time.Now()
	stored := 0
	var out []sweepPoint
	for _, n := range sizes {
		if n > stored {
			start := time.Now()
			if err := createAtRest(ctx, ms, done, stored, n, now); err != nil {
				return nil, err
			}
			fmt.Fprintf(os.Stderr, "bench: stored %d jobs at rest in memory (%d in all) in %s\n", n-stored, n, time.Since(start).Round(time.Second))
			stored = n
		}
		cs.reset()
		rep, err := heartbeat(ctx, events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: time.Now()})
		if err != nil {
			return nil, err
		}
		calls := cs.taken()
		var total int64
		for _, v := range calls {
			total += v
		}
		out = append(out, sweepPoint{AtRest: n, InMemory: true, Requests: total, Calls: calls, DueRead: rep.Due})
	}
	return out, nil
}

// createAtRest stores copies of done as jobs from..to-1, encoding them on
// every core (Create encodes outside the store's lock).
func createAtRest(ctx context.Context, ms *memory.Store, done *domain.Job, from, to int, now time.Time) error {
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := from + w; i < to && errs[w] == nil; i += workers {
				j := *done // Create stores its own encoding: the copies share nothing stored
				j.ID = fmt.Sprintf("rest-%08d", i)
				if _, _, err := ms.Create(ctx, &j, "", now); err != nil {
					errs[w] = fmt.Errorf("store jobs at rest: %w", err)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// finishedJob runs one single-step pass job to its end on eng and answers
// it as stored: what a job at rest is.
func finishedJob(ctx context.Context, eng *engine.Engine, ms *memory.Store, q *memory.Queue) (*domain.Job, error) {
	j, _, err := eng.Submit(ctx, restTenant, []byte(`{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"n":1}}`), "")
	if err != nil {
		return nil, err
	}
	for _, d := range q.TakeReady(10) {
		if _, err := eng.Execute(ctx, d); err != nil {
			return nil, err
		}
	}
	j, err = ms.Get(ctx, restTenant, j.ID)
	if err != nil {
		return nil, err
	}
	if j.State != domain.JobCompleted || j.DueAt != nil {
		return nil, fmt.Errorf("job %s ended %s, due %v: not at rest", j.ID, j.State, j.DueAt)
	}
	return j, nil
}

// countingStore counts the engine's calls to its store, by method.
type countingStore struct {
	engine.Store
	mu    sync.Mutex
	calls map[string]int64
}

func (c *countingStore) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int64{}
	}
	c.calls[method]++
}

func (c *countingStore) reset() {
	c.mu.Lock()
	c.calls = nil
	c.mu.Unlock()
}

// taken answers the calls counted since the last reset.
func (c *countingStore) taken() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

func (c *countingStore) Create(ctx context.Context, j *domain.Job, requestHash string, now time.Time) (*domain.Job, bool, error) {
	c.count("Create")
	return c.Store.Create(ctx, j, requestHash, now)
}

func (c *countingStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	c.count("Get")
	return c.Store.Get(ctx, tenant, id)
}

func (c *countingStore) Save(ctx context.Context, j *domain.Job, loadedEvents int) error {
	c.count("Save")
	return c.Store.Save(ctx, j, loadedEvents)
}

func (c *countingStore) List(ctx context.Context, tenant string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	c.count("List")
	return c.Store.List(ctx, tenant, f)
}

func (c *countingStore) Due(ctx context.Context, now time.Time, limit int) ([]engine.DueJob, error) {
	c.count("Due")
	return c.Store.Due(ctx, now, limit)
}

func (c *countingStore) Quarantine(ctx context.Context, tenant, id, reason string, now time.Time) error {
	c.count("Quarantine")
	return c.Store.Quarantine(ctx, tenant, id, reason, now)
}

func (c *countingStore) Defer(ctx context.Context, k engine.DueJob, until time.Time) error {
	c.count("Defer")
	return c.Store.Defer(ctx, k, until)
}

func (c *countingStore) TenantForKey(ctx context.Context, key string) (string, error) {
	c.count("TenantForKey")
	return c.Store.TenantForKey(ctx, key)
}

func (c *countingStore) RecordStats(ctx context.Context, tenant string, d engine.StatsDelta, now time.Time) error {
	c.count("RecordStats")
	return c.Store.RecordStats(ctx, tenant, d, now)
}

func (c *countingStore) Stats(ctx context.Context, tenant string, now time.Time) (engine.Stats, error) {
	c.count("Stats")
	return c.Store.Stats(ctx, tenant, now)
}

func (c *countingStore) StepStats(ctx context.Context, tenant string) (engine.StepCounts, error) {
	c.count("StepStats")
	return c.Store.StepStats(ctx, tenant)
}

func (c *countingStore) RecordSweep(ctx context.Context, at time.Time) error {
	c.count("RecordSweep")
	return c.Store.RecordSweep(ctx, at)
}

func (c *countingStore) JobVersion(ctx context.Context, tenant, id string) (int64, error) {
	c.count("JobVersion")
	return c.Store.JobVersion(ctx, tenant, id)
}

func (c *countingStore) TakePollSlot(ctx context.Context, tenant, lease string, bound int, until, now time.Time) (time.Time, bool, error) {
	c.count("TakePollSlot")
	return c.Store.TakePollSlot(ctx, tenant, lease, bound, until, now)
}

func (c *countingStore) ReleasePollSlot(ctx context.Context, tenant, lease string) error {
	c.count("ReleasePollSlot")
	return c.Store.ReleasePollSlot(ctx, tenant, lease)
}

// sweepEvery runs the heartbeat's handler every period, its requests
// tagged sweepTag, until the answer is called, which waits for the sweep
// under way and answers how many ran (calling it again answers the same).
func (b *bench) sweepEvery(ctx context.Context, period time.Duration) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	ran := 0
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := b.sweepOnce(ctx, sweepTag); err != nil && ctx.Err() == nil {
					b.log.Warn("bench sweep failed", "err", err)
				}
				ran++
			}
		}
	}()
	var once sync.Once
	return func() int {
		once.Do(func() {
			cancel()
			<-done
		})
		return ran
	}
}

// sweepOnce runs the heartbeat's handler once, its requests tagged tag,
// and answers what they cost.
func (b *bench) sweepOnce(ctx context.Context, tag string) (costmeter.Tagged, error) {
	before := b.meter.Tagged(tag)
	ev := events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: time.Now()}
	err := b.stack.Handlers.Schedule["HeartbeatFunction"](costmeter.Tag(ctx, tag), ev)
	return beyond(b.meter.Tagged(tag), before, costmeter.Tagged{}, 0), err
}

// beyond answers what the tagged requests cost from before to after, less
// n times base (none below zero).
func beyond(after, before, base costmeter.Tagged, n int) costmeter.Tagged {
	out := costmeter.Tagged{Requests: map[string]int64{}}
	out.Units.WRU = max(after.Units.WRU-before.Units.WRU-float64(n)*base.Units.WRU, 0)
	out.Units.RRU = max(after.Units.RRU-before.Units.RRU-float64(n)*base.Units.RRU, 0)
	for k, v := range after.Requests {
		if d := v - before.Requests[k] - int64(n)*base.Requests[k]; d > 0 {
			out.Requests[k] = d
		}
	}
	return out
}
