package lambdaemu

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bundle is one test's service, serving examples/functions and the probe
// of testdata under the prefix stepflow-fn-, and the SDK's Lambda client
// pointed at it.
type bundle struct {
	svc    *Service
	client *lambda.Client
	ctx    context.Context
}

func setup(t *testing.T, adjust ...func(*Options)) *bundle {
	t.Helper()
	o := Options{Dirs: []string{"../../examples/functions", "testdata"}, Prefixes: []string{"stepflow-fn-"}}
	for _, f := range adjust {
		f(&o)
	}
	svc, err := Start(context.Background(), "127.0.0.1:0", o)
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	client := lambda.New(lambda.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(svc.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return &bundle{svc: svc, client: client, ctx: context.Background()}
}

func (b *bundle) invoke(t *testing.T, in *lambda.InvokeInput) *lambda.InvokeOutput {
	t.Helper()
	out, err := b.client.Invoke(b.ctx, in)
	require.NoError(t, err)
	require.EqualValues(t, 200, out.StatusCode)
	return out
}

// probe invokes testdata/probe with event and decodes its answer.
func (b *bundle) probe(t *testing.T, event string) probeAnswer {
	t.Helper()
	out := b.invoke(t, &lambda.InvokeInput{FunctionName: aws.String("stepflow-fn-probe"), Payload: []byte(event)})
	require.Nil(t, out.FunctionError, "%s", out.Payload)
	var a probeAnswer
	require.NoError(t, json.Unmarshal(out.Payload, &a), "%s", out.Payload)
	return a
}

type probeAnswer struct {
	PID            int             `json:"pid"`
	RequestID      string          `json:"request_id"`
	FunctionARN    string          `json:"function_arn"`
	FunctionName   string          `json:"function_name"`
	DeadlineMS     int64           `json:"deadline_ms"`
	IdempotencyKey string          `json:"idempotency_key"`
	Event          json.RawMessage `json:"event"`
}

func TestEchoAnswersUnderEveryNameItHas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, []string{"echo", "flaky", "probe", "stepflow-fn-echo", "stepflow-fn-flaky", "stepflow-fn-probe"}, b.svc.Names())
	for _, in := range []*lambda.InvokeInput{
		{FunctionName: aws.String("stepflow-fn-echo")},
		{FunctionName: aws.String("echo")},
		{FunctionName: aws.String("stepflow-fn-echo"), Qualifier: aws.String("$LATEST")},
		{FunctionName: aws.String("stepflow-fn-echo:$LATEST")},
		{FunctionName: aws.String("123456789012:function:echo")},
		{FunctionName: aws.String("arn:aws:lambda:us-east-1:123456789012:function:stepflow-fn-echo")},
	} {
		in.Payload = []byte(`{"order":42,"items":["a","b"]}`)
		out := b.invoke(t, in)
		require.Nil(t, out.FunctionError, *in.FunctionName)
		require.JSONEq(t, `{"echo":{"order":42,"items":["a","b"]}}`, string(out.Payload), *in.FunctionName)
		require.Equal(t, "$LATEST", aws.ToString(out.ExecutedVersion))
	}
}

// The function learns what Lambda's Runtime API tells it: the request id,
// the ARN it was invoked by, its name, its deadline and the client context.
func TestTheFunctionRunsUnderTheRuntimeAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cc := base64.StdEncoding.EncodeToString([]byte(`{"custom":{"idempotency_key":"job/step/1"}}`))
	before := time.Now()
	out := b.invoke(t, &lambda.InvokeInput{FunctionName: aws.String("probe"), Payload: []byte(`{"n":1}`), ClientContext: aws.String(cc)})
	var a probeAnswer
	require.NoError(t, json.Unmarshal(out.Payload, &a), "%s", out.Payload)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, a.RequestID)
	require.Equal(t, "arn:aws:lambda:us-east-1:123456789012:function:probe", a.FunctionARN)
	require.Equal(t, "stepflow-fn-probe", a.FunctionName)
	require.Equal(t, "job/step/1", a.IdempotencyKey)
	require.JSONEq(t, `{"n":1}`, string(a.Event))
	require.NotEqual(t, os.Getpid(), a.PID, "a process of its own, not called in process")
	require.GreaterOrEqual(t, a.DeadlineMS, before.Add(DefaultTimeout).UnixMilli(), "the deadline is the function's timeout from the invocation")

	// Warm: the next invocation goes to the same process.
	require.Equal(t, a.PID, b.probe(t, `{}`).PID)
}

func TestFunctionErrorsAnswerUnhandled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	warm := b.probe(t, `{}`).PID
	errorOf := func(event string) (string, string) {
		out := b.invoke(t, &lambda.InvokeInput{FunctionName: aws.String("stepflow-fn-probe"), Payload: []byte(event)})
		require.Equal(t, "Unhandled", aws.ToString(out.FunctionError), "%s", out.Payload)
		var e struct{ ErrorType, ErrorMessage string }
		require.NoError(t, json.Unmarshal(out.Payload, &e), "%s", out.Payload)
		return e.ErrorType, e.ErrorMessage
	}

	typ, msg := errorOf(`{"fail":"the disk is full"}`)
	require.Equal(t, "errorString", typ)
	require.Equal(t, "the disk is full", msg)
	require.Equal(t, warm, b.probe(t, `{}`).PID, "a returned error keeps the process")

	typ, msg = errorOf(`{"panic":"nil map"}`)
	require.Equal(t, "string", typ)
	require.Equal(t, "nil map", msg)
	after := b.probe(t, `{}`).PID
	require.NotEqual(t, warm, after, "a panic ends the process; the next invocation starts another")

	typ, msg = errorOf(`{"exit":3}`)
	require.Equal(t, "Runtime.ExitError", typ)
	require.Contains(t, msg, "exit status 3")
	require.NotEqual(t, after, b.probe(t, `{}`).PID)
}

func TestRefusedInvocations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, in := range []*lambda.InvokeInput{
		{FunctionName: aws.String("nope")},
		{FunctionName: aws.String("stepflow-fn-nope")},
		{FunctionName: aws.String("stepflow-fn-echo"), Qualifier: aws.String("live")}, // no alias exists here
		{FunctionName: aws.String("stepflow-fn-echo:7")},
	} {
		_, err := b.client.Invoke(b.ctx, in)
		var nf *types.ResourceNotFoundException
		require.ErrorAs(t, err, &nf, *in.FunctionName)
		require.Contains(t, aws.ToString(nf.Message), "Function not found: arn:aws:lambda:us-east-1:123456789012:function:")
	}
	_, err := b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(`{not json`)})
	var bad *types.InvalidRequestContentException
	require.ErrorAs(t, err, &bad)
	_, err = b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: make([]byte, MaxPayloadBytes+1)})
	var big *types.RequestTooLargeException
	require.ErrorAs(t, err, &big)

	out, err := b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), InvocationType: types.InvocationTypeDryRun})
	require.NoError(t, err)
	require.EqualValues(t, 204, out.StatusCode)
}

// One process per invocation at a time, at most Concurrency of them: one
// more invocation answers 429 while they are all busy, and runs warm once
// one is free.
func TestConcurrencyTakenAnswers429(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.Concurrency = 1 })
	pid := b.probe(t, `{}`).PID
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("stepflow-fn-probe"), Payload: []byte(`{"sleep_ms":1500}`)})
		if err == nil && out.FunctionError != nil {
			err = errors.New(string(out.Payload))
		}
		assert.NoError(t, err)
	})
	f := b.svc.byName["probe"]
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.live) == 1 && len(f.idle) == 0 && f.finishing == 0
	}, 10*time.Second, 5*time.Millisecond, "the sleeping invocation holds the only process")
	_, err := b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("probe")})
	var tm *types.TooManyRequestsException
	require.ErrorAs(t, err, &tm)
	require.Equal(t, types.ThrottleReasonReservedFunctionConcurrentInvocationLimitExceeded, tm.Reason)
	wg.Wait()
	require.Equal(t, pid, b.probe(t, `{}`).PID)
}

// Past its timeout an invocation answers Sandbox.Timedout and its process
// is killed.
func TestTimeoutKillsTheProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.Timeout = 2 * time.Second })
	pid := b.probe(t, `{}`).PID
	out := b.invoke(t, &lambda.InvokeInput{FunctionName: aws.String("probe"), Payload: []byte(`{"sleep_ms":60000}`)})
	require.Equal(t, "Unhandled", aws.ToString(out.FunctionError))
	require.Contains(t, string(out.Payload), `"errorType":"Sandbox.Timedout"`)
	require.Contains(t, string(out.Payload), "Task timed out after 2.00 seconds")
	require.NotEqual(t, pid, b.probe(t, `{}`).PID)
	requireGone(t, pid)
}

func TestCloseKillsEveryProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pids := []int{b.probe(t, `{}`).PID}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = b.client.Invoke(b.ctx, &lambda.InvokeInput{FunctionName: aws.String("probe"), Payload: []byte(`{"sleep_ms":60000}`)})
	})
	f := b.svc.byName["probe"]
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, in := range f.live {
			in.mu.Lock()
			busy := in.current != nil
			if busy {
				pids = append(pids, in.cmd.Process.Pid)
			}
			in.mu.Unlock()
			if busy {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	b.svc.Close()
	wg.Wait()
	for _, pid := range pids {
		requireGone(t, pid)
	}
}

func requireGone(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.Error(t, p.Signal(syscall.Signal(0)), "process %d still runs", pid)
}

func TestAFunctionThatDoesNotBuildFailsStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(dir+"/broken", 0o755))
	require.NoError(t, os.WriteFile(dir+"/broken/main.go", []byte("package main\nfunc main() { undefined() }\n"), 0o600))
	_, err := Start(context.Background(), "127.0.0.1:0", Options{Dirs: []string{dir}})
	require.ErrorContains(t, err, "build "+dir+"/broken")
}
