package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/emulator"
)

// race makes racers conditional updates of one item at once (v = 0 -> v =
// racer) and answers how many won; any error besides a failed condition
// fails the test.
func race(t *testing.T, db *dynamodb.Client, table, pk string, racers int) int {
	t.Helper()
	ctx := context.Background()
	key := map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: "race"}}
	item := map[string]ddb.AttributeValue{"v": &ddb.AttributeValueMemberN{Value: "0"}}
	for k, v := range key {
		item[k] = v
	}
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
	require.NoError(t, err)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range racers {
		wg.Go(func() {
			<-start
			_, errs[g] = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key,
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
	won := 0
	for g, err := range errs {
		var ccf *ddb.ConditionalCheckFailedException
		if err == nil {
			won++
		} else if !errors.As(err, &ccf) {
			require.NoError(t, err, "%s racer %d", pk, g+1)
		}
	}
	return won
}

// TestEndpointURLIsSerialised: a stack given the address of a moto that is
// already running, not behind any proxy, still puts its DynamoDB requests
// through a serialising proxy: racing conditional writes through the
// stack's own client have exactly one winner, round after round.
func TestEndpointURLIsSerialised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A moto of the test's own; MotoURL reaches it directly, past the
	// proxy Start put in front of it.
	moto, err := emulator.Start(ctx, "127.0.0.1:0", nil)
	require.NoError(t, err)
	t.Cleanup(moto.Close)

	st, err := devstack.Start(ctx, devstack.Options{EndpointURL: moto.MotoURL, StackName: "external-moto", NoRunner: true})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NotNil(t, st.Emulator)
	require.False(t, st.Emulator.Launched(), "the stack started no moto of its own")
	require.Equal(t, moto.MotoURL, st.Emulator.MotoURL)
	require.Equal(t, st.Emulator.URL, st.Endpoint, "the clients use the proxy")
	require.NotEqual(t, moto.MotoURL, st.Endpoint)
	table := st.Resources.Env["STEPFLOW_TABLE"]
	require.NotEmpty(t, table)

	const rounds, racers = 20, 8
	for round := range rounds {
		require.Equal(t, 1, race(t, st.DynamoDB, table, fmt.Sprintf("serialised-%d", round), racers), "round %d: winners", round)
	}
	require.GreaterOrEqual(t, st.Emulator.Counts()["dynamodb.UpdateItem"], int64(rounds*racers), "the races went through the stack's proxy")

	t.Logf("%d rounds of %d racers through the stack: one winner each", rounds, racers)
	st.Close()
	// Closing the stack leaves the external emulator running.
	cfg, err := devstack.AWSConfig(ctx, moto.MotoURL, "us-east-1")
	require.NoError(t, err)
	direct := dynamodb.NewFromConfig(cfg)
	_, err = direct.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	require.NoError(t, err)
}
