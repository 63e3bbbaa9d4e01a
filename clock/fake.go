package clock

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// Fake is a clock for tests that moves only when Advance or Set is called. The zero value is
// not usable; call NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading start (2026-01-01 00:00 UTC when start is zero).
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Fake{now: start}
}

type fakeTimer struct {
	c    *Fake
	when time.Time
	seq  uint64 // creation order breaks ties between timers due at the same instant
	// Exactly one of f (AfterFunc) and ch (NewTimer) is set.
	f     func()
	ch    chan time.Time
	index int // in c.timers; -1 once fired or stopped
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer whose channel receives the time once the clock has been advanced by
// at least d. A non-positive d fires at once, as time.NewTimer does.
func (c *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), index: -1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.add(t, d)
	return t
}

// AfterFunc registers f to run when the clock has been advanced by at least d. A non-positive d
// runs f at the next Advance (even Advance(0)), never inside AfterFunc: callers may hold locks
// that f takes.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{c: c, f: f}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(t, d)
	return t
}

func (c *Fake) add(t *fakeTimer, d time.Duration) {
	c.seq++
	t.when, t.seq = c.now.Add(d), c.seq
	heap.Push(&c.timers, t)
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

// Advance moves the clock forward by d, firing every timer that falls due, in order of due time
// (creation order among equals). While a timer fires, Now reports its due time. Timers made by
// an AfterFunc callback fire in the same call if they fall due by the target. Callbacks run on
// the caller's goroutine with no clock lock held.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.advanceTo(target)
}

// Set moves the clock to t (never backwards), firing due timers as Advance does.
func (c *Fake) Set(t time.Time) { c.advanceTo(t) }

func (c *Fake) advanceTo(target time.Time) {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(target) {
			if target.After(c.now) {
				c.now = target
			}
			c.mu.Unlock()
			return
		}
		next := heap.Pop(&c.timers).(*fakeTimer)
		if next.when.After(c.now) {
			c.now = next.when
		}
		now := c.now
		c.mu.Unlock()
		if next.f != nil {
			next.f()
		} else {
			next.ch <- now // buffered, and a timer fires once
		}
	}
}

// Pending returns the due times of the timers not yet fired, earliest first.
func (c *Fake) Pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.when
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// WaitForTimers polls (in real time, up to 5s) until at least n timers are pending and reports
// whether they were. Tests use it to advance the clock only once the code under test waits.
func (c *Fake) WaitForTimers(n int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		pending := len(c.timers)
		c.mu.Unlock()
		if pending >= n {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// timerHeap orders timers by due time, then creation.
type timerHeap []*fakeTimer

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}

func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) Push(x any) {
	t := x.(*fakeTimer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}
