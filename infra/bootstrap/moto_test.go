package bootstrap

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/toolchain"
)

// startMoto runs a private moto_server for one test and returns its endpoint.
// The test fails when moto_server is not installed: CI always has it. Its
// Step Functions backend is the one that runs state machines, as the
// emulator package's moto's is: it is also the one that checks a
// definition on CreateStateMachine (the other stores any string).
func startMoto(t *testing.T) string {
	t.Helper()
	tc := toolchain.New()
	bin, ok := tc.Find(toolchain.MotoServer)
	require.True(t, ok, "%v; CI always has it", tc.NotFound(toolchain.MotoServer))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill the shim and python together
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})

	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(endpoint + "/moto-api/")
		if err == nil {
			_ = resp.Body.Close()
			resp, err := client.Post(endpoint+"/moto-api/config", "application/json",
				strings.NewReader(`{"stepfunctions": {"execute_state_machine": true}}`))
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode, "moto-api/config")
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server on %s did not answer: %v", endpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clients returns DynamoDB, SQS, Step Functions, S3 and EventBridge
// clients pointed at endpoint.
func clients(endpoint string) (*dynamodb.Client, *sqs.Client, *sfn.Client, *s3.Client, *eventbridge.Client) {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	sq := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	sf := sfn.NewFromConfig(cfg, func(o *sfn.Options) { o.BaseEndpoint = aws.String(endpoint) })
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(endpoint), true })
	eb := eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) { o.BaseEndpoint = aws.String(endpoint) })
	return db, sq, sf, s3c, eb
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
