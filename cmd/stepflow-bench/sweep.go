package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/localstack/devstack"
)

// sweepPoint is one sweep's cost with some jobs at rest.
type sweepPoint struct {
	AtRest   int
	Requests int64
	Units    float64 // read units
}

// sweepAtRest stores finished jobs (written straight to the emulator, past
// the proxy) and measures one heartbeat sweep at each backlog size: its
// requests must stay flat as the stored jobs grow.
func (b *bench) sweepAtRest(ctx context.Context, sizes []int) ([]sweepPoint, error) {
	cfg, err := devstack.AWSConfig(ctx, b.stack.Emulator.MotoURL, "us-east-1")
	if err != nil {
		return nil, err
	}
	direct := dynamoFrom(cfg)
	table := b.stack.Resources.Tables["JobsTable"]
	stored := 0
	var out []sweepPoint
	for _, n := range sizes {
		for stored < n {
			var reqs []ddb.WriteRequest
			for range min(25, n-stored) {
				id := fmt.Sprintf("rest-%08d", stored)
				reqs = append(reqs, ddb.WriteRequest{PutRequest: &ddb.PutRequest{Item: map[string]ddb.AttributeValue{
					"pk": &ddb.AttributeValueMemberS{Value: fmt.Sprintf("J#rest#%d", stored%8)}, "sk": &ddb.AttributeValueMemberS{Value: id},
					"state": &ddb.AttributeValueMemberS{Value: "COMPLETED"}, "queue": &ddb.AttributeValueMemberS{Value: "default"},
				}}})
				stored++
			}
			if _, err := direct.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddb.WriteRequest{table: reqs}}); err != nil {
				return nil, fmt.Errorf("store jobs at rest: %w", err)
			}
			if stored%10000 == 0 {
				fmt.Fprintf(os.Stderr, "bench: %d jobs at rest\n", stored)
			}
		}
		before, units := b.stack.Emulator.Counts(), b.meter.Units()
		ev := events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: time.Now()}
		if err := b.stack.Handlers.Schedule["HeartbeatFunction"](ctx, ev); err != nil {
			return nil, err
		}
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
