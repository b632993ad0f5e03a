package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// SetBudget sets what one of tenant's jobs may cost (POST
// /v1/jobs/{id}/budget): above what it has cost so far, or it is refused,
// naming usd, with nothing written. A job waiting at its budget gate goes
// on: its runnable steps are sent again. by names who set it.
func (e *Engine) SetBudget(ctx context.Context, tenant, id string, usd float64, by string) (*domain.Job, error) {
	if err := domain.CheckBudget("usd", usd); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	return e.commit(ctx, tenant, id, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		ds, err := j.SetBudget(usd, by, now)
		fx.dispatch = append(fx.dispatch, ds...)
		return err
	}})
}

// TenantBudgets are the daily budgets of tenants, in dollars
// (STEPFLOW_TENANT_BUDGETS): "tenant:usd,...", "*:usd" for every tenant
// not named.
type TenantBudgets map[string]float64

// ParseTenantBudgets reads STEPFLOW_TENANT_BUDGETS, naming what is wrong.
func ParseTenantBudgets(v string) (TenantBudgets, error) {
	out := TenantBudgets{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		tenant, usd, ok := strings.Cut(part, ":")
		f, err := strconv.ParseFloat(strings.TrimSpace(usd), 64)
		if !ok || strings.TrimSpace(tenant) == "" || err != nil || domain.CheckBudget("usd", f) != nil {
			return nil, fmt.Errorf("STEPFLOW_TENANT_BUDGETS: %q is not tenant:usd (a number of dollars above 0), as in \"acme:25,*:5\"", part)
		}
		out[strings.TrimSpace(tenant)] = f
	}
	return out, nil
}

// For answers tenant's daily budget; ok false for none.
func (b TenantBudgets) For(tenant string) (float64, bool) {
	if usd, ok := b[tenant]; ok {
		return usd, true
	}
	usd, ok := b["*"]
	return usd, ok
}

// TenantBudget is a tenant's daily budget as GET /v1/budget answers it.
type TenantBudget struct {
	Tenant string
	// DailyUSD is the budget, nil for none.
	DailyUSD *float64
	// SpentTodayUSD is what the tenant's jobs cost since midnight UTC, as
	// counted so far (each process adds its own within StatsFlushEvery).
	SpentTodayUSD float64
	ResetsAt      time.Time
}

// Exceeded reports whether the budget is spent.
func (b TenantBudget) Exceeded() bool { return b.DailyUSD != nil && b.SpentTodayUSD >= *b.DailyUSD }

// Budget answers tenant's daily budget and what it has spent today.
func (e *Engine) Budget(ctx context.Context, tenant string) (TenantBudget, error) {
	now := e.now()
	b := TenantBudget{Tenant: tenant, ResetsAt: nextMidnight(now)}
	if usd, ok := e.cfg.TenantBudgets.For(tenant); ok {
		b.DailyUSD = &usd
	}
	spent, err := e.spentToday(ctx, tenant, now, true)
	b.SpentTodayUSD = spent
	return b, err
}

func nextMidnight(now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// spentCache keeps each tenant's spend read from the store for
// spentFresh, so a submit does not read 24 hours of counters.
type spentCache struct {
	mu sync.Mutex
	by map[string]spentRead
}

type spentRead struct {
	nano int64
	day  string
	at   time.Time
}

// spentFresh is how long a tenant's spend read from the store is used:
// a burst of submits passes its daily budget by at most what it spends
// in this time and StatsFlushEvery.
const spentFresh = 10 * time.Second

// spentToday answers what tenant's jobs cost today: as the store counts
// it (read again when fresh, else at most spentFresh old), and what this
// process counted and has not written yet.
func (e *Engine) spentToday(ctx context.Context, tenant string, now time.Time, fresh bool) (float64, error) {
	day := now.UTC().Format("20060102")
	e.spent.mu.Lock()
	r, ok := e.spent.by[tenant]
	e.spent.mu.Unlock()
	if fresh || !ok || r.day != day || now.Sub(r.at) >= spentFresh {
		st, err := e.cfg.Store.Stats(ctx, tenant, now)
		if err != nil {
			return 0, err
		}
		r = spentRead{nano: st.SpentTodayNanoUSD, day: day, at: now}
		e.spent.mu.Lock()
		if e.spent.by == nil {
			e.spent.by = map[string]spentRead{}
		}
		e.spent.by[tenant] = r
		e.spent.mu.Unlock()
	}
	e.statsMu.Lock()
	pending := e.stats[tenant].CostNanoUSD
	e.statsMu.Unlock()
	return float64(r.nano+pending) / 1e9, nil
}

// CheckDailyBudget refuses a submit of a tenant whose daily budget is
// spent (402), saying which budget and when it resets, before anything is
// written.
func (e *Engine) CheckDailyBudget(ctx context.Context, tenant string) error {
	daily, ok := e.cfg.TenantBudgets.For(tenant)
	if !ok {
		return nil
	}
	now := e.now()
	spent, err := e.spentToday(ctx, tenant, now, false)
	if err != nil {
		return err
	}
	if spent < daily {
		return nil
	}
	resets := nextMidnight(now)
	return &domain.Error{Code: domain.CodeBudgetExceeded, Message: fmt.Sprintf(
		"tenant %s has spent %s today, its daily budget of %s (STEPFLOW_TENANT_BUDGETS): no job is taken until it resets at %s (in %s); GET /v1/budget shows it",
		tenant, domain.Dollars(math.Round(spent*1e6)/1e6), domain.Dollars(daily), resets.Format(time.RFC3339), resets.Sub(now).Round(time.Minute))}
}
