package demo

import (
	"context"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Checker is a handler that verifies the order it sees: each session must be handled 1, 2, 3, …
// with no gap and nothing after its last message, and nothing repeated but the engine's
// at-least-once replay (sequencer.EngineConfig.ReplayWindow): up to that many of the sequences
// handled last, handed over again in their order. It is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	expected   int64 // messages per session
	window     int64 // the replay window (1: only the sequence handled last)
	next       map[string]int64
	replayed   map[string]int64 // the sequence a replay in progress handed over last
	runFrom    map[string]int64 // the first of the sequences handled without a gap up to next-1
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
		window:    int64(max(window, 1)),
		next:      make(map[string]int64, len(sessionIDs)),
		replayed:  make(map[string]int64, len(sessionIDs)),
		runFrom:   make(map[string]int64, len(sessionIDs)),
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
	if !known {
		c.violations = append(c.violations, fmt.Sprintf("session %q is not one the demo published", m.SessionID))
		return nil
	}
	if m.Sequence < want {
		c.replay(m.SessionID, m.Sequence, want)
		return nil
	}
	if r := c.replayed[m.SessionID]; r != 0 && r != want-1 {
		c.violations = append(c.violations, fmt.Sprintf("session %q: a replay stopped at sequence %d, then %d was handled", m.SessionID, r, m.Sequence))
	}
	delete(c.replayed, m.SessionID)
	if m.Sequence != want {
		c.violations = append(c.violations, fmt.Sprintf("session %q: handled sequence %d, expected %d", m.SessionID, m.Sequence, want))
		c.runFrom[m.SessionID] = m.Sequence
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

// replay judges seq, below the next expected sequence want: a replay after a crash, a lost lock
// or a failed settlement (at-least-once delivery), not an order violation, if it was handled
// before, is within the window and either starts a replay, goes on with the one in progress, or
// starts it again lower (another crash during it).
func (c *Checker) replay(id string, seq, want int64) {
	r := c.replayed[id]
	switch {
	case seq < c.runFrom[id]:
		c.violations = append(c.violations, fmt.Sprintf("session %q: handled sequence %d, which came after a gap, below %d", id, seq, c.runFrom[id]))
	case want-seq > c.window:
		c.violations = append(c.violations, fmt.Sprintf("session %q: handled sequence %d again, %d back (replay window %d)", id, seq, want-seq, c.window))
	case r != 0 && seq > r+1:
		c.violations = append(c.violations, fmt.Sprintf("session %q: a replay skipped from %d to %d", id, r, seq))
		c.replayed[id] = seq
	default:
		c.redeliv++
		c.replayed[id] = seq
	}
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
	for id, n := range c.next {
		if !c.complete[id] {
			out[id] = n
		}
	}
	return out
}
