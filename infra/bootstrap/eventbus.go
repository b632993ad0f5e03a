package bootstrap

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// eventBusKeys declares the AWS::Events::EventBus properties: the bus is
// created under its Name.
var eventBusKeys = keySet{
	"Name": handled,
}

// eventBusName resolves a bus's Name ("<stack>-<id>" when it has none).
func eventBusName(r *resolver, stack, id string, props map[string]any) (string, error) {
	v, ok := props["Name"]
	if !ok {
		return stack + "-" + id, nil
	}
	name, err := r.str(v)
	if err != nil {
		return "", fmt.Errorf("Name: %w", err)
	}
	if name == "" || len(name) > 256 {
		return "", fmt.Errorf("Name %q: want 1 to 256 characters", name)
	}
	return name, nil
}

// ensureEventBus creates the bus, or reuses it when it is already there,
// and answers its ARN.
func ensureEventBus(ctx context.Context, c *eventbridge.Client, name string) (string, error) {
	out, err := c.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)})
	if err == nil {
		return aws.ToString(out.EventBusArn), nil
	}
	var exists *ebtypes.ResourceAlreadyExistsException
	if !errors.As(err, &exists) {
		return "", fmt.Errorf("create event bus %s: %w", name, err)
	}
	desc, err := c.DescribeEventBus(ctx, &eventbridge.DescribeEventBusInput{Name: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("describe event bus %s: %w", name, err)
	}
	return aws.ToString(desc.Arn), nil
}
