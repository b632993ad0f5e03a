#!/bin/bash
# LocalStack READY hook (/etc/localstack/init/ready.d). It creates nothing:
# `make dev` provisions the stack from template.yaml through infra/bootstrap.
# Written without a Docker engine at hand: not run by its author.
echo "stepflow: LocalStack is ready on :4566 (dynamodb, sqs, stepfunctions, events)"
echo "stepflow: now run on the host: AWS_ENDPOINT_URL=http://localhost:4566 make dev"
