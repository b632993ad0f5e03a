package store

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// Golden job items: testdata/jobs/v<N>/<name>.item.json is a job's item
// as this store wrote it at document version N (DynamoDB JSON, the doc
// attribute compressed, as in the table), and <name>.job.json the job it
// must read as. A version's items are written once, by the build that
// introduced it, and never again: they are what is stored.
var updateGolden = flag.Bool("update-golden", false, "write the golden items of this build's document version (never an older version's)")

const goldenRoot = "testdata/jobs"

var goldenT0 = time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)

// goldenJobs build a representative set of jobs through the domain, at
// fixed times, ids and nonces.
var goldenJobs = map[string]func() (*domain.Job, error){
	"single-step":      goldenSingleStep,
	"dag-retry-failed": goldenDAGRetryFailed,
	"worker-lease":     goldenWorkerLease,
	"gate-wait-sleep":  goldenGateWaitSleep,
	"replanned":        goldenReplanned,
	"resources":        goldenResources,
	"blob-refs":        goldenBlobRefs,
	"cancelled":        goldenCancelled,
}

func goldenSpec(body string) (*domain.JobSpec, error) { return domain.ParseJobSpec([]byte(body)) }

func goldenAt(min int) time.Time { return goldenT0.Add(time.Duration(min) * time.Minute) }

func goldenSingleStep() (*domain.Job, error) {
	spec, err := goldenSpec(`{"payload": {"order": 42}, "priority": "P0", "steps": [{"id": "only", "action": {"type": "pass"}}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0SINGLE0000000000", spec, "idem-single", goldenAt(0))
	if err != nil {
		return nil, err
	}
	l, err := j.Lease("only", domain.LeaseRequest{Nonce: "n1", Duration: 10 * time.Minute, Token: "tok-1"}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	_, err = j.Complete("only", l.ID, json.RawMessage(`{"order": 42, "ok": true}`), goldenAt(2))
	return j, err
}

func goldenDAGRetryFailed() (*domain.Job, error) {
	spec, err := goldenSpec(`{"queue": "batch", "steps": [
		{"id": "a", "action": {"type": "pass"}},
		{"id": "b", "action": {"type": "http", "url": "https://example.com/b"}, "depends_on": ["a"], "timeout_seconds": 30,
		 "retry": {"max_attempts": 2, "backoff": "linear", "initial_delay_ms": 1000, "max_delay_ms": 5000, "jitter": true,
		           "classes": {"network": {"max_attempts": 3, "backoff": "fixed", "initial_delay_ms": 2000}}}},
		{"id": "c", "action": {"type": "pass"}, "depends_on": ["a"]},
		{"id": "d", "action": {"type": "pass"}, "depends_on": ["b", "c"]}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0DAG0000000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	l, err := j.Lease("a", domain.LeaseRequest{Nonce: "na", Duration: 10 * time.Minute}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	if _, err := j.Complete("a", l.ID, json.RawMessage(`"a done"`), goldenAt(2)); err != nil {
		return nil, err
	}
	l, err = j.Lease("c", domain.LeaseRequest{Nonce: "nc", Duration: 10 * time.Minute}, goldenAt(3))
	if err != nil {
		return nil, err
	}
	if _, err := j.Complete("c", l.ID, json.RawMessage(`{"c": 1}`), goldenAt(4)); err != nil {
		return nil, err
	}
	for i, f := range []domain.Failure{
		{Class: domain.ClassNetwork, Message: "connection reset"},
		{Class: domain.ClassRetryable, Message: "503 from upstream", RetryAfter: 10 * time.Second},
		{Class: domain.ClassRetryable, Message: "503 again"},
	} {
		at := goldenAt(10 * (i + 1))
		l, err := j.Lease("b", domain.LeaseRequest{Nonce: fmt.Sprintf("nb%d", i), Duration: 10 * time.Minute}, at)
		if err != nil {
			return nil, err
		}
		if _, err := j.Fail("b", l.ID, f, at.Add(time.Second), rng); err != nil {
			return nil, err
		}
	}
	return j, nil
}

func goldenWorkerLease() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [{"id": "render", "action": {"type": "worker", "queue": "gpu", "lease_seconds": 120}, "timeout_seconds": 600}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-b", "01JGOLDEN0WORKER0000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	l, err := j.Lease("render", domain.LeaseRequest{Worker: "worker-7", ViaWorker: true, Nonce: "nw", Duration: 2 * time.Minute, Token: "gpu|receipt-1"}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	_, err = j.Heartbeat("render", l.ID, 2*time.Minute, goldenAt(2))
	return j, err
}

func goldenGateWaitSleep() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [
		{"id": "gate", "action": {"type": "approval", "timeout_seconds": 86400}},
		{"id": "wait", "action": {"type": "wait", "signal": "go", "timeout_seconds": 3600}},
		{"id": "ask", "action": {"type": "fail", "class": "needs_user", "message": "which locale?", "prompt": "Pick a locale"}},
		{"id": "nap", "action": {"type": "sleep", "seconds": 7200}},
		{"id": "hold", "action": {"type": "wait", "signal": "later"}}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0GATE000000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	// The signal comes before its wait is reached: it is kept, then taken.
	if _, _, err := j.Signal(domain.SignalRequest{Name: "go", Payload: json.RawMessage(`{"go": true}`), ID: "sig-1", Request: "req-1"}, goldenAt(1)); err != nil {
		return nil, err
	}
	if _, _, err := j.Approve("gate", domain.Decision{By: "alice", Comment: "looks right", Key: "key-1"}, goldenAt(2)); err != nil {
		return nil, err
	}
	l, err := j.Lease("ask", domain.LeaseRequest{Nonce: "nq", Duration: 10 * time.Minute}, goldenAt(3))
	if err != nil {
		return nil, err
	}
	if _, err := j.Fail("ask", l.ID, domain.Failure{Class: domain.ClassNeedsUser, Message: "which locale?", Prompt: "Pick a locale"}, goldenAt(4), rand.New(rand.NewPCG(3, 4))); err != nil {
		return nil, err
	}
	if _, err := j.Resume("ask", json.RawMessage(`{"locale": "fr"}`), goldenAt(5)); err != nil {
		return nil, err
	}
	l, err = j.Lease("ask", domain.LeaseRequest{Nonce: "nq2", Duration: 10 * time.Minute}, goldenAt(6))
	if err != nil {
		return nil, err
	}
	if _, err := j.Complete("ask", l.ID, json.RawMessage(`"fr"`), goldenAt(7)); err != nil {
		return nil, err
	}
	return j, nil
}

func goldenReplanned() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [
		{"id": "plan", "action": {"type": "fail", "class": "replan", "message": "split in two",
		  "steps": [{"id": "p1", "action": {"type": "pass"}}, {"id": "p2", "action": {"type": "pass"}, "depends_on": ["p1"]}]}},
		{"id": "after", "action": {"type": "pass"}}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0REPLAN0000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	l, err := j.Lease("plan", domain.LeaseRequest{Nonce: "np", Duration: 10 * time.Minute}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	a := spec.Steps[0].Action
	if _, err := j.Fail("plan", l.ID, domain.Failure{Class: domain.ClassReplan, Message: a.Message, Steps: a.Steps}, goldenAt(2), rand.New(rand.NewPCG(5, 6))); err != nil {
		return nil, err
	}
	l, err = j.Lease("p1", domain.LeaseRequest{Nonce: "np1", Duration: 10 * time.Minute}, goldenAt(3))
	if err != nil {
		return nil, err
	}
	_, err = j.Complete("p1", l.ID, json.RawMessage(`1`), goldenAt(4))
	return j, err
}

func goldenResources() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [
		{"id": "build", "action": {"type": "worker", "queue": "ci"}, "requires": {"capabilities": ["docker"], "labels": {"arch": "arm64"}}, "resource_wait_seconds": 600},
		{"id": "flash", "action": {"type": "worker", "queue": "lab"}, "requires": {"capabilities": ["board"]}, "retry": {"max_attempts": 3}, "depends_on": ["build"]}]}`)
	if err != nil {
		return nil, err
	}
	spec.ResourceWait = 30 * time.Minute
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0RESOURCE00000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	// build fails on one board with class resource, switches, runs on another.
	l, err := j.Lease("build", domain.LeaseRequest{Worker: "ci-1", ViaWorker: true, Nonce: "nr1", Duration: 10 * time.Minute, Resource: "runner-1"}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	if _, err := j.Fail("build", l.ID, domain.Failure{Class: domain.ClassResource, Message: "runner-1 out of disk"}, goldenAt(2), rand.New(rand.NewPCG(7, 8))); err != nil {
		return nil, err
	}
	l, err = j.Lease("build", domain.LeaseRequest{Worker: "ci-2", ViaWorker: true, Nonce: "nr2", Duration: 10 * time.Minute, Resource: "runner-2"}, goldenAt(3))
	if err != nil {
		return nil, err
	}
	if _, err := j.Complete("build", l.ID, json.RawMessage(`{"image": "sha256:abc"}`), goldenAt(4)); err != nil {
		return nil, err
	}
	err = j.WaitForResource("flash", &domain.ResourceWait{Since: goldenAt(5), On: []string{"board-1", "board-2"}}, goldenAt(5))
	return j, err
}

func goldenBlobRefs() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [{"id": "fetch", "action": {"type": "pass"}}, {"id": "nap", "action": {"type": "sleep", "seconds": 0}}]}`)
	if err != nil {
		return nil, err
	}
	payload := domain.NewDataRef(domain.PayloadKey("tenant-a", "01JGOLDEN0BLOB000000000000"), []byte(`{"big": "payload"}`))
	spec.PayloadRef = &payload
	spec.ScheduleID = "nightly"
	spec.Retention = domain.Retention{CompletedDays: 3}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0BLOB000000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	l, err := j.Lease("fetch", domain.LeaseRequest{Nonce: "nf", Duration: 10 * time.Minute}, goldenAt(1))
	if err != nil {
		return nil, err
	}
	out := domain.NewDataRef(domain.OutputKey("tenant-a", j.ID, "fetch", 1), []byte(`{"big": "output"}`))
	if _, err := j.CompleteRef("fetch", l.ID, out, goldenAt(2)); err != nil {
		return nil, err
	}
	if j.State != domain.JobCompleted {
		return nil, fmt.Errorf("blob-refs job is %s, not COMPLETED", j.State)
	}
	if j.DataDue(j.ExpiresAt.Add(time.Second)) {
		j.DataDeleted(j.ExpiresAt.Add(time.Second))
	}
	return j, nil
}

func goldenCancelled() (*domain.Job, error) {
	spec, err := goldenSpec(`{"steps": [{"id": "a", "action": {"type": "worker", "queue": "q"}}, {"id": "b", "action": {"type": "pass"}}]}`)
	if err != nil {
		return nil, err
	}
	j, err := domain.NewJob("tenant-a", "01JGOLDEN0CANCEL0000000000", spec, "", goldenAt(0))
	if err != nil {
		return nil, err
	}
	if _, err := j.Lease("a", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "nx", Duration: time.Hour}, goldenAt(1)); err != nil {
		return nil, err
	}
	_, err = j.Cancel(goldenAt(2))
	return j, err
}

// goldenDir is where the golden items of document version v lie.
func goldenDir(v int) string { return filepath.Join(goldenRoot, fmt.Sprintf("v%d", v)) }

// TestWriteGoldenItems writes this build's golden items (-update-golden).
func TestWriteGoldenItems(t *testing.T) {
	if !*updateGolden {
		t.Skip("run with -update-golden to write the golden items of this build's document version")
	}
	dir := goldenDir(documentVersion)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, build := range goldenJobs {
		j, err := build()
		require.NoError(t, err, name)
		j.Version = 3
		it, err := item(j)
		require.NoError(t, err, name)
		withWriteToken(it)
		raw, err := itemJSON(it)
		require.NoError(t, err, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".item.json"), raw, 0o644))
		want, err := json.MarshalIndent(j, "", "  ")
		require.NoError(t, err, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".job.json"), append(want, '\n'), 0o644))
	}
}

// itemJSON renders an item as DynamoDB JSON, one attribute a line.
func itemJSON(it map[string]ddb.AttributeValue) ([]byte, error) {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range it {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	b.WriteString("{\n")
	for i, k := range names {
		var v any
		switch x := it[k].(type) {
		case *ddb.AttributeValueMemberS:
			v = map[string]string{"S": x.Value}
		case *ddb.AttributeValueMemberN:
			v = map[string]string{"N": x.Value}
		case *ddb.AttributeValueMemberB:
			v = map[string]string{"B": base64.StdEncoding.EncodeToString(x.Value)}
		default:
			return nil, fmt.Errorf("attribute %s: %T is not written by the job store", k, x)
		}
		kv, _ := json.Marshal(k)
		vv, _ := json.Marshal(v)
		fmt.Fprintf(&b, "  %s: %s", kv, vv)
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return []byte(b.String()), nil
}

// parseItemJSON reads DynamoDB JSON of S, N and B attributes.
func parseItemJSON(raw []byte) (map[string]ddb.AttributeValue, error) {
	var attrs map[string]map[string]string
	if err := json.Unmarshal(raw, &attrs); err != nil {
		return nil, err
	}
	it := map[string]ddb.AttributeValue{}
	for k, v := range attrs {
		switch {
		case len(v) != 1:
			return nil, fmt.Errorf("attribute %s: want one type, got %v", k, v)
		case v["S"] != "":
			it[k] = &ddb.AttributeValueMemberS{Value: v["S"]}
		case v["N"] != "":
			it[k] = &ddb.AttributeValueMemberN{Value: v["N"]}
		case v["B"] != "":
			b, err := base64.StdEncoding.DecodeString(v["B"])
			if err != nil {
				return nil, fmt.Errorf("attribute %s: %w", k, err)
			}
			it[k] = &ddb.AttributeValueMemberB{Value: b}
		default:
			return nil, fmt.Errorf("attribute %s: unknown type %v", k, v)
		}
	}
	return it, nil
}
