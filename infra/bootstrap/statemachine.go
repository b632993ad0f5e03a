package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	ftypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
)

// stateMachineKeys declares the AWS::Serverless::StateMachine properties
// bootstrap creates the state machine from.
var stateMachineKeys = keySet{
	"Type":          handled,
	"DefinitionUri": handled,
	"Policies":      "IAM only matters on AWS: the emulator allows every call",
	"Tracing":       "X-Ray is AWS's: nothing is traced locally",
}

// defaultAccount is moto's account, used in the role ARN when no resource
// created before names the emulator's own. The emulator only checks the
// role ARN's form; it assumes no role.
const defaultAccount = "123456789012"

// stateMachineSpec is an AWS::Serverless::StateMachine's properties, read.
type stateMachineSpec struct {
	Definition string // the ASL document, as the file holds it
}

// readStateMachine reads a state machine's definition from its
// DefinitionUri, a path relative to the template as `sam build` takes it
// (an S3 location is what `sam package` makes of it, never the source).
// Only STANDARD is handled, the template's type and SAM's default: an
// EXPRESS machine ends after 5 minutes and keeps no execution names.
func readStateMachine(t *Template, props map[string]any) (*stateMachineSpec, error) {
	if typ, ok := props["Type"]; ok && typ != string(ftypes.StateMachineTypeStandard) {
		return nil, fmt.Errorf("Type %v: only %s is handled", typ, ftypes.StateMachineTypeStandard)
	}
	uri, ok := props["DefinitionUri"].(string)
	if !ok || uri == "" {
		return nil, fmt.Errorf("DefinitionUri: want a path relative to the template, got %v", props["DefinitionUri"])
	}
	path := uri
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(t.Path), uri)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("DefinitionUri: %w", err)
	}
	// Refused here, before anything is created, rather than by the emulator
	// half way through provisioning.
	if !json.Valid(raw) {
		return nil, fmt.Errorf("DefinitionUri %s: not a JSON document", uri)
	}
	return &stateMachineSpec{Definition: string(raw)}, nil
}

// roleARN is the role a local state machine is created with, named after
// the stack as SAM names the role it generates after the resource.
func roleARN(account, stack, id string) string {
	return fmt.Sprintf("arn:aws:iam::%s:role/%s-%sRole", account, stack, id)
}

// accountOf answers the account of the emulator, read from the ARN of a
// resource it created (arn:aws:sqs:region:account:name), or defaultAccount.
func accountOf(arns map[string]string) string {
	for _, id := range sortedKeys(arns) {
		parts := strings.SplitN(arns[id], ":", 6)
		if len(parts) == 6 && parts[4] != "" {
			return parts[4]
		}
	}
	return defaultAccount
}

// provisionStateMachine creates the STANDARD state machine of that name, or
// reuses an existing one, putting its definition and role back to the
// template's when they drifted. It returns the state machine's ARN.
func provisionStateMachine(ctx context.Context, sf *sfn.Client, name, role string, spec *stateMachineSpec) (string, error) {
	if len(name) > 80 {
		return "", fmt.Errorf("state machine name %s is longer than Step Functions' 80 characters: use a shorter stack name", name)
	}
	arn, err := findStateMachine(ctx, sf, name)
	if err != nil {
		return "", err
	}
	if arn == "" {
		out, err := sf.CreateStateMachine(ctx, &sfn.CreateStateMachineInput{
			Name:       aws.String(name),
			Definition: aws.String(spec.Definition),
			RoleArn:    aws.String(role),
			Type:       ftypes.StateMachineTypeStandard,
		})
		var exists *ftypes.StateMachineAlreadyExists
		switch {
		case err == nil:
			arn = aws.ToString(out.StateMachineArn)
		case errors.As(err, &exists): // created meanwhile: reuse it
			if arn, err = findStateMachine(ctx, sf, name); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("create %s: %w", name, err)
		}
	}

	desc, err := sf.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", name, err)
	}
	if desc.Type != "" && desc.Type != ftypes.StateMachineTypeStandard {
		return "", fmt.Errorf("existing state machine %s is %s, the template wants %s: delete it to recreate", name, desc.Type, ftypes.StateMachineTypeStandard)
	}
	if aws.ToString(desc.Definition) == spec.Definition && aws.ToString(desc.RoleArn) == role {
		return arn, nil
	}
	_, err = sf.UpdateStateMachine(ctx, &sfn.UpdateStateMachineInput{
		StateMachineArn: aws.String(arn),
		Definition:      aws.String(spec.Definition),
		RoleArn:         aws.String(role),
	})
	if err != nil {
		return "", fmt.Errorf("update %s to the template's definition: %w", name, err)
	}
	return arn, nil
}

// findStateMachine answers the ARN of the state machine of that name, or ""
// when there is none: Step Functions describes a machine by ARN only, and
// the ARN holds the emulator's region and account, which bootstrap does
// not know for sure.
func findStateMachine(ctx context.Context, sf *sfn.Client, name string) (string, error) {
	pages := sfn.NewListStateMachinesPaginator(sf, &sfn.ListStateMachinesInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("list state machines: %w", err)
		}
		for _, m := range page.StateMachines {
			if aws.ToString(m.Name) == name {
				return aws.ToString(m.StateMachineArn), nil
			}
		}
	}
	return "", nil
}
