package runner

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// FairBufferCap bounds the messages the local event source mapping holds
// received and not yet handed to the function.
const FairBufferCap = 10000

// fairBuffer plays the part of SQS fair queues, which no emulator runs: on
// AWS, a standard queue whose messages carry a MessageGroupId serves a
// quiet group's messages ahead of a noisy group's backlog. Locally the
// mapping receives ahead (the messages stay invisible meanwhile, as
// in-flight messages do on AWS) and hands batches out round-robin across
// groups, so a tenant's one job is not served after another tenant's
// thousand. A message received again (its visibility ran out while it
// waited here) replaces its older copy rather than queueing twice.
type fairBuffer struct {
	mu     sync.Mutex
	groups map[string][]sqstypes.Message
	ring   []string // groups with messages, in turn order
	next   int
	where  map[string]string    // message id -> group, for messages held
	since  map[string]time.Time // message id -> when it was received, or last hidden again
	n      int
	ready  chan struct{} // signalled when messages arrive
	space  chan struct{} // signalled when messages leave
}

func newFairBuffer() *fairBuffer {
	return &fairBuffer{
		groups: map[string][]sqstypes.Message{}, where: map[string]string{}, since: map[string]time.Time{},
		ready: make(chan struct{}, 1), space: make(chan struct{}, 1),
	}
}

func groupOf(m sqstypes.Message) string {
	return m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// add holds received messages.
func (b *fairBuffer) add(msgs []sqstypes.Message, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		id, g := aws.ToString(m.MessageId), groupOf(m)
		b.since[id] = now
		if held, ok := b.where[id]; ok {
			for i, old := range b.groups[held] {
				if aws.ToString(old.MessageId) == id {
					b.groups[held][i] = m // the newer receipt handle is the valid one
				}
			}
			continue
		}
		if len(b.groups[g]) == 0 {
			b.ring = append(b.ring, g)
		}
		b.groups[g] = append(b.groups[g], m)
		b.where[id] = g
		b.n++
	}
	signal(b.ready)
}

// take answers up to max messages, one from each group in turn.
func (b *fairBuffer) take(max int) []sqstypes.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []sqstypes.Message
	for len(out) < max && len(b.ring) > 0 {
		b.next %= len(b.ring)
		g := b.ring[b.next]
		m := b.groups[g][0]
		b.groups[g] = b.groups[g][1:]
		delete(b.where, aws.ToString(m.MessageId))
		delete(b.since, aws.ToString(m.MessageId))
		b.n--
		out = append(out, m)
		if len(b.groups[g]) == 0 {
			delete(b.groups, g)
			b.ring = append(b.ring[:b.next], b.ring[b.next+1:]...)
		} else {
			b.next++
		}
	}
	if len(out) > 0 {
		signal(b.space)
	}
	return out
}

// heldSince answers the messages held since before t, and marks them held
// from now: the caller hides them again.
func (b *fairBuffer) heldSince(t, now time.Time) []sqstypes.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []sqstypes.Message
	for _, msgs := range b.groups {
		for _, m := range msgs {
			if id := aws.ToString(m.MessageId); b.since[id].Before(t) {
				b.since[id] = now
				out = append(out, m)
			}
		}
	}
	return out
}

func (b *fairBuffer) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// waitFor blocks until c is signalled or ctx ends.
func waitFor(ctx context.Context, c chan struct{}) {
	select {
	case <-c:
	case <-ctx.Done():
	}
}
