// Package blobstore keeps the data too large for a job's item in S3 (the
// DataBucket of template.yaml): the engine's Blobs port. Keys are the
// domain's (all of a job's data under its tenant/job prefix); a URL is a
// presigned GET, which a worker fetches without credentials.
package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Blobs = (*Store)(nil)

// API is the part of the S3 client the store calls.
type API interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	ListObjectsV2(context.Context, *s3.ListObjectsV2Input, ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	DeleteObjects(context.Context, *s3.DeleteObjectsInput, ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
}

// Store is the S3 adapter.
type Store struct {
	api     API
	presign *s3.PresignClient
	bucket  string
}

// New answers a store over bucket, presigning with the client's own
// credentials and endpoint.
func New(c *s3.Client, bucket string) *Store {
	return &Store{api: c, presign: s3.NewPresignClient(c), bucket: bucket}
}

// Options configures an S3 client for the store. A local emulator
// (endpoint set) is addressed path-style: it serves S3 on the endpoint of
// every other service, where a bucket cannot be a host name. Responses
// are not checksum-validated by the SDK: the engine checks each object's
// SHA-256 against its reference.
func Options(endpointSet bool) func(*s3.Options) {
	return func(o *s3.Options) {
		o.UsePathStyle = o.UsePathStyle || endpointSet
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
}

// Put writes data under key.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.api.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String("application/json"),
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Get answers the data under key, or domain.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.api.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	var nsk *s3types.NoSuchKey
	switch {
	case errors.As(err, &nsk):
		return nil, fmt.Errorf("s3://%s/%s: %w", s.bucket, key, domain.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("get s3://%s/%s: %w", s.bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("read s3://%s/%s: %w", s.bucket, key, err)
	}
	return b, nil
}

// URL answers a presigned GET of key, valid for ttl (at most 7 days, S3's
// limit; a URL signed with a role's session credentials ends with them).
func (s *Store) URL(ctx context.Context, key string, ttl time.Duration) (string, error) {
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}, s3.WithPresignExpires(min(ttl, 7*24*time.Hour)))
	if err != nil {
		return "", fmt.Errorf("presign s3://%s/%s: %w", s.bucket, key, err)
	}
	return req.URL, nil
}

// DeletePrefix deletes every object under prefix: one ListObjectsV2 and one
// DeleteObjects per 1000 keys (a job has a few).
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	n := 0
	pages := s3.NewListObjectsV2Paginator(s.api, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("list s3://%s/%s: %w", s.bucket, prefix, err)
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]s3types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, s3types.ObjectIdentifier{Key: o.Key})
		}
		out, err := s.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &s3types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return n, fmt.Errorf("delete under s3://%s/%s: %w", s.bucket, prefix, err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return n, fmt.Errorf("delete s3://%s/%s: %s %s (and %d more)", s.bucket, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
		}
		n += len(ids)
	}
	return n, nil
}
