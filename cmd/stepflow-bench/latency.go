package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/shared/store"
)

// chainLatency is a chained built-in step's latency beside one PutItem's
// on the same path.
type chainLatency struct {
	Steps int
	Step  time.Duration // median time between two steps' step_succeeded
	Put   time.Duration // median conditional PutItem of an item the job's size, through the proxy
	Item  int           // that item's bytes
}

// measureChainLatency runs one job of steps pass steps alone and takes
// the median gap between its steps' ends (each one write, the next run by
// the same invocation), then times as many conditional PutItems of an
// item of the job's final size through the emulator's proxy, as the
// functions' own requests go.
func (b *bench) measureChainLatency(ctx context.Context, steps int) (chainLatency, error) {
	out := chainLatency{Steps: steps}
	body, _ := json.Marshal(map[string]any{"steps": passChain(steps), "payload": map[string]any{"n": 1}})
	var created struct {
		ID string `json:"id"`
	}
	if err := b.call(ctx, "POST", "/v1/jobs", body, &created); err != nil {
		return out, err
	}
	if err := b.awaitDone(ctx, []string{created.ID}, 2*time.Minute); err != nil {
		return out, err
	}
	j, err := b.direct.Get(ctx, benchTenant, created.ID)
	if err != nil {
		return out, err
	}
	var ends []time.Time
	for _, ev := range j.Events {
		if ev.Type == "step_succeeded" {
			ends = append(ends, ev.At)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(ends); i++ {
		gaps = append(gaps, ends[i].Sub(ends[i-1]))
	}
	out.Step = median(gaps)

	cfg, err := devstack.AWSConfig(ctx, b.stack.Emulator.URL, "us-east-1")
	if err != nil {
		return out, err
	}
	db := dynamoFrom(cfg)
	table := b.stack.Resources.Tables["JobsTable"]
	// The job's stored document, as big as the item the last write wrote.
	pk, sk := store.ItemKey(benchTenant, created.ID)
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk}}})
	if err != nil {
		return out, err
	}
	// A job kept apart has its document in hdoc, its header's
	// (shared/store/parts.go).
	for _, attr := range []string{"doc", "hdoc"} {
		if d, ok := got.Item[attr].(*ddb.AttributeValueMemberB); ok {
			out.Item = len(d.Value)
		}
	}
	doc := make([]byte, out.Item)
	_, _ = rand.Read(doc)
	var puts []time.Duration
	for i := range steps {
		start := time.Now()
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: "LATENCY"}, "sk": &ddb.AttributeValueMemberS{Value: strconv.Itoa(i)},
				"version": &ddb.AttributeValueMemberN{Value: "1"}, "doc": &ddb.AttributeValueMemberB{Value: doc},
			},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		if err != nil {
			return out, fmt.Errorf("time a PutItem: %w", err)
		}
		puts = append(puts, time.Since(start))
	}
	out.Put = median(puts)
	return out, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
