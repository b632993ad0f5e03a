package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	stypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// queueKeys declares the AWS::SQS::Queue properties bootstrap sets.
var queueKeys = keySet{
	"VisibilityTimeout":                 handled,
	"MessageRetentionPeriod":            handled,
	"RedrivePolicy":                     handled,
	"RedrivePolicy.deadLetterTargetArn": handled,
	"RedrivePolicy.maxReceiveCount":     handled,
}

// queueAttributes resolves a queue's properties into SQS attributes.
func queueAttributes(r *resolver, props map[string]any) (map[string]string, error) {
	attrs := map[string]string{}
	for _, k := range []string{"VisibilityTimeout", "MessageRetentionPeriod"} {
		if v, ok := props[k]; ok {
			s, err := r.str(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			attrs[k] = s
		}
	}
	if v, ok := props["RedrivePolicy"]; ok {
		rv, err := r.resolve(v)
		if err != nil {
			return nil, fmt.Errorf("RedrivePolicy: %w", err)
		}
		if _, ok := rv.(map[string]any); !ok {
			return nil, fmt.Errorf("RedrivePolicy: want a mapping, got %v", rv)
		}
		b, err := json.Marshal(rv) // SQS takes the policy as a JSON string
		if err != nil {
			return nil, fmt.Errorf("RedrivePolicy: %w", err)
		}
		attrs["RedrivePolicy"] = string(b)
	}
	return attrs, nil
}

// ensureQueue returns the URL and ARN of the queue of that name, creating it
// without attributes when missing: Provision sets them once every queue
// exists, because a RedrivePolicy names another queue's ARN.
func ensureQueue(ctx context.Context, sq *sqs.Client, name string) (url, arn string, err error) {
	if len(name) > 80 {
		return "", "", fmt.Errorf("queue name %s is longer than SQS's 80 characters: use a shorter stack name", name)
	}
	got, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	switch {
	case err == nil:
		url = aws.ToString(got.QueueUrl)
	case queueMissing(err):
		out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			return "", "", fmt.Errorf("create %s: %w", name, err)
		}
		url = aws.ToString(out.QueueUrl)
	default:
		return "", "", fmt.Errorf("get url of %s: %w", name, err)
	}

	qa, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []stypes.QueueAttributeName{stypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", fmt.Errorf("get ARN of %s: %w", name, err)
	}
	arn = qa.Attributes[string(stypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", "", fmt.Errorf("get ARN of %s: emulator returned no QueueArn", name)
	}
	return url, arn, nil
}

func queueMissing(err error) bool {
	var qne *stypes.QueueDoesNotExist
	if errors.As(err, &qne) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) &&
		(ae.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || ae.ErrorCode() == "QueueDoesNotExist")
}
