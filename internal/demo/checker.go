package demo

import (
	"context"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Checker is a handler that verifies the order it sees: each session must be handled 1, 2, 3, …
// with no gap and nothing after its last message, and nothing repeated but the engine's
// at-least-once replay (SessionOrder). It is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	expected   int64 // messages per session
	order      map[string]*SessionOrder
	complete   map[string]bool
	handled    uint64
	redeliv    uint64
	violations []string
	done       chan struct{}
	remaining  int // sessions not yet complete
}

// NewChecker expects the given sessions, each with messages sequences, and takes a repeat of
// the sequence handled last as a replay (the default engine's window of one message).
func NewChecker(sessionIDs []string, messages int) *Checker {
	return NewReplayChecker(sessionIDs, messages, 1)
}

// NewReplayChecker is NewChecker for an engine whose replay window is window messages: a repeat
// of up to window of the sequences handled last, in order, is a replay; anything else handed
// over below the next expected sequence is a violation.
func NewReplayChecker(sessionIDs []string, messages, window int) *Checker {
	c := &Checker{
		expected:  int64(messages),
		order:     make(map[string]*SessionOrder, len(sessionIDs)),
		complete:  make(map[string]bool, len(sessionIDs)),
		done:      make(chan struct{}),
		remaining: len(sessionIDs),
	}
	for _, id := range sessionIDs {
		c.order[id] = &SessionOrder{Window: int64(window)}
	}
	if c.remaining == 0 {
		close(c.done)
	}
	return c
}

// Handle records m and notes any order violation. It never fails: a violation is reported in
// the summary rather than retried.
func (c *Checker) Handle(_ context.Context, m *sequencer.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handled++
	o, known := c.order[m.SessionID]
	if !known {
		c.violations = append(c.violations, fmt.Sprintf("session %q is not one the demo published", m.SessionID))
		return nil
	}
	want := o.Last() + 1
	v := o.Check(m.Sequence)
	if v != "" {
		c.violations = append(c.violations, fmt.Sprintf("session %q: %s", m.SessionID, v))
	}
	if repeat, _ := o.Handled(m.Sequence); repeat && v == "" {
		c.redeliv++
	}
	if m.Sequence == c.expected && want == c.expected && !c.complete[m.SessionID] {
		c.complete[m.SessionID] = true
		c.remaining--
		if c.remaining == 0 {
			close(c.done)
		}
	}
	return nil
}

// Done is closed once every session's last sequence was handled in order.
func (c *Checker) Done() <-chan struct{} { return c.done }

// Handled returns how many handler calls were made.
func (c *Checker) Handled() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handled
}

// Redelivered returns how many handler calls were replays: repeats of sequences already handled,
// within the replay window.
func (c *Checker) Redelivered() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.redeliv
}

// Violations returns the order violations seen so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Incomplete returns the sessions whose last sequence was not handled in order yet, with the
// next sequence the checker expects.
func (c *Checker) Incomplete() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for id, o := range c.order {
		if !c.complete[id] {
			out[id] = o.Last() + 1
		}
	}
	return out
}
