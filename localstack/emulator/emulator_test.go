package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/emulator"
)

// racers is how many writers race one conditional update per round.
const racers = 8

type bundle struct {
	emu   *emulator.Emulator
	db    *dynamodb.Client
	table string
}

// setup starts an emulator of the test's own and creates a small table
// through its proxy.
func setup(t *testing.T) bundle {
	t.Helper()
	ctx := context.Background()
	emu, err := emulator.Start(ctx, "127.0.0.1:0", nil)
	require.NoError(t, err)
	t.Cleanup(emu.Close)

	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(emu.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	table := "atomicity-" + ulid.Make().String()
	_, err = db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: ddb.BillingModePayPerRequest,
		AttributeDefinitions: []ddb.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: ddb.ScalarAttributeTypeS},
		},
		KeySchema: []ddb.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: ddb.KeyTypeHash},
		},
	})
	require.NoError(t, err)
	return bundle{emu: emu, db: db, table: table}
}

func rounds(t *testing.T) int {
	t.Helper()
	s := os.Getenv("STEPFLOW_ATOMICITY_ROUNDS")
	if s == "" {
		return 200
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "STEPFLOW_ATOMICITY_ROUNDS=%q", s)
	require.Positive(t, n, "STEPFLOW_ATOMICITY_ROUNDS")
	return n
}

func key(pk string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}}
}

// TestConditionalUpdateIsAtomic races racers conditional updates on one item
// per round: DynamoDB lets exactly one win (moto alone sometimes lets two).
// The items are written and read back in batches, so nearly every request
// the test makes is a racing one.
func TestConditionalUpdateIsAtomic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	n := rounds(t)
	pk := func(round int) string { return fmt.Sprintf("item-%d", round) }

	for first := 0; first < n; first += 25 {
		var puts []ddb.WriteRequest
		for round := first; round < min(first+25, n); round++ {
			puts = append(puts, ddb.WriteRequest{PutRequest: &ddb.PutRequest{Item: map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: pk(round)},
				"v":  &ddb.AttributeValueMemberN{Value: "0"},
			}}})
		}
		out, err := b.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddb.WriteRequest{b.table: puts}})
		require.NoError(t, err)
		require.Empty(t, out.UnprocessedItems)
	}

	winners := make([]int, n)
	for round := range n {
		winners[round] = raceOnce(t, b.db, b.table, pk(round), round)
	}

	stored := map[string]string{}
	for first := 0; first < n; first += 100 {
		var keys []map[string]ddb.AttributeValue
		for round := first; round < min(first+100, n); round++ {
			keys = append(keys, key(pk(round)))
		}
		req := map[string]ddb.KeysAndAttributes{b.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for len(req) > 0 {
			out, err := b.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			require.NoError(t, err)
			for _, it := range out.Responses[b.table] {
				stored[it["pk"].(*ddb.AttributeValueMemberS).Value] = it["v"].(*ddb.AttributeValueMemberN).Value
			}
			req = out.UnprocessedKeys
		}
	}
	require.Len(t, stored, n)
	for round, w := range winners {
		require.Equal(t, strconv.Itoa(w), stored[pk(round)], "round %d: stored value is not the winner's", round)
	}
	t.Logf("%d rounds of %d racers: exactly one winner in every round", n, racers)
}

// raceOnce races racers conditional updates of item pk (v = 0 -> v = racer)
// and requires exactly one winner; it answers the winner (1..racers).
func raceOnce(t *testing.T, db *dynamodb.Client, table, pk string, round int) int {
	t.Helper()
	ctx := context.Background()
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range racers {
		wg.Go(func() {
			<-start
			_, errs[g] = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:           aws.String(table),
				Key:                 key(pk),
				UpdateExpression:    aws.String("SET v = :me"),
				ConditionExpression: aws.String("v = :zero"),
				ExpressionAttributeValues: map[string]ddb.AttributeValue{
					":me":   &ddb.AttributeValueMemberN{Value: strconv.Itoa(g + 1)},
					":zero": &ddb.AttributeValueMemberN{Value: "0"},
				},
			})
		})
	}
	close(start)
	wg.Wait()

	won, lost, winner := 0, 0, 0
	for g, err := range errs {
		var ccf *ddb.ConditionalCheckFailedException
		switch {
		case err == nil:
			won++
			winner = g + 1
		case errors.As(err, &ccf):
			lost++
		default:
			require.NoError(t, err, "round %d racer %d", round, g+1)
		}
	}
	require.Equal(t, 1, won, "round %d: winners", round)
	require.Equal(t, racers-1, lost, "round %d: conditional check failures", round)
	return winner
}

func client(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// TestFrontSerialisesARunningEmulator: a proxy put in front of an emulator
// that is already running (here a moto reached directly, not through the
// proxy Start gave it) gives the same one winner per round.
func TestFrontSerialisesARunningEmulator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	front, err := emulator.Front(ctx, "127.0.0.1:0", b.emu.MotoURL)
	require.NoError(t, err)
	require.False(t, front.Launched())
	require.Equal(t, b.emu.MotoURL, front.MotoURL)
	require.NotEqual(t, b.emu.URL, front.URL)
	db := client(front.URL)

	n := min(rounds(t), 50)
	for round := range n {
		pk := fmt.Sprintf("front-%d", round)
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.table), Item: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: pk},
			"v":  &ddb.AttributeValueMemberN{Value: "0"},
		}})
		require.NoError(t, err)
		w := raceOnce(t, db, b.table, pk, round)
		got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), Key: key(pk), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(w), got.Item["v"].(*ddb.AttributeValueMemberN).Value, "round %d", round)
	}
	// Its own counts, not those of the proxy Start made.
	require.Equal(t, int64(n*racers), front.Counts()["dynamodb.UpdateItem"])

	// Closing the front leaves the emulator running.
	front.Close()
	_, err = b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), Key: key("front-0")})
	require.NoError(t, err)
	_, err = client(front.URL).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), Key: key("front-0")})
	require.Error(t, err, "the front is closed")
}

func TestFrontRefusesBadEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ep := range []string{"", "localhost:4566", "ftp://127.0.0.1:21", "http://"} {
		_, err := emulator.Front(ctx, "127.0.0.1:0", ep)
		require.ErrorContains(t, err, "not an http(s) URL", "%q", ep)
	}
	// Nothing listening: refused once ctx ends, not after a hang.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = emulator.Front(short, "127.0.0.1:0", dead)
	require.ErrorContains(t, err, "did not answer")
}

func TestCountsByOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	before := b.emu.Counts()
	require.Equal(t, int64(1), before["dynamodb.CreateTable"])

	for i := range 3 {
		_, err := b.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(b.table),
			Item:      map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: fmt.Sprint(i)}},
		})
		require.NoError(t, err)
	}
	_, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), Key: key("0")})
	require.NoError(t, err)
	// A refused request is counted too.
	_, err = b.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(b.table),
		Item:                map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: "0"}},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *ddb.ConditionalCheckFailedException
	require.ErrorAs(t, err, &ccf)

	after := b.emu.Counts()
	require.Equal(t, int64(4), after["dynamodb.PutItem"]-before["dynamodb.PutItem"])
	require.Equal(t, int64(1), after["dynamodb.GetItem"]-before["dynamodb.GetItem"])
	require.Equal(t, int64(1), after["dynamodb.CreateTable"])
	require.NotContains(t, after, "dynamodb.Query")

	// Counts answers a copy: changing it changes nothing in the emulator.
	after["dynamodb.PutItem"] = 1000
	require.Equal(t, int64(4), b.emu.Counts()["dynamodb.PutItem"]-before["dynamodb.PutItem"])

	lines := emulator.SortedCounts(b.emu.Counts())
	require.Contains(t, lines, "dynamodb.GetItem 1")
	require.IsNonDecreasing(t, lines)
}

// TestS3RequestsAreCountedByOperation: an S3 request is named by what it
// does, never by its key, presigned GETs (a worker's) included.
func TestS3RequestsAreCountedByOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(b.emu.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("counted")})
	require.NoError(t, err)
	for _, k := range []string{"t/j/a/1", "t/j/b/1"} {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("counted"), Key: aws.String(k), Body: strings.NewReader(`{}`)})
		require.NoError(t, err)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("counted"), Key: aws.String("t/j/a/1")})
	require.NoError(t, err)
	req, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("counted"), Key: aws.String("t/j/b/1")})
	require.NoError(t, err)
	res, err := http.Get(req.URL)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	counts := b.emu.Counts()
	require.Equal(t, int64(1), counts["s3.CreateBucket"])
	require.Equal(t, int64(2), counts["s3.PutObject"])
	require.Equal(t, int64(2), counts["s3.GetObject"])
	for op := range counts {
		require.NotContains(t, op, "counted", "no key or bucket in a name")
	}
}
