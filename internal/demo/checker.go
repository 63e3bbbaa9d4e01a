package demo

import (
	"context"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Checker is a handler that verifies the order it sees: each session must be handled 1, 2, 3, …
// with no gap, no repeat and nothing after its last message. It is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	expected   int64 // messages per session
	next       map[string]int64
	complete   map[string]bool
	handled    uint64
	redeliv    uint64
	violations []string
	done       chan struct{}
	remaining  int // sessions not yet complete
}

// NewChecker expects the given sessions, each with messages sequences.
func NewChecker(sessionIDs []string, messages int) *Checker {
	c := &Checker{
		expected:  int64(messages),
		next:      make(map[string]int64, len(sessionIDs)),
		complete:  make(map[string]bool, len(sessionIDs)),
		done:      make(chan struct{}),
		remaining: len(sessionIDs),
	}
	for _, id := range sessionIDs {
		c.next[id] = 1
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
	want, known := c.next[m.SessionID]
	switch {
	case !known:
		c.violations = append(c.violations, fmt.Sprintf("session %q is not one the demo published", m.SessionID))
		return nil
	case m.Sequence == want-1:
		// The message just handled, again: a crash came between the handler and the state save
		// (at-least-once delivery), not an order violation.
		c.redeliv++
		return nil
	case m.Sequence != want:
		c.violations = append(c.violations, fmt.Sprintf("session %q: handled sequence %d, expected %d", m.SessionID, m.Sequence, want))
	}
	if m.Sequence >= want {
		c.next[m.SessionID] = m.Sequence + 1
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

// Redelivered returns how many handler calls repeated the previous sequence of their session.
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
	for id, n := range c.next {
		if !c.complete[id] {
			out[id] = n
		}
	}
	return out
}
