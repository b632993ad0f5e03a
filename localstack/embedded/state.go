package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/shared/memory"
)

// Format names the state file's kind and version. devstack's file (the
// emulator's table and bucket) has none, and each refuses the other's.
const Format = "stepflow-embedded/1"

// stateFile is the whole state: every adapter's snapshot. It is written
// compact, so the documents it holds as JSON come back byte for byte.
type stateFile struct {
	Format    string                  `json:"format"`
	SavedAt   time.Time               `json:"saved_at"`
	Store     memory.StoreState       `json:"store"`
	Queue     memory.QueueState       `json:"queue"`
	Schedules []memory.ScheduleRecord `json:"schedules,omitempty"`
	Blobs     map[string][]byte       `json:"blobs,omitempty"`
}

// StateCounts says how much a state file held.
type StateCounts struct {
	Jobs      int
	Messages  int // queue messages: steps ready, delayed or leased
	Schedules int
	Objects   int // data kept apart from the jobs (large payloads and outputs)
}

func countsOf(f *stateFile) StateCounts {
	return StateCounts{Jobs: len(f.Store.Jobs), Messages: len(f.Queue.Messages), Schedules: len(f.Schedules), Objects: len(f.Blobs)}
}

// changes sums the adapters' writes.
func (s *Stack) changes() uint64 {
	return s.Store.Changes() + s.Queue.Changes() + s.Schedules.Changes() + s.Blobs.Changes()
}

// Save writes the state to the state file now (through a temporary file,
// so a stop half way leaves the last one whole).
func (s *Stack) Save() (StateCounts, error) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	return s.saveLocked()
}

func (s *Stack) saveLocked() (StateCounts, error) {
	n := s.changes() // before the snapshot: a change during it is written next time
	f := &stateFile{Format: Format, SavedAt: time.Now().UTC(), Store: s.Store.Snapshot(), Queue: s.Queue.Snapshot(),
		Schedules: s.Schedules.Snapshot(), Blobs: s.Blobs.Snapshot()}
	raw, err := json.Marshal(f)
	if err != nil {
		return StateCounts{}, fmt.Errorf("save state: %w", err)
	}
	if err := devstack.WriteFileAtomic(s.statePath, raw); err != nil {
		return StateCounts{}, fmt.Errorf("save state to %s: %w", s.statePath, err)
	}
	s.saved = n
	return countsOf(f), nil
}

// saveLoop writes the state within saveEvery of a change, until ctx ends
// (Close writes it a last time).
func (s *Stack) saveLoop(ctx context.Context) {
	t := time.NewTicker(s.saveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.saveMu.Lock()
		if s.changes() != s.saved {
			_, err := s.saveLocked()
			switch {
			case err != nil && err.Error() != s.lastFail:
				s.log.Error("state not saved; trying again after the next change", "err", err)
				s.lastFail = err.Error()
			case err == nil && s.lastFail != "":
				s.log.Info("state saved again", "file", s.statePath)
				s.lastFail = ""
			}
		}
		s.saveMu.Unlock()
	}
}

// restore reads the state file into the adapters; a missing file is a
// first start. A file of another kind is refused, not overwritten.
func (s *Stack) restore(now time.Time) (StateCounts, error) {
	raw, err := os.ReadFile(s.statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return StateCounts{}, nil
	}
	if err != nil {
		return StateCounts{}, fmt.Errorf("restore state: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return StateCounts{}, fmt.Errorf("restore state: %s is not a state file of make dev's embedded mode: %w", s.statePath, err)
	}
	if f.Format != Format {
		return StateCounts{}, fmt.Errorf("restore state: %s is not a state file of make dev's embedded mode (format %q, want %q; the emulator's has none): name another in STEPFLOW_DEV_STATE", s.statePath, f.Format, Format)
	}
	// A ready queue's message received and not deleted was being run by
	// this process when it stopped: no one runs it now, so it is visible
	// at once, as a crashed invocation's message comes back. A worker
	// queue's keeps its lease: the worker holding it may still be running.
	for i, m := range f.Queue.Messages {
		if m.Ready() && m.Receives > 0 && m.VisibleAt.After(now) {
			f.Queue.Messages[i].VisibleAt = now
		}
	}
	s.Store.Restore(f.Store)
	s.Queue.Restore(f.Queue)
	s.Schedules.Restore(f.Schedules)
	s.Blobs.Restore(f.Blobs)
	return countsOf(&f), nil
}
