// Package enginetest is the contract of the engine's ports (engine.Store,
// engine.Queue) as one suite, run against every adapter pair: the
// in-memory one (shared/memory) and DynamoDB and SQS on the emulator
// (shared/store, shared/queue). An adapter passes when it behaves as the
// engine needs, whatever it is built on.
//
// Each check runs in parallel on a fixture of its own, made by the setup
// function the adapter's test passes (River's driver suite style): the
// port, and what the suite needs to drive it. Time-dependent checks move a
// fixture's clock with Advance; a fixture on real time does nothing there,
// and the suite polls for what time brings (never sleeps). A fixture may
// name checks its adapter is known to fail, with why (Skip): the suite then
// skips them for that adapter only.
package enginetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
)

// StoreFixture is one check's store: empty, and its own.
type StoreFixture struct {
	Store engine.Store
	// AddKey records that key belongs to tenant (the way keys are
	// provisioned for this adapter).
	AddKey func(t *testing.T, tenant, key string)
	// Corrupt overwrites a stored job's document with bytes that do not
	// decode, leaving what its due index entry holds as it was.
	Corrupt func(t *testing.T, tenant, id string)
	// Now is when the suite's jobs are made (the zero time means the wall
	// clock, in UTC, to the millisecond). The store's methods are given the
	// time, so no store check waits.
	Now time.Time
	// Skip names checks this adapter is known to fail, each with why.
	Skip map[string]string
}

// QueueFixture is one check's queue: empty, and its own.
type QueueFixture struct {
	Queue engine.Queue
	// TakeReady receives up to max deliveries from the ready path, P0
	// first (what the SQS event source mapping does for the execute
	// function).
	TakeReady func(t *testing.T, max int) []engine.Delivery
	// Advance moves the queue's time forward. A fixture on real time does
	// nothing (set RealTime): the suite then polls until what the time was
	// to bring has come.
	Advance func(d time.Duration)
	// RealTime says Advance cannot move the queue's time: the suite polls
	// for what time brings, and leaves out what would take more than a few
	// seconds of it to see.
	RealTime bool
	// MaxWorkerQueues is the bound on one tenant's worker queues the queue
	// was made with; the suite makes that many, so keep it small.
	MaxWorkerQueues int
	// Visibility is the worker queues' visibility timeout.
	Visibility time.Duration
	// Wait bounds each poll of a real-time fixture (20 s when zero).
	Wait time.Duration
	// Skip names checks this adapter is known to fail, each with why.
	Skip map[string]string
}

// check is one contract check; its name is its subtest's.
type check[F any] struct {
	name string
	run  func(t *testing.T, f F)
}

// StoreChecks answers the names of the store contract's checks (the keys
// StoreFixture.Skip may use).
func StoreChecks() []string { return names(storeChecks) }

// QueueChecks answers the names of the queue contract's checks.
func QueueChecks() []string { return names(queueChecks) }

func names[F any](cs []check[F]) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

// StoreContract runs every store check, each in parallel on a fixture of
// its own from setup.
func StoreContract(t *testing.T, setup func(t *testing.T) StoreFixture) {
	run(t, storeChecks, func(t *testing.T) (StoreFixture, map[string]string) {
		f := setup(t)
		if f.Now.IsZero() {
			f.Now = time.Now().UTC().Truncate(time.Millisecond)
		}
		return f, f.Skip
	})
}

// QueueContract runs every queue check, each in parallel on a fixture of
// its own from setup.
func QueueContract(t *testing.T, setup func(t *testing.T) QueueFixture) {
	run(t, queueChecks, func(t *testing.T) (QueueFixture, map[string]string) {
		f := setup(t)
		if f.Wait == 0 {
			f.Wait = 20 * time.Second
		}
		if f.Advance == nil {
			f.Advance = func(time.Duration) {}
		}
		require.Positive(t, f.MaxWorkerQueues, "the fixture must say its queue's bound")
		require.Positive(t, f.Visibility, "the fixture must say its worker queues' visibility timeout")
		return f, f.Skip
	})
}

func run[F any](t *testing.T, checks []check[F], setup func(t *testing.T) (F, map[string]string)) {
	all := names(checks)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, skip := setup(t)
			for name := range skip {
				require.True(t, slices.Contains(all, name), "the fixture skips %q, which is no check", name)
			}
			if why, ok := skip[c.name]; ok {
				t.Skip("known failure of this adapter: " + why)
			}
			c.run(t, f)
		})
	}
}
