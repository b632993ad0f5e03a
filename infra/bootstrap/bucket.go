package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// bucketKeys declares the AWS::S3::Bucket properties: the local bucket is
// created by name only, and each setting is S3's own on AWS.
var bucketKeys = keySet{
	"BucketEncryption":               "encryption at rest is S3's; the emulator keeps objects on this machine",
	"PublicAccessBlockConfiguration": "the emulator serves this machine only",
	"OwnershipControls":              "ACLs and object ownership are S3's; the emulator has one account",
	"LifecycleConfiguration":         "expiry is a backstop on AWS; a local stack is short-lived and the emulator expires nothing",
}

var bucketNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

// bucketName is the local name of a template's bucket: "<stack>-<id>"
// lower-cased, as S3 names must be (CloudFormation generates one much
// like it).
func bucketName(stack, id string) (string, error) {
	name := strings.ToLower(stack + "-" + id)
	if !bucketNameRE.MatchString(name) {
		return "", fmt.Errorf("bucket name %s is not a valid S3 bucket name (3 to 63 lower-case letters, digits and '-'): use a shorter stack name", name)
	}
	return name, nil
}

// bucketARN is what Fn::GetAtt <bucket>.Arn answers.
func bucketARN(name string) string { return "arn:aws:s3:::" + name }

// ensureBucket creates the bucket, or reuses it when it is already there.
func ensureBucket(ctx context.Context, c *s3.Client, name string) error {
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if region := c.Options().Region; region != "" && region != "us-east-1" {
		in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(region)}
	}
	_, err := c.CreateBucket(ctx, in)
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}
