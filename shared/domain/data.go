package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Large data: a job's item is capped at 400 KB and every write of it is
// billed per KB, so a payload or an output above the inline limit is kept
// in the blob store (S3) and the job holds a DataRef to it. The domain
// only names keys and composes what it is given: the engine moves the
// bytes.

// DataRef names data kept in the blob store: its key, its size in bytes
// and its SHA-256 (hex), so a reader can check what it fetched.
type DataRef struct {
	Key    string `json:"key"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// NewDataRef describes data stored under key.
func NewDataRef(key string, data []byte) DataRef {
	sum := sha256.Sum256(data)
	return DataRef{Key: key, Size: len(data), SHA256: hex.EncodeToString(sum[:])}
}

// Verify answers an error unless data is what r describes.
func (r DataRef) Verify(data []byte) error {
	if got := NewDataRef(r.Key, data); got != r {
		return fmt.Errorf("data %s is %d bytes with sha256 %s; its reference says %d bytes, %s", r.Key, got.Size, got.SHA256, r.Size, r.SHA256)
	}
	return nil
}

// Limits on the data a job holds inline.
const (
	// DefaultInlineLimit is the largest payload or output kept in the job's
	// item (STEPFLOW_INLINE_LIMIT). Measured on the flate-compressed item:
	// 8 KB of incompressible JSON (base64) adds about 6 KB to it, 7 write
	// units on every later write of the job, which is what one S3 PUT costs
	// ($5 per million, 8 write units); 8 KB of ordinary records adds about
	// 2.4 KB. Past it, every job that writes again after the output pays
	// more inline than through S3.
	DefaultInlineLimit = 8 * 1024
	// MaxInlineJobBytes bounds all the data a job holds inline (InlineBytes):
	// an output that would pass it goes to the blob store whatever its own
	// size, so outputs never overflow the item, however many steps it has.
	MaxInlineJobBytes = 64 * 1024
)

// The blob store's keys: all of a job's data lies under JobDataPrefix, so
// it can be deleted with the job.

// JobDataPrefix is the prefix of every key of a job's data.
func JobDataPrefix(tenant, jobID string) string { return tenant + "/" + jobID + "/" }

// PayloadKey is where a job's large payload is kept.
func PayloadKey(tenant, jobID string) string { return JobDataPrefix(tenant, jobID) + "payload" }

// OutputKey is where an attempt's large output is kept: one key per
// attempt, so a retried write of it writes the same object again.
func OutputKey(tenant, jobID, stepID string, attempt int) string {
	return fmt.Sprintf("%s%s/%d", JobDataPrefix(tenant, jobID), keySegment(stepID), attempt)
}

// InputKey is where the input an attempt of a worker step was handed is
// kept, when it had to be composed (a DAG's payload and dependencies) and
// is large.
func InputKey(tenant, jobID, stepID string, attempt int) string {
	return OutputKey(tenant, jobID, stepID, attempt) + ".input"
}

// keySegment writes a step id as a key segment. A step id may be "." or
// "..", which a URL's path would read as itself or its parent: such a
// segment is written %2E... (no step id holds '%', so none collides).
func keySegment(id string) string {
	if strings.Trim(id, ".") == "" {
		return strings.Repeat("%2E", len(id))
	}
	return id
}

// Data is a step's input or output as the job holds it: inline JSON, a
// reference to data in the blob store, or a composition of them (a DAG
// step's {"payload", "deps"}, a person's input added to it). Compose makes
// it whole once the data it references is fetched.
type Data struct {
	raw  json.RawMessage // inline
	ref  *DataRef        // or kept in the blob store
	dag  *dagData        // or {"payload": ..., "deps": {...}}
	user json.RawMessage // or a person's answer added to base
	base *Data
	// or what a step's input expression makes of its payload and
	// dependencies (shape.go)
	shape *shapedData
	// or a map's child's {"item", "index", "input"}, or a map's output,
	// the list of its children's (action_map.go)
	child *childData
	list  []Data
	// or an object of data by name (a job's result: ResultData)
	object map[string]Data
}

type childData struct {
	item  json.RawMessage
	index int
	input Data
}

type dagData struct {
	payload Data
	deps    map[string]Data
}

// Refs answers the references Compose needs, each once.
func (d Data) Refs() []DataRef {
	var out []DataRef
	seen := map[string]bool{}
	d.walk(func(r *DataRef) {
		if !seen[r.Key] {
			seen[r.Key] = true
			out = append(out, *r)
		}
	})
	return out
}

func (d Data) walk(fn func(*DataRef)) {
	switch {
	case d.ref != nil:
		fn(d.ref)
	case d.dag != nil:
		d.dag.payload.walk(fn)
		for _, v := range d.dag.deps {
			v.walk(fn)
		}
	case d.base != nil:
		d.base.walk(fn)
	case d.shape != nil:
		d.shape.payload.walk(fn)
		for _, v := range d.shape.deps {
			v.walk(fn)
		}
	case d.child != nil:
		d.child.input.walk(fn)
	case d.list != nil:
		for _, v := range d.list {
			v.walk(fn)
		}
	case d.object != nil:
		for _, v := range d.object {
			v.walk(fn)
		}
	}
}

// Ref answers the reference that is the whole of d, if it is one.
func (d Data) Ref() *DataRef { return d.ref }

// Size answers about how many bytes d is once composed (referenced data
// counted once per use), to bound what a reader fetches before it does.
func (d Data) Size() int {
	switch {
	case d.ref != nil:
		return d.ref.Size
	case d.dag != nil:
		n := 32 + d.dag.payload.Size()
		for id, v := range d.dag.deps {
			n += len(id) + 4 + v.Size()
		}
		return n
	case d.base != nil:
		return d.base.Size() + len(d.user) + 32
	case d.shape != nil:
		n := d.shape.payload.Size()
		for _, v := range d.shape.deps {
			n += v.Size()
		}
		return n
	case d.child != nil:
		return len(d.child.item) + 32 + d.child.input.Size()
	case d.list != nil:
		n := 2
		for _, v := range d.list {
			n += v.Size() + 1
		}
		return n
	case d.object != nil:
		n := 2
		for k, v := range d.object {
			n += len(k) + 4 + v.Size()
		}
		return n
	}
	return len(d.raw)
}

// Compose answers d whole, taking the data it references from fetched
// (by key); a reference missing from fetched is an error.
func (d Data) Compose(fetched map[string][]byte) (json.RawMessage, error) {
	switch {
	case d.ref != nil:
		b, ok := fetched[d.ref.Key]
		if !ok {
			return nil, fmt.Errorf("data %s was not fetched", d.ref.Key)
		}
		return b, nil
	case d.dag != nil:
		p, err := d.dag.payload.Compose(fetched)
		if err != nil {
			return nil, err
		}
		outs := make(map[string]json.RawMessage, len(d.dag.deps))
		for id, v := range d.dag.deps {
			if outs[id], err = v.Compose(fetched); err != nil {
				return nil, err
			}
		}
		return json.Marshal(struct {
			Payload json.RawMessage            `json:"payload"`
			Deps    map[string]json.RawMessage `json:"deps"`
		}{p, outs})
	case d.base != nil:
		in, err := d.base.Compose(fetched)
		if err != nil {
			return nil, err
		}
		return withUserInput(in, d.user), nil
	case d.shape != nil:
		return d.shape.compose(fetched)
	case d.child != nil:
		in, err := d.child.input.Compose(fetched)
		if err != nil {
			return nil, err
		}
		return json.Marshal(struct {
			Item  json.RawMessage `json:"item"`
			Index int             `json:"index"`
			Input json.RawMessage `json:"input"`
		}{d.child.item, d.child.index, orNull(in)})
	case d.list != nil:
		outs := make([]json.RawMessage, len(d.list))
		for i, v := range d.list {
			raw, err := v.Compose(fetched)
			if err != nil {
				return nil, err
			}
			outs[i] = orNull(raw)
		}
		return json.Marshal(outs)
	case d.object != nil:
		outs := make(map[string]json.RawMessage, len(d.object))
		for k, v := range d.object {
			raw, err := v.Compose(fetched)
			if err != nil {
				return nil, err
			}
			outs[k] = orNull(raw)
		}
		return json.Marshal(outs)
	}
	return d.raw, nil
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`null`)
	}
	return raw
}

// InputData answers what step i runs on (Input, with references kept).
func (j *Job) InputData(i int) Data {
	in := j.baseInputData(i)
	if ui := j.Steps[i].UserInput; ui != nil {
		return Data{user: ui, base: &in}
	}
	return in
}

func (j *Job) payloadData() Data {
	if j.PayloadRef != nil {
		return Data{ref: j.PayloadRef}
	}
	return Data{raw: j.Payload}
}

func (j *Job) baseInputData(i int) Data {
	if s := j.Steps[i]; s.MapOf != "" {
		if _, m, err := j.Step(s.MapOf); err == nil {
			return Data{child: &childData{item: s.Item, index: s.Index, input: j.InputData(m)}}
		}
	}
	deps := j.deps(i)
	if src := j.Steps[i].Spec.Input; src != "" {
		sh := &shapedData{src: src, payload: j.payloadData(), deps: map[string]Data{}, states: map[string]StepState{}}
		for _, k := range deps {
			id := j.Steps[k].ID()
			sh.states[id] = j.Steps[k].State
			if j.Steps[k].State == StepSucceeded {
				if out, ok := j.OutputData(k); ok {
					sh.deps[id] = out
				}
			}
		}
		return Data{shape: sh}
	}
	switch {
	case len(deps) == 0:
		return j.payloadData()
	case !j.Graph:
		if out, ok := j.OutputData(deps[0]); ok {
			return out
		}
		return j.payloadData()
	}
	d := &dagData{payload: j.payloadData(), deps: make(map[string]Data, len(deps))}
	for _, k := range deps {
		d.deps[j.Steps[k].ID()], _ = j.OutputData(k)
	}
	return Data{dag: d}
}

// OutputData answers step k's output, and false when it has none.
func (j *Job) OutputData(k int) (Data, bool) {
	s := j.Steps[k]
	switch {
	case s.OutputIsChildren:
		kids := j.mapChildren(k)
		list := make([]Data, len(kids))
		for n, c := range kids {
			if j.Steps[c].State == StepSucceeded {
				list[n], _ = j.OutputData(c)
			}
		}
		if list == nil {
			list = []Data{}
		}
		return Data{list: list}, true
	case s.OutputRef != nil:
		return Data{ref: s.OutputRef}, true
	case s.OutputIsInput:
		return j.InputData(k), true
	case s.Output != nil:
		return Data{raw: s.Output}, true
	}
	return Data{}, false
}

// InlineBytes answers how much data the job holds inline: its payload, its
// steps' outputs (each kept on the step and on its attempt), people's
// answers and signals' payloads.
func (j *Job) InlineBytes() int {
	n := len(j.Payload)
	for _, s := range j.Steps {
		n += len(s.Output) + len(s.UserInput)
		for _, a := range s.Attempts {
			n += len(a.Output)
		}
	}
	for _, sg := range j.Signals {
		n += len(sg.Payload)
	}
	return n
}

// KeepsInline reports whether an output of size bytes may be kept in the
// job's item under limit (the inline limit): it is no larger, and the
// job's inline data stays within MaxInlineJobBytes with it (twice: on the
// step and on its attempt).
func (j *Job) KeepsInline(size, limit int) bool {
	return size <= limit && j.InlineBytes()+2*size <= MaxInlineJobBytes
}

// StoresData reports whether the job references data in the blob store:
// its payload, or any step's or attempt's output. (An input stored for a
// worker is composed of such references, so it implies one.)
func (j *Job) StoresData() bool {
	if j.PayloadRef != nil {
		return true
	}
	for _, s := range j.Steps {
		if s.OutputRef != nil {
			return true
		}
		for _, a := range s.Attempts {
			if a.OutputRef != nil {
				return true
			}
		}
	}
	return false
}

// DataGrace is how long a finished job's item outlives its ExpiresAt while
// its stored data is not yet deleted: the sweep deletes the data at
// ExpiresAt, and the item's TTL must not take the job (and with it the
// sweep's record of the data) first.
const DataGrace = 24 * time.Hour

// DataDue reports whether a finished job's stored data is due for deletion.
func (j *Job) DataDue(now time.Time) bool {
	return j.State.Terminal() && j.StoresData() && j.DataDeletedAt == nil && j.ExpiresAt != nil && !now.Before(*j.ExpiresAt)
}

// DataDeleted records that the job's stored data is gone; the job is due
// no more, and its item's TTL is its ExpiresAt again.
func (j *Job) DataDeleted(now time.Time) {
	j.DataDeletedAt = &now
	j.Resweep()
}

// TTLAt is when the table's TTL may delete the job's item: ExpiresAt, plus
// DataGrace while its stored data is not yet deleted.
func (j *Job) TTLAt() *time.Time {
	if j.ExpiresAt == nil || !j.StoresData() || j.DataDeletedAt != nil {
		return j.ExpiresAt
	}
	t := j.ExpiresAt.Add(DataGrace)
	return &t
}
