// Package inmemory holds the tests of the HTTP API's behaviour that need
// no AWS service: they run over stacktest.NewInMemory (the stack's routes
// and handlers, the engine on the in-memory adapters) in milliseconds and
// with the race detector. localstack/devstack keeps the end-to-end tests
// of what the emulator alone has: the AWS adapters, the stack's wiring
// and options.
package inmemory
