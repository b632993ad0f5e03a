package domain

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"time"
)

// Fingerprint hashes all of a step that can change once its job is made,
// cheaply: a store keeps what it read of each step and writes again only
// the steps whose fingerprint changed (a job of thousands of steps would
// otherwise encode them all on every write). Of the spec, only the id and
// DependsOn can change (a replan rewires the steps after the one it
// replaces); its action, retry, timeout and requirements are fixed when the
// job is made. TestFingerprintCoversTheStep fails for a field added to a
// step that this does not hash.
func (s *Step) Fingerprint() uint64 {
	var h fingerprint
	h.h.SetSeed(fingerprintSeed)
	h.str(s.Spec.ID)
	h.strs(s.Spec.DependsOn)
	h.str(string(s.State))
	h.int(int64(s.Attempt))
	if l := s.Lease; l != nil {
		h.int(1)
		h.str(l.ID)
		h.int(int64(l.Attempt))
		h.time(l.ExpiresAt)
		h.str(l.Worker)
		h.str(l.Token)
		h.str(l.Resource)
		h.timePtr(l.Deadline)
	} else {
		h.int(0)
	}
	h.timePtr(s.ReadyAt)
	h.timePtr(s.Unsent)
	h.int(int64(s.Redispatches))
	h.bytes(s.Output)
	h.stepError(s.Error)
	h.int(int64(len(s.Attempts)))
	for i := range s.Attempts {
		a := &s.Attempts[i]
		h.int(int64(a.N))
		h.str(string(a.State))
		h.str(a.Lease)
		h.timePtr(a.LeaseUntil)
		h.str(a.Worker)
		h.str(a.Resource)
		h.timePtr(a.StartedAt)
		h.timePtr(a.EndedAt)
		h.stepError(a.Error)
		h.bytes(a.Output)
		h.dataRef(a.OutputRef)
		h.str(a.Child)
		h.float(a.CostUSD)
	}
	h.strs(s.Avoid)
	h.str(s.Prompt)
	h.bytes(s.UserInput)
	if t := s.Timer; t != nil {
		h.int(1)
		h.timePtr(t.WakeAt)
		h.timePtr(t.Deadline)
		h.bool(t.Parked)
	} else {
		h.int(0)
	}
	if d := s.Decision; d != nil {
		h.int(1)
		h.bool(d.Approved)
		h.str(d.By)
		h.str(d.Comment)
		h.str(d.Key)
		h.time(d.At)
	} else {
		h.int(0)
	}
	h.int(int64(s.AttemptBase))
	h.strs(s.ReplacedBy)
	if w := s.ResourceWait; w != nil {
		h.int(1)
		h.time(w.Since)
		h.strs(w.On)
		h.timePtr(w.Until)
	} else {
		h.int(0)
	}
	h.dataRef(s.OutputRef)
	h.bool(s.OutputIsInput)
	h.str(s.MapOf)
	h.bytes(s.Item)
	h.int(int64(s.Index))
	h.bool(s.Expanded)
	h.int(int64(s.Children))
	h.bool(s.OutputIsChildren)
	if c := s.Child; c != nil {
		h.int(1)
		h.str(c.ID)
		h.time(c.CheckAt)
		h.int(int64(c.Checks))
	} else {
		h.int(0)
	}
	return h.h.Sum64()
}

var fingerprintSeed = maphash.MakeSeed()

// fingerprint writes each value with its length or a presence mark, so
// that no two different steps write the same bytes.
type fingerprint struct {
	h   maphash.Hash
	buf [8]byte
}

func (f *fingerprint) int(n int64) {
	binary.LittleEndian.PutUint64(f.buf[:], uint64(n))
	_, _ = f.h.Write(f.buf[:])
}

func (f *fingerprint) float(v float64) { f.int(int64(math.Float64bits(v))) }

func (f *fingerprint) bool(b bool) {
	if b {
		f.int(1)
	} else {
		f.int(0)
	}
}

func (f *fingerprint) str(s string) {
	f.int(int64(len(s)))
	_, _ = f.h.WriteString(s)
}

func (f *fingerprint) bytes(b []byte) {
	if b == nil {
		f.int(-1)
		return
	}
	f.int(int64(len(b)))
	_, _ = f.h.Write(b)
}

func (f *fingerprint) strs(ss []string) {
	if ss == nil {
		f.int(-1)
		return
	}
	f.int(int64(len(ss)))
	for _, s := range ss {
		f.str(s)
	}
}

// time hashes an instant and its location's name: two instants that
// print differently are different.
func (f *fingerprint) time(t time.Time) {
	f.int(t.Unix())
	f.int(int64(t.Nanosecond()))
	f.str(t.Location().String())
}

func (f *fingerprint) timePtr(t *time.Time) {
	if t == nil {
		f.int(0)
		return
	}
	f.int(1)
	f.time(*t)
}

func (f *fingerprint) stepError(e *StepError) {
	if e == nil {
		f.int(0)
		return
	}
	f.int(1)
	f.str(string(e.Class))
	f.str(e.Message)
}

func (f *fingerprint) dataRef(r *DataRef) {
	if r == nil {
		f.int(0)
		return
	}
	f.int(1)
	f.str(r.Key)
	f.int(int64(r.Size))
	f.str(r.SHA256)
}
