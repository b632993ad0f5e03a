package costmeter

import (
	"bytes"
	"sync"
)

// LogUse is what was written to CloudWatch Logs: bytes, and log events
// (lines), each of which is ingested with LogEventOverhead bytes more.
type LogUse struct{ Bytes, Events int64 }

// Logs is an io.Writer that meters what a function writes to CloudWatch
// Logs, one log event a line, and keeps nothing of it.
type Logs struct {
	mu  sync.Mutex
	use LogUse
}

// Write meters p.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.use.Bytes += int64(len(p))
	l.use.Events += int64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

// Use answers what was written so far.
func (l *Logs) Use() LogUse {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.use
}
