package costmeter_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/shared/domain"
)

func costsTable(t *testing.T) costmeter.Prices {
	t.Helper()
	p, err := costmeter.LoadPrices(filepath.Join("..", "..", "docs", "costs.md"))
	require.NoError(t, err)
	return p
}

// TestFloorIsThePhysicalFloor: the floor, from the list prices of
// docs/costs.md: two 1 KB writes, a send, a tenth of a receive, a delete
// and an invocation, the submit's invocation ($1.95), one API Gateway
// request ($2.95); ten submits to a request, $1.51.
func TestFloorIsThePhysicalFloor(t *testing.T) {
	t.Parallel()
	p := costsTable(t)
	one := p.Bill(costmeter.Floor(1, 1))
	require.InDelta(t, 1.25, one.DynamoDB, 1e-9)
	require.InDelta(t, 0.48, one.SQS, 1e-9, "a send, a tenth of a receive and of a delete")
	require.InDelta(t, 0.22, one.LambdaRequests, 1e-9, "the submit, a tenth of an execute")
	require.InDelta(t, 1.95, one.Total()-one.APIGateway, 1e-9)
	require.InDelta(t, 2.95, one.Total(), 1e-9)
	require.Zero(t, one.LambdaDuration+one.Logs+one.Storage+one.Expiry)

	ten := p.Bill(costmeter.Floor(1, 10))
	require.InDelta(t, 1.51, ten.Total(), 1e-9)
	require.InDelta(t, 0.10, ten.APIGateway, 1e-9)

	// Each further step: a write, a batched send, a share of a receive,
	// a delete and an invocation.
	five := costmeter.Floor(5, 1)
	require.InDelta(t, 6, five.Units.WRU, 1e-9)
	require.InDelta(t, 1+0.4+1.0, five.SQSRequests, 1e-9)
	require.InDelta(t, 1.5, five.LambdaRequests, 1e-9)
	require.InDelta(t, 1, five.APIRequests, 1e-9)
}

// TestBillPricesEachLine: each count at its price, per million jobs; the
// total leaves Lambda duration and logs beside it.
func TestBillPricesEachLine(t *testing.T) {
	t.Parallel()
	p := costsTable(t)
	u := costmeter.Usage{
		Jobs:            100,
		Units:           costmeter.Units{WRU: 400, RRU: 200, S3Writes: 10, S3Reads: 20, S3Deletes: 10, Events: 300},
		SQSRequests:     150,
		LambdaRequests:  120,
		LambdaGBSeconds: 3,
		APIRequests:     100,
		TimerExecutions: 2,
		LogBytes:        costmeter.GB / 1000.0, LogEvents: 0,
		StoredItemBytes: 100 * 2048, StoredObjectBytes: 100 * 96 * 1024, RetentionDays: 30,
		Expiry: costmeter.Units{WRU: 2, RRU: 1, S3Writes: 1, S3Deletes: 1},
	}
	b := p.Bill(u)
	const perJob = 1e4 // a million over 100 jobs
	require.InDelta(t, (400*0.625e-6+200*0.125e-6)*perJob, b.DynamoDB, 1e-9)
	require.InDelta(t, 150*0.4e-6*perJob, b.SQS, 1e-9)
	require.InDelta(t, 120*0.2e-6*perJob, b.LambdaRequests, 1e-9)
	require.InDelta(t, 100*1e-6*perJob, b.APIGateway, 1e-9)
	require.InDelta(t, 2*(3*25e-6+0.4e-6)*perJob, b.Timers, 1e-9)
	require.InDelta(t, (10*5e-6+20*0.4e-6)*perJob, b.S3Requests, 1e-9, "deletes are free")
	require.InDelta(t, 300*1e-6*perJob, b.Events, 1e-9)
	months := 30.0 * 24 / 730
	require.InDelta(t, (100*2048.0*(0.25+0.20)+100*96*1024.0*0.023)/costmeter.GB*months*perJob, b.Storage, 1e-9, "the table's bytes with their point-in-time recovery")
	require.InDelta(t, (2*0.625e-6+1*0.125e-6+5e-6)*perJob, b.Expiry, 1e-9)
	require.InDelta(t, 3*0.0000133334*perJob, b.LambdaDuration, 1e-9)
	require.InDelta(t, 0.5/1000*perJob, b.Logs, 1e-9)
	require.InDelta(t, b.DynamoDB+b.SQS+b.LambdaRequests+b.APIGateway+b.Timers+b.S3Requests+b.Events+b.Storage+b.Expiry, b.Total(), 1e-9)

	// A log event is ingested with 26 bytes of metadata.
	lines := p.Bill(costmeter.Usage{Jobs: 1, LogBytes: 74, LogEvents: 1})
	require.InDelta(t, 100.0/costmeter.GB*0.5*1e6, lines.Logs, 1e-12)
	require.Zero(t, p.Bill(costmeter.Usage{}).Total(), "no jobs, no bill")
}

// TestLambdaBillsRoundedMilliseconds: a request per invocation, its
// duration rounded up to the millisecond at the function's memory; a
// failed invocation is billed too.
func TestLambdaBillsRoundedMilliseconds(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 0.002*128.0/1024, costmeter.BilledGBSeconds(1200*time.Microsecond, 128), 1e-12)
	require.InDelta(t, 1.0, costmeter.BilledGBSeconds(time.Second, 1024), 1e-12)

	l := costmeter.NewLambda(map[string]int{"ClaimFunction": 256})
	l.Record("ClaimFunction", 20*time.Second) // a long-poll that found nothing
	l.Record("EnqueueFunction", 3*time.Millisecond)
	boom := errors.New("boom")
	h := costmeter.Timed(l, "EnqueueFunction", func(_ context.Context, n int) (int, error) {
		time.Sleep(2 * time.Millisecond)
		return n, boom
	})
	_, err := h(context.Background(), 1)
	require.ErrorIs(t, err, boom)
	use := l.Use()
	require.Equal(t, costmeter.LambdaUse{Requests: 1, GBSeconds: 20 * 0.25}, use["ClaimFunction"])
	require.EqualValues(t, 2, use["EnqueueFunction"].Requests)
	require.GreaterOrEqual(t, use["EnqueueFunction"].GBSeconds, 0.005*0.125, "at the default 128 MB")
}

// TestAPIGatewayMetersEachRequest: every request is one, each 512 KB of
// body one more.
func TestAPIGatewayMetersEachRequest(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, 1, costmeter.APIRequests(0))
	require.EqualValues(t, 1, costmeter.APIRequests(512*1024))
	require.EqualValues(t, 2, costmeter.APIRequests(512*1024+1))

	var a costmeter.APIGateway
	srv := httptest.NewServer(a.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })))
	defer srv.Close()
	for _, body := range []string{"", `{"steps":[]}`, strings.Repeat("x", 600*1024)} {
		res, err := http.Post(srv.URL+"/v1/jobs", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		res.Body.Close()
	}
	require.EqualValues(t, 4, a.Requests(), "a refused request is billed too")
}

// TestLogsMeterBytesAndEvents: each line one log event.
func TestLogsMeterBytesAndEvents(t *testing.T) {
	t.Parallel()
	var w costmeter.Logs
	log := slog.New(slog.NewJSONHandler(&w, nil))
	log.Info("one")
	log.Debug("dropped")
	log.Warn("two", "job", "01J")
	_, _ = w.Write([]byte("{\"_aws\":{}}\n{\"_aws\":{}}\n"))
	use := w.Use()
	require.EqualValues(t, 4, use.Events)
	require.Greater(t, use.Bytes, int64(2*len("{\"_aws\":{}}\n")))
}

// TestStoredBytesCountOverheadAndIndex: the item's size and 100 bytes,
// and its due-index entry (the keys) with 100 more.
func TestStoredBytesCountOverheadAndIndex(t *testing.T) {
	t.Parallel()
	s := func(v string) ddb.AttributeValue { return &ddb.AttributeValueMemberS{Value: v} }
	it := map[string]ddb.AttributeValue{"pk": s("J#t#1"), "sk": s("01J"), "state": s("COMPLETED")}
	require.Equal(t, 2+5+2+3+5+9+100, costmeter.StoredBytes(it))
	it["gsi2pk"], it["gsi2sk"] = s("D#3"), s("2026")
	item := 2 + 5 + 2 + 3 + 5 + 9 + 6 + 3 + 6 + 4
	require.Equal(t, item+100+(2+5+2+3+6+3+6+4)+100, costmeter.StoredBytes(it))
}

// TestLongTimersArePricedAsTimers: what the sweeps paid to send long
// timers within reach (a read, a write that moves the due entry, a send)
// is the timers line, and in no other.
func TestLongTimersArePricedAsTimers(t *testing.T) {
	t.Parallel()
	p := costsTable(t)
	b := p.Bill(costmeter.Usage{Jobs: 100, Arms: costmeter.Units{WRU: 300, RRU: 100}, ArmSQSRequests: 100})
	require.InDelta(t, (300*0.625e-6+100*0.125e-6+100*0.4e-6)*1e4, b.Timers, 1e-9)
	require.InDelta(t, 2.40, b.Timers, 1e-9, "3 WRU, 1 RRU and a send each")
	require.Zero(t, b.DynamoDB+b.SQS)
	require.InDelta(t, b.Timers, b.Total(), 1e-9)
}

// TestJobPricesAreTheTable: the prices a job's cost is priced at
// (domain.Prices, compiled in: the functions read no file) are
// docs/costs.md's.
func TestJobPricesAreTheTable(t *testing.T) {
	t.Parallel()
	p := costsTable(t)
	d := domain.Prices
	for key, got := range map[string]float64{
		"dynamodb_wru": d.WriteUnit, "dynamodb_rru": d.ReadUnit, "sqs_request": d.SQSRequest, "lambda_request": d.LambdaRequest,
		"lambda_gb_second_arm": d.LambdaGBSecond, "apigw_http_request": d.APIRequest, "s3_put_request": d.S3Write,
		"s3_get_request": d.S3Read, "eventbridge_event": d.Event, "sfn_standard_transition": d.SFNTransition,
		"dynamodb_storage_gb_month": d.TableGBMonth, "dynamodb_pitr_gb_month": d.BackupGBMonth, "s3_storage_gb_month": d.S3GBMonth,
	} {
		require.InEpsilon(t, p[key], got, 1e-12, key)
	}
}
