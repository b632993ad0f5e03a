package store_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/store"
)

// TestStoreContract runs the engine's store contract against the DynamoDB
// adapter on the emulator: each check gets a table of its own. What every
// store must do is tested there, once for both adapters; the other tests in
// this package pin what is DynamoDB's own (item layout, shards, TTLs,
// transactions, request counts).
func TestStoreContract(t *testing.T) {
	t.Parallel()
	enginetest.StoreContract(t, func(t *testing.T) enginetest.StoreFixture {
		h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
		table := h.Resources.Tables["JobsTable"]
		require.NotEmpty(t, table)
		st := store.New(h.DynamoDB, table)
		return enginetest.StoreFixture{
			Store: st,
			AddKey: func(t *testing.T, tenant, key string) {
				require.NoError(t, st.PutAPIKey(context.Background(), tenant, key))
			},
			Corrupt: func(t *testing.T, tenant, id string) {
				pk, sk := store.ItemKey(tenant, id)
				_, err := h.DynamoDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
					TableName: aws.String(table),
					Key: map[string]ddb.AttributeValue{
						"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk},
					},
					UpdateExpression:          aws.String("SET doc = :garbage"),
					ConditionExpression:       aws.String("attribute_exists(pk)"),
					ExpressionAttributeValues: map[string]ddb.AttributeValue{":garbage": &ddb.AttributeValueMemberB{Value: []byte("\x00\x01 not a job")}},
				})
				require.NoError(t, err)
			},
		}
	})
}
