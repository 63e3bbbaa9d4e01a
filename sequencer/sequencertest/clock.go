package sequencertest

import (
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Clock is a fake sequencer.Clock that only moves when Advance is called.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*clockTimer
}

var _ sequencer.Clock = (*Clock)(nil)

// NewClock returns a Clock set to start (a fixed date when start is zero).
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Clock{now: start}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock is advanced past d.
func (c *Clock) NewTimer(d time.Duration) sequencer.Timer {
	t := &clockTimer{c: c, ch: make(chan time.Time, 1)}
	c.add(t, d)
	return t
}

// AfterFunc calls f in a new goroutine when the clock is advanced past d.
func (c *Clock) AfterFunc(d time.Duration, f func()) sequencer.Timer {
	t := &clockTimer{c: c, f: f}
	c.add(t, d)
	return t
}

func (c *Clock) add(t *clockTimer, d time.Duration) {
	c.mu.Lock()
	t.when = c.now.Add(d)
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	if d <= 0 {
		c.Advance(0)
	}
}

// Advance moves the clock forward by d and fires every timer that is due, earliest first.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*clockTimer
	c.timers = slices.DeleteFunc(c.timers, func(t *clockTimer) bool {
		if !t.when.After(c.now) {
			due = append(due, t)
			return true
		}
		return false
	})
	now := c.now
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *clockTimer) int { return a.when.Compare(b.when) })
	for _, t := range due {
		if t.f != nil {
			go t.f()
		} else {
			t.ch <- now
		}
	}
}

// Timers returns the number of timers waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers polls (in real time, up to 5s) until at least n timers wait; it reports whether
// they did. Tests use it to advance the clock only once the code under test is waiting.
func (c *Clock) WaitForTimers(n int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c.Timers() >= n {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

type clockTimer struct {
	c    *Clock
	when time.Time
	ch   chan time.Time
	f    func()
}

func (t *clockTimer) C() <-chan time.Time { return t.ch }

func (t *clockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	n := len(t.c.timers)
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *clockTimer) bool { return x == t })
	return len(t.c.timers) < n
}
