package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Dev answers `make dev`'s logger: one line per job change (ChangeLine),
// whatever level (the engine logs changes at Debug, engine.ChangeLevel, so
// that Lambda's logger drops them by default), every other record at level
// and above as
//
//	15:04:05 WARN message key=value ...
//
// (the level left out at Info), in the local time of day.
func Dev(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(contextHandler{&devHandler{w: w, mu: &sync.Mutex{}, level: level}})
}

// ChangeLine renders one job change: the job's state after it, then each
// step it moved with its attempt, its worker and why it failed, e.g.
//
//	12:00:01 job 01K2Z3... RUNNING   step render RUNNING attempt 1 worker w1
//	12:00:04 job 01K2Z3... RETRYING  step render RETRYING attempt 1 (retryable: GPU busy)
func ChangeLine(at time.Time, c engine.Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s job %s %-9s", at.Format(time.TimeOnly), c.Job, c.To)
	var parts []string
	if c.From == domain.JobInitial {
		created := "created"
		if c.Schedule != "" {
			created += " by schedule " + c.Schedule
		}
		parts = append(parts, created)
	} else {
		for _, s := range c.Steps {
			p := "step " + s.Step + " " + string(s.State)
			if s.Attempt > 0 {
				p += " attempt " + strconv.Itoa(s.Attempt)
			}
			if s.Worker != "" {
				p += " worker " + s.Worker
			}
			switch {
			case s.Error != nil:
				p += " (" + string(s.Error.Class) + ": " + oneLine(s.Error.Message) + ")"
			case s.Detail != "":
				p += " (" + oneLine(s.Detail) + ")"
			}
			parts = append(parts, p)
		}
	}
	for _, ev := range c.Events {
		if domain.IsNote(ev.Type) {
			parts = append(parts, strings.ReplaceAll(ev.Type, "_", " ")+" ("+oneLine(ev.Detail)+")")
		}
	}
	if len(parts) > maxLineParts {
		// A cancel of a long job moves thousands of steps at once.
		parts = append(parts[:maxLineParts-1], fmt.Sprintf("and %d more", len(parts)-maxLineParts+1))
	}
	if len(parts) > 0 {
		b.WriteString(" " + strings.Join(parts, "; "))
	}
	return strings.TrimRight(b.String(), " ")
}

// maxLineParts bounds what one change's line names.
const maxLineParts = 12

// oneLine keeps a message to one short line.
func oneLine(s string) string {
	return domain.Truncate(strings.Join(strings.Fields(s), " "), 160)
}

// devHandler writes Dev's lines. Attributes given by WithAttrs are kept
// rendered; a group's name prefixes its keys.
type devHandler struct {
	w      io.Writer
	mu     *sync.Mutex
	level  slog.Leveler
	attrs  string // " key=value" of WithAttrs
	prefix string // "group." of WithGroup
}

// Enabled lets change records through below level too: which record is a
// change is known only in Handle.
func (h *devHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= min(h.level.Level(), engine.ChangeLevel)
}

func (h *devHandler) Handle(_ context.Context, r slog.Record) error {
	var line string
	r.Attrs(func(a slog.Attr) bool {
		if c, ok := a.Value.Any().(engine.Change); ok {
			line = ChangeLine(r.Time, c)
			return false
		}
		return true
	})
	if line == "" && r.Level < h.level.Level() {
		return nil
	}
	if line == "" {
		var b strings.Builder
		b.WriteString(r.Time.Format(time.TimeOnly))
		if r.Level != slog.LevelInfo {
			b.WriteString(" " + r.Level.String())
		}
		b.WriteString(" " + r.Message + h.attrs)
		r.Attrs(func(a slog.Attr) bool {
			appendAttr(&b, h.prefix, a)
			return true
		})
		line = b.String()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, line+"\n")
	return err
}

func (h *devHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range attrs {
		appendAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs += b.String()
	return &c
}

func (h *devHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix += name + "."
	return &c
}

// appendAttr writes " key=value", a group's attributes as " group.key=value".
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, prefix, g)
		}
		return
	}
	if a.Equal(slog.Attr{}) {
		return
	}
	b.WriteString(" " + prefix + a.Key + "=" + quoted(a.Value.String()))
}

// quoted quotes a value that would not read as one word.
func quoted(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '"' || r == '=' || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
