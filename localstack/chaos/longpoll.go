package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// The hostile tenant's long-poll flood: once the run's jobs are done and
// the faults paused, it opens many more waiting claims at once than its
// bound of open long-polls (engine.DefaultMaxLongPolls unless the stack
// says otherwise), on a queue name no job named, so each waits out its
// time. Past the bound each must answer 429 with Retry-After, and none a
// 5xx.
const (
	longPollFlood = 60
	longPollWait  = 5 // seconds each claim waits
	longPollQueue = "longpoll-flood"
)

type longPollRecord struct {
	Sent, OK, Refused int
	Bad               []string // answers neither 2xx nor 429 with Retry-After
}

// floodLongPolls sends the flood and records its answers.
func (h *hostile) floodLongPolls(ctx context.Context) {
	body, _ := json.Marshal(map[string]any{"queue": longPollQueue, "max": 1, "wait_seconds": longPollWait, "worker": "hostile-longpoll"})
	var mu sync.Mutex
	rec := &longPollRecord{}
	var wg sync.WaitGroup
	for range longPollFlood {
		wg.Go(func() {
			a := h.c.once(ctx, http.MethodPost, "/v1/claim", body)
			mu.Lock()
			defer mu.Unlock()
			rec.Sent++
			switch {
			case a.ok():
				rec.OK++
			case a.status == http.StatusTooManyRequests && a.retryAfter != "":
				rec.Refused++
			default:
				msg := truncate(a.body, 120)
				if a.err != nil {
					msg = a.err.Error()
				}
				rec.Bad = append(rec.Bad, fmt.Sprintf("%d (Retry-After %q): %s", a.status, a.retryAfter, msg))
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	h.longPolls = rec
	h.mu.Unlock()
}

// judgeLongPolls checks the flood: every poll answered 2xx or 429 with
// Retry-After, never a 5xx, and some were refused.
func judgeLongPolls(rec *longPollRecord) *Check {
	c := &Check{Name: fmt.Sprintf("hostile: %d long-polls at once get 429 past the bound, never a 5xx", longPollFlood), Category: HostileCategory}
	if rec == nil {
		c.fail("the long-poll flood was not sent")
		return c
	}
	for range rec.OK + rec.Refused {
		c.pass()
	}
	for _, b := range rec.Bad {
		c.fail("a long-poll answered %s", b)
	}
	if rec.Refused == 0 {
		c.fail("none of %d long-polls at once was refused (%d answered 2xx)", rec.Sent, rec.OK)
	}
	return c
}
