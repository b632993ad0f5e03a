package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
)

// JobVersion reads one attribute of a job's item, eventually consistent:
// half the read units of the strongly consistent Get, and nothing to
// inflate or decode. A waiting long-poll reads this, and the whole job only
// once it changed; a read that lags a write by moments delays the answer by
// one pause at most.
func (s *Store) JobVersion(ctx context.Context, tenant, id string) (int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: jobKey(tenant, id),
		ProjectionExpression:     aws.String("#v"),
		ExpressionAttributeNames: map[string]string{"#v": "version"},
	})
	if err != nil {
		return 0, fmt.Errorf("get job %s version: %w", id, err)
	}
	v, ok := out.Item["version"].(*ddb.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("job %s version %q: %w", id, v.Value, err)
	}
	return n, nil
}

// A tenant's open long-polls are one item, pk P#<tenant> sk P, whose map
// attribute h holds each open poll's lease and until (Unix milliseconds).
// Taking a slot is one conditional write (size(h) < bound) and giving it
// back one more, from whichever process or Lambda instance serves the
// poll; a slot whose holder died runs out at its until and is pruned by
// the next taker that finds the map full. The item expires (ttl) an hour
// after the last take.
const (
	pollSlotsTTL = time.Hour
	pollPrune    = 100 // expired slots removed by one write
)

func pollKey(tenant string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "P#" + tenant},
		"sk": &ddb.AttributeValueMemberS{Value: "P"},
	}
}

func millis(t time.Time) ddb.AttributeValue {
	return &ddb.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
}

// TakePollSlot holds one of tenant's bound long-poll slots for lease.
func (s *Store) TakePollSlot(ctx context.Context, tenant, lease string, bound int, until, now time.Time) (time.Time, bool, error) {
	ttl := &ddb.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(pollSlotsTTL).Unix(), 10)}
	var ccf *ddb.ConditionalCheckFailedException
	for range 4 {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: pollKey(tenant),
			UpdateExpression:          aws.String("SET #h.#l = :u, #ttl = :ttl"),
			ConditionExpression:       aws.String("attribute_exists(#h) AND size(#h) < :bound"), // size alone: moto fails on a missing map
			ExpressionAttributeNames:  map[string]string{"#h": "h", "#l": lease, "#ttl": "ttl"},
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":u": millis(until), ":ttl": ttl, ":bound": &ddb.AttributeValueMemberN{Value: strconv.Itoa(bound)}},
		})
		if err == nil {
			return time.Time{}, true, nil
		}
		if !errors.As(err, &ccf) {
			return time.Time{}, false, fmt.Errorf("take a long-poll slot of tenant %s: %w", tenant, err)
		}
		// Full, or not made yet: look.
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: pollKey(tenant), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return time.Time{}, false, fmt.Errorf("read the long-poll slots of tenant %s: %w", tenant, err)
		}
		if out.Item == nil {
			_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: &s.table,
				Item: map[string]ddb.AttributeValue{
					"pk": pollKey(tenant)["pk"], "sk": pollKey(tenant)["sk"], "ttl": ttl,
					"h": &ddb.AttributeValueMemberM{Value: map[string]ddb.AttributeValue{lease: millis(until)}},
				},
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			})
			if err == nil {
				return time.Time{}, true, nil
			}
			if !errors.As(err, &ccf) {
				return time.Time{}, false, fmt.Errorf("take a long-poll slot of tenant %s: %w", tenant, err)
			}
			continue // another poll made it first
		}
		held, _ := out.Item["h"].(*ddb.AttributeValueMemberM)
		var first time.Time
		names := map[string]string{"#h": "h"}
		remove := ""
		if held != nil {
			for l, v := range held.Value {
				n, _ := v.(*ddb.AttributeValueMemberN)
				ms := int64(0)
				if n != nil {
					ms, _ = strconv.ParseInt(n.Value, 10, 64)
				}
				u := time.UnixMilli(ms)
				if u.After(now) {
					if first.IsZero() || u.Before(first) {
						first = u
					}
					continue
				}
				if len(names) > pollPrune {
					continue
				}
				name := "#e" + strconv.Itoa(len(names))
				names[name] = l
				if remove != "" {
					remove += ", "
				}
				remove += "#h." + name
			}
		}
		if remove == "" {
			if held == nil || len(held.Value) < bound {
				continue // a slot freed since the write was refused
			}
			return first, false, nil
		}
		// Slots whose holders died: removing a lease gone already is no
		// error, and a lease is never taken twice, so no condition.
		if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: pollKey(tenant),
			UpdateExpression: aws.String("REMOVE " + remove), ExpressionAttributeNames: names,
		}); err != nil {
			return time.Time{}, false, fmt.Errorf("free the expired long-poll slots of tenant %s: %w", tenant, err)
		}
	}
	// Every look found a slot freed and every write found it taken again:
	// the tenant's polls come and go at its bound, so this one is refused
	// as past it (429, retry in a second), not as a contended write.
	return now.Add(time.Second), false, nil
}

// ReleasePollSlot frees lease's slot.
func (s *Store) ReleasePollSlot(ctx context.Context, tenant, lease string) error {
	var ccf *ddb.ConditionalCheckFailedException
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: pollKey(tenant),
		UpdateExpression:         aws.String("REMOVE #h.#l"),
		ConditionExpression:      aws.String("attribute_exists(pk)"), // never makes the item
		ExpressionAttributeNames: map[string]string{"#h": "h", "#l": lease},
	})
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("free a long-poll slot of tenant %s: %w", tenant, err)
	}
	return nil
}
