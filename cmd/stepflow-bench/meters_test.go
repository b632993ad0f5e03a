package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/shared/domain"
)

// TestTemplateSettings: every function at the template's 128 MB, and the
// functions' default log level.
func TestTemplateSettings(t *testing.T) {
	s, err := readTemplate(filepath.Join("..", "..", "template.yaml"))
	require.NoError(t, err)
	require.Equal(t, "INFO", s.LogLevel)
	for _, fn := range []string{"EnqueueFunction", "ClaimFunction", "ExecuteFunction", "HeartbeatFunction"} {
		require.Equal(t, 128, s.MemoryMB[fn], fn)
	}
}

// TestPollerMode: while AWS-like, a receive asks for one message; else
// for what the runner asked.
func TestPollerMode(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(raw))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	var mode pollerMode
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
		APIOptions: []func(*middleware.Stack) error{mode.middleware}})
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(srv.URL + "/q"), MaxNumberOfMessages: 10}
	_, err := c.ReceiveMessage(context.Background(), in)
	require.NoError(t, err)
	mode.awsLike.Store(true)
	_, err = c.ReceiveMessage(context.Background(), in)
	require.NoError(t, err)
	require.EqualValues(t, 10, in.MaxNumberOfMessages, "the caller's input is left alone")
	require.Len(t, bodies, 2)
	var asked []int
	for _, b := range bodies {
		var r struct{ MaxNumberOfMessages int }
		require.NoError(t, json.Unmarshal([]byte(b), &r), b)
		asked = append(asked, r.MaxNumberOfMessages)
	}
	require.Equal(t, []int{10, 1}, asked)
}

// TestOwnCheck: a workload whose jobs say what the meter counted passes;
// one whose jobs say a fifth less is named, by how much.
func TestOwnCheck(t *testing.T) {
	p, err := costmeter.LoadPrices(filepath.Join("..", "..", "docs", "costs.md"))
	require.NoError(t, err)
	metered := result{Name: "w", Jobs: 10, Units: costmeter.Units{WRU: 40}, Requests: map[string]int64{"sqs.SendMessageBatch": 10}}
	agrees := metered
	agrees.Own = domain.Usage{WriteUnits: 39, SQSRequests: 10}
	require.Empty(t, offMeter([]result{agrees}, p))
	require.NoError(t, ownCheck([]result{agrees}, p))
	off := metered
	off.Own = domain.Usage{WriteUnits: 28, SQSRequests: 8}
	require.Len(t, offMeter([]result{off}, p), 1)
	require.ErrorContains(t, ownCheck([]result{off}, p), "w: jobs say $")
}
