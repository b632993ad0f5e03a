# stepflow: `make dev` runs it on this machine, `make test` tests it.
SHELL := /bin/bash
GO    ?= go
FUNCTIONS := enqueue claim execute heartbeat

# moto_server and cfn-lint are found on PATH, else in the project's own
# virtualenv, where make setup (and make dev and make test, when they lack
# them) installs them.
export PATH := $(PATH):$(CURDIR)/.stepflow/venv/bin

.PHONY: dev setup tools test vet lint build invoke clean bench chaos

## dev: serve the HTTP API on STEPFLOW_ADDR (127.0.0.1:3000) over a local AWS emulator (installed with pip if missing), or
## without one, embedded (STEPFLOW_DEV_MODE=embedded forces it); stays in the foreground
dev:
	$(GO) run ./cmd/stepflow-local dev

# Built rather than go run, which adds a line of its own to a failure's.
SETUP := .stepflow/bin/stepflow-setup

## setup: install moto_server and cfn-lint into .stepflow/venv with pip, unless they are on PATH
setup:
	@$(GO) build -o $(SETUP) ./cmd/stepflow-setup && $(SETUP)

# tools: what make test needs beyond Go, installed if missing; else it
# fails at once with one line saying what to run.
tools:
	@$(GO) build -o $(SETUP) ./cmd/stepflow-setup && $(SETUP) -for-test

## test: go vet, every test with the race detector (each binary starts its own moto; the atomicity test
## races 200 rounds, make chaos 1000) but the end-to-end packages' (E2E) and the examples' (programs driving
## the stack over HTTP), each fuzz target briefly, two seeded chaos runs (make chaos runs twenty), cfn-lint
# The end-to-end packages drive the whole stack on moto and run without the
# race detector: the engine, adapters and handlers they drive run with it in
# their own packages, on the in-memory adapters (shared/engine,
# sdk/stepflowtest, localstack/devstack/inmemory) and against moto (the
# adapters' contract suites), and under it the chaos run's two-second
# leases expire on a loaded machine. -ldflags=-w: no DWARF in test binaries
# (stack traces and race reports do not need it), so the links are
# quicker. -p 3: the stack tests spend much of their time waiting on moto,
# so a third package in flight uses cores that would otherwise idle.
E2E := ./localstack/devstack ./localstack/chaos ./cmd/stepflow-local
test: tools vet
	$(GO) test -race -count=1 -p 3 -ldflags=-w $$($(GO) list ./... | grep -v -e /examples/ $(patsubst ./%,-e '/%$$',$(E2E)))
	$(GO) test -count=1 -p 3 -ldflags=-w $(E2E) ./examples/...
	$(GO) test -run='^$$' -fuzz='^FuzzParseJobSpec$$' -fuzztime=$(FUZZ_SPEC) -fuzzminimizetime=$(FUZZ_MINIMIZE) ./shared/domain
	$(GO) test -run='^$$' -fuzz='^FuzzTransitions$$' -fuzztime=$(FUZZ_TRANSITIONS) -fuzzminimizetime=$(FUZZ_MINIMIZE) ./shared/domain
	$(GO) test -run='^$$' -fuzz='^FuzzAPIGatewayEvent$$' -fuzztime=$(FUZZ_API) -fuzzminimizetime=$(FUZZ_MINIMIZE) ./shared/httpapi
	$(GO) run ./cmd/stepflow-chaos --runs 2 --seed 1
	cfn-lint template.yaml

# Fuzz budgets are counts of inputs, not durations: with a duration, Go
# 1.26's fuzz coordinator may report its own deadline as a failure
# ("context deadline exceeded", no crasher) on a busy machine
# (go.dev/issue/75804, fixed in Go 1.27). Each is 5 to 15 s here (a
# transitions input is a whole job's random walk, replayed).
# A new interesting input is minimized before the run goes on, for up to
# 60 s by default: CI's FuzzTransitions once stood still 57 s doing so.
# A count bounds it (and a failure's minimizing) as the budgets are.
FUZZ_MINIMIZE ?= 200x
FUZZ_SPEC ?= 100000x
FUZZ_TRANSITIONS ?= 4000x
FUZZ_API ?= 5000x

## chaos: many seeded fault-injection runs (CHAOS_FLAGS="--runs 50 --seed 100" for others) and 1000 atomicity rounds
CHAOS_FLAGS ?= --runs 20 --seed 1
chaos:
	STEPFLOW_ATOMICITY_ROUNDS=1000 $(GO) test -count=1 -run TestConditionalUpdateIsAtomic -v ./localstack/emulator | grep -E '^(---|ok|FAIL)|rounds'
	$(GO) run ./cmd/stepflow-chaos $(CHAOS_FLAGS)

vet:
	$(GO) vet ./...

## bench: throughput, latency, every AWS request and its price vs the floor and Step Functions; writes docs/benchmarks.md (not part of test). BENCH_FLAGS="--only five-step,timer" runs and prices just those workloads
bench:
	$(GO) run ./cmd/stepflow-bench $(BENCH_FLAGS)

## invoke: run one handler on one event against the running dev stack (the one serving STEPFLOW_URL, else STEPFLOW_ADDR), e.g. make invoke FN=enqueue EVENT=events/enqueue-submit.json
invoke:
	@test -n "$(FN)" -a -n "$(EVENT)" || { echo "usage: make invoke FN=enqueue|claim|execute|heartbeat EVENT=events/<file>.json"; exit 2; }
	$(GO) run ./cmd/stepflow-local invoke $(FN) $(EVENT)

## build: the four Lambda bootstraps for provided.al2023 / arm64, in build/<function>/bootstrap
build: $(addprefix build/,$(addsuffix /bootstrap,$(FUNCTIONS)))

build/%/bootstrap: FORCE
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $@ ./functions/$*

# sam build calls build-<LogicalId> with ARTIFACTS_DIR set (BuildMethod: makefile).
# EchoFunction is functions/echo, or examples/functions/echo (the lambda action's examples).
fn_dir = $(firstword $(wildcard $(addsuffix /$(shell echo '$*' | sed 's/Function$$//' | tr 'A-Z' 'a-z'),functions examples/functions)))
build-%:
	@test -n "$(fn_dir)" || { echo "build-$*: no functions/ or examples/functions/ directory for it"; exit 2; }
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
		-o $(ARTIFACTS_DIR)/bootstrap ./$(fn_dir)

clean:
	rm -rf build .stepflow .aws-sam

FORCE:
