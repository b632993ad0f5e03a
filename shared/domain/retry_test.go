package domain

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func policy(backoff string, initial, maxDelay int64, jitter bool) RetryPolicy {
	return RetryPolicy{MaxAttempts: 10, Backoff: backoff, InitialDelayMS: &initial, MaxDelayMS: &maxDelay, Jitter: jitter}
}

func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	require.Equal(t, RetryPolicy{MaxAttempts: 3, Backoff: BackoffExponential, InitialDelayMS: i64(1000), MaxDelayMS: i64(30000)}, DefaultRetryPolicy())
}

func TestDelay(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		p    RetryPolicy
		want []time.Duration // for retry 0..5
	}{
		{"exponential", policy(BackoffExponential, 1000, 30000, false), []time.Duration{1000 * ms, 2000 * ms, 4000 * ms, 8000 * ms, 16000 * ms, 30000 * ms}},
		{"exponential small cap", policy(BackoffExponential, 100, 500, false), []time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms, 500 * ms}},
		{"linear", policy(BackoffLinear, 1000, 30000, false), []time.Duration{1000 * ms, 2000 * ms, 3000 * ms, 4000 * ms, 5000 * ms, 6000 * ms}},
		{"linear cap", policy(BackoffLinear, 1000, 2500, false), []time.Duration{1000 * ms, 2000 * ms, 2500 * ms, 2500 * ms, 2500 * ms, 2500 * ms}},
		{"fixed", policy(BackoffFixed, 1500, 30000, false), []time.Duration{1500 * ms, 1500 * ms, 1500 * ms, 1500 * ms, 1500 * ms, 1500 * ms}},
		{"fixed at cap", policy(BackoffFixed, 2000, 2000, false), []time.Duration{2000 * ms, 2000 * ms, 2000 * ms, 2000 * ms, 2000 * ms, 2000 * ms}},
		{"zero initial", policy(BackoffExponential, 0, 0, true), []time.Duration{0, 0, 0, 0, 0, 0}},
		{"jitter without rng", policy(BackoffExponential, 1000, 30000, true), []time.Duration{1000 * ms, 2000 * ms, 4000 * ms, 8000 * ms, 16000 * ms, 30000 * ms}},
		{"default policy", DefaultRetryPolicy(), []time.Duration{1000 * ms, 2000 * ms, 4000 * ms, 8000 * ms, 16000 * ms, 30000 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for retry, want := range tc.want {
				require.Equal(t, want, tc.p.Delay(retry, nil), "retry %d", retry)
			}
		})
	}
}

func TestDelayLargeRetryStaysCapped(t *testing.T) {
	t.Parallel()
	for _, b := range []string{BackoffExponential, BackoffLinear, BackoffFixed} {
		p := policy(b, 1000, MaxDelayLimitMS, false)
		for _, retry := range []int{60, MaxAttemptsLimit, 5000} {
			d := p.Delay(retry, nil)
			require.Positive(t, d, "%s retry %d", b, retry)
			require.LessOrEqual(t, d, time.Duration(MaxDelayLimitMS)*time.Millisecond, "%s retry %d", b, retry)
		}
	}
}

func TestDelayIgnoresRngWithoutJitter(t *testing.T) {
	t.Parallel()
	p := policy(BackoffExponential, 1000, 30000, false)
	rng := rand.New(rand.NewPCG(1, 2))
	for retry := range 6 {
		require.Equal(t, p.Delay(retry, nil), p.Delay(retry, rng))
	}
}

func TestDelayJitterWithinHalfToFull(t *testing.T) {
	t.Parallel()
	for _, b := range []string{BackoffExponential, BackoffLinear, BackoffFixed} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(42, 7))
			p, plain := policy(b, 1000, 30000, true), policy(b, 1000, 30000, false)
			for retry := range 6 {
				d := plain.Delay(retry, nil)
				seen := map[time.Duration]bool{}
				for range 500 {
					got := p.Delay(retry, rng)
					require.GreaterOrEqual(t, got, d/2, "retry %d", retry)
					require.LessOrEqual(t, got, d, "retry %d", retry)
					seen[got] = true
				}
				require.Greater(t, len(seen), 50, "jitter spreads retry %d", retry)
			}
		})
	}
}

// Equal jitter promises "never sooner than half the policy", also for delays
// that are not a whole even number of milliseconds.
func TestDelayJitterLowerBoundOddDelays(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, initial := range []int64{1, 3, 1001} {
		p := policy(BackoffFixed, initial, initial, true)
		d := time.Duration(initial) * time.Millisecond
		for range 2000 {
			got := p.Delay(0, rng)
			require.GreaterOrEqual(t, got, d/2, "initial %d ms", initial)
			require.LessOrEqual(t, got, d, "initial %d ms", initial)
		}
	}
}

func TestDelayJitterIsDeterministicPerSeed(t *testing.T) {
	t.Parallel()
	p := policy(BackoffExponential, 1000, 30000, true)
	a, b := rand.New(rand.NewPCG(9, 9)), rand.New(rand.NewPCG(9, 9))
	for retry := range 6 {
		require.Equal(t, p.Delay(retry, a), p.Delay(retry, b))
	}
}
