package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// API keys are two items written together: the one a request's key is
// looked up by (pk "K#<hash>", what authentication reads), and a catalog
// entry under one partition ("KEYS", sk "<tenant>#<name>") so keys can be
// listed and revoked by name with a Query, never a Scan. Neither holds the
// key itself, only its SHA-256.

const keyCatalog = "KEYS"

// APIKey is a key as the catalog lists it.
type APIKey struct {
	Tenant    string    `dynamodbav:"tenant" json:"tenant"`
	Name      string    `dynamodbav:"name" json:"name"`
	ID        string    `dynamodbav:"key_id" json:"id"` // key_<12 hex of its hash>, as decisions record it
	Hash      string    `dynamodbav:"hash" json:"-"`
	CreatedAt time.Time `dynamodbav:"created_at" json:"created_at"`
}

// ErrKeyNameTaken answers an AddAPIKey under a name the tenant has.
var ErrKeyNameTaken = errors.New("the tenant already has a key of that name")

// KeyID names a key without saying anything of it: the first 12 hex
// digits of its hash (what an approve or reject records).
func KeyID(key string) string { return "key_" + engine.HashKey(key)[:12] }

// PutAPIKey records that key belongs to tenant, named by its id; putting
// it again changes nothing (make dev registers its keys at each start).
func (s *Store) PutAPIKey(ctx context.Context, tenant, key string) error {
	_, err := s.writeAPIKey(ctx, tenant, KeyID(key), key, false)
	return err
}

// AddAPIKey records a new key of tenant under name, unless the tenant has
// a key of that name (ErrKeyNameTaken).
func (s *Store) AddAPIKey(ctx context.Context, tenant, name, key string) (APIKey, error) {
	return s.writeAPIKey(ctx, tenant, name, key, true)
}

func (s *Store) writeAPIKey(ctx context.Context, tenant, name, key string, fresh bool) (APIKey, error) {
	if !domain.ValidName(tenant) {
		return APIKey{}, domain.Invalid("tenant", "must be 1 to 40 letters, digits, '-' or '_'")
	}
	if !domain.ValidName(name) {
		return APIKey{}, domain.Invalid("name", "must be 1 to 40 letters, digits, '-' or '_'")
	}
	hash := engine.HashKey(key)
	k := APIKey{Tenant: tenant, Name: name, ID: "key_" + hash[:12], Hash: hash, CreatedAt: time.Now().UTC()}
	entry, err := attributevalue.MarshalMap(k)
	if err != nil {
		return k, fmt.Errorf("encode api key %s: %w", name, err)
	}
	entry["pk"] = &ddb.AttributeValueMemberS{Value: keyCatalog}
	entry["sk"] = &ddb.AttributeValueMemberS{Value: tenant + "#" + name}
	auth := &ddb.Put{TableName: &s.table, Item: map[string]ddb.AttributeValue{
		"pk":     &ddb.AttributeValueMemberS{Value: "K#" + hash},
		"sk":     &ddb.AttributeValueMemberS{Value: "K"},
		"tenant": &ddb.AttributeValueMemberS{Value: tenant},
		"name":   &ddb.AttributeValueMemberS{Value: name},
	}}
	listed := &ddb.Put{TableName: &s.table, Item: entry}
	if fresh {
		absent, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
		if err != nil {
			return k, fmt.Errorf("api key condition: %w", err)
		}
		for _, p := range []*ddb.Put{auth, listed} {
			p.ConditionExpression, p.ExpressionAttributeNames = absent.Condition(), absent.Names()
		}
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddb.TransactWriteItem{{Put: auth}, {Put: listed}}})
	var tce *ddb.TransactionCanceledException
	switch {
	case errors.As(err, &tce) && len(tce.CancellationReasons) == 2 && aws.ToString(tce.CancellationReasons[1].Code) == "ConditionalCheckFailed":
		return k, fmt.Errorf("api key %s of tenant %s: %w", name, tenant, ErrKeyNameTaken)
	case err != nil:
		return k, fmt.Errorf("put api key %s for tenant %s: %w", name, tenant, err)
	}
	return k, nil
}

// ListAPIKeys lists the keys of tenant, or of every tenant when it is "",
// by tenant and name. A catalog entry whose key item is gone (deleted
// behind the catalog's back: it authenticates nothing) is not listed, and
// is removed.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error) {
	kc := expression.Key("pk").Equal(expression.Value(keyCatalog))
	if tenant != "" {
		kc = kc.And(expression.Key("sk").BeginsWith(tenant + "#"))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName: &s.table, KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}
	var keys []APIKey
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		var page []APIKey
		if err := attributevalue.UnmarshalListOfMaps(out.Items, &page); err != nil {
			return nil, fmt.Errorf("decode api keys: %w", err)
		}
		live, err := s.liveKeys(ctx, page)
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			if live[k.Hash] {
				keys = append(keys, k)
				continue
			}
			if err := s.dropOrphanKeyEntry(ctx, k); err != nil {
				return nil, err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return keys, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// liveKeys answers which of the catalog entries' keys have their key item,
// with a BatchGetItem per 100 (its limit).
func (s *Store) liveKeys(ctx context.Context, entries []APIKey) (map[string]bool, error) {
	live := make(map[string]bool, len(entries))
	for start := 0; start < len(entries); start += 100 {
		var keys []map[string]ddb.AttributeValue
		for _, k := range entries[start:min(start+100, len(entries))] {
			keys = append(keys, map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: "K#" + k.Hash}, "sk": &ddb.AttributeValueMemberS{Value: "K"},
			})
		}
		req := map[string]ddb.KeysAndAttributes{s.table: {Keys: keys, ProjectionExpression: aws.String("pk")}}
		for len(req) > 0 {
			out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fmt.Errorf("list api keys: read their key items: %w", err)
			}
			for _, item := range out.Responses[s.table] {
				if pk, ok := item["pk"].(*ddb.AttributeValueMemberS); ok {
					live[strings.TrimPrefix(pk.Value, "K#")] = true
				}
			}
			req = out.UnprocessedKeys // throttled reads come back to be asked again
		}
	}
	return live, nil
}

// dropOrphanKeyEntry removes the catalog entry of a key whose key item is
// gone, unless the entry changed (the name now holds another key) or the
// key item came back since it was read.
func (s *Store) dropOrphanKeyEntry(ctx context.Context, k APIKey) error {
	sameKey, err := expression.NewBuilder().WithCondition(expression.Name("hash").Equal(expression.Value(k.Hash))).Build()
	if err != nil {
		return fmt.Errorf("api key condition: %w", err)
	}
	gone, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
	if err != nil {
		return fmt.Errorf("api key condition: %w", err)
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddb.TransactWriteItem{
		{ConditionCheck: &ddb.ConditionCheck{TableName: &s.table, Key: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: "K#" + k.Hash}, "sk": &ddb.AttributeValueMemberS{Value: "K"},
		}, ConditionExpression: gone.Condition(), ExpressionAttributeNames: gone.Names()}},
		{Delete: &ddb.Delete{TableName: &s.table, Key: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: keyCatalog}, "sk": &ddb.AttributeValueMemberS{Value: k.Tenant + "#" + k.Name},
		}, ConditionExpression: sameKey.Condition(), ExpressionAttributeNames: sameKey.Names(), ExpressionAttributeValues: sameKey.Values()}},
	}})
	if tce := (*ddb.TransactionCanceledException)(nil); errors.As(err, &tce) {
		return nil // it changed under us: the next listing sees what it is now
	}
	if err != nil {
		return fmt.Errorf("remove the catalog entry of api key %s of tenant %s, whose key item is gone: %w", k.Name, k.Tenant, err)
	}
	return nil
}

// RevokeAPIKey deletes a key named by its name or its id, of tenant (""
// finds it among every tenant's when only one has it): a
// request with it is refused from then on (an API function that checked
// it in the last minute may still accept it until its cache forgets).
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, nameOrID string) (APIKey, error) {
	keys, err := s.ListAPIKeys(ctx, tenant)
	if err != nil {
		return APIKey{}, err
	}
	var found []APIKey
	for _, k := range keys {
		if k.Name == nameOrID || k.ID == nameOrID {
			found = append(found, k)
		}
	}
	switch {
	case len(found) == 0:
		return APIKey{}, fmt.Errorf("api key %q: %w", nameOrID, domain.ErrNotFound)
	case len(found) > 1:
		return APIKey{}, domain.Invalid("tenant", "%d tenants have a key named %q: name the tenant", len(found), nameOrID)
	}
	k := found[0]
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddb.TransactWriteItem{
		{Delete: &ddb.Delete{TableName: &s.table, Key: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: "K#" + k.Hash}, "sk": &ddb.AttributeValueMemberS{Value: "K"},
		}}},
		{Delete: &ddb.Delete{TableName: &s.table, Key: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: keyCatalog}, "sk": &ddb.AttributeValueMemberS{Value: k.Tenant + "#" + k.Name},
		}}},
	}})
	if err != nil {
		return k, fmt.Errorf("revoke api key %s of tenant %s: %w", k.Name, k.Tenant, err)
	}
	return k, nil
}
