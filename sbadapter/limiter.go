package sbadapter

import (
	"context"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// Limiter paces the broker calls of a Source's sessions so that a throttled namespace spends its
// credits on messages rather than on refusals. It learns the namespace's rate from server-busy
// answers alone, additive increase, multiplicative decrease (AIMD), so that replicas sharing a
// namespace converge to fair shares without talking to each other:
//
//   - until the first server-busy answer it does not limit at all (an unthrottled namespace
//     never pays for it);
//   - a server-busy answer multiplies the rate by LimiterDecrease (the first one sets it to the
//     credits used in the last LimiterWindow), at most once per LimiterWindow (one overdraft
//     refuses many calls at once);
//   - every LimiterWindow without one raises the rate by LimiterIncrease of itself, at least
//     LimiterMinIncrease credits per second.
//
// Calls wait for credits in a token bucket that holds at most LimiterBurst worth of the rate. A
// call costs one credit before it is made; a receive also owes one per message it returned
// (deliveries are never refused, but they use up the balance the other calls need). The costs
// are the namespace's: one per message operation. Safe for concurrent use.
type Limiter struct {
	clk clock.Clock

	mu sync.Mutex
	// rate is the allowed credits per second (0: not limiting yet).
	rate   float64
	tokens float64
	last   time.Time
	// used counts the credits of the current window (since windowStart), prev those of the one
	// before; lastBusy is the last decrease.
	windowStart time.Time
	used, prev  float64
	lastBusy    time.Time
	stats       LimiterStats
}

// The Limiter's constants: the Standard tier accounts credits per second, so one second is the
// window in which a decrease is made once and the bucket's burst.
const (
	LimiterWindow      = time.Second
	LimiterDecrease    = 0.9
	LimiterIncrease    = 0.1
	LimiterMinIncrease = 20.0
	LimiterMinRate     = 5.0
	LimiterBurst       = 0.1 // seconds of the rate
)

// LimiterStats counts what a Limiter did.
type LimiterStats struct {
	// Busy counts the server-busy answers observed, Decreases the rate cuts they caused.
	Busy, Decreases uint64
	// Waited is the total time calls waited for credits.
	Waited time.Duration
	// Rate is the current rate in credits per second (0: not limiting).
	Rate float64
}

// NewLimiter returns a Limiter that does not limit until the first server-busy answer; clk nil
// means the real clock.
func NewLimiter(clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real()
	}
	now := clk.Now()
	return &Limiter{clk: clk, last: now, windowStart: now}
}

// Stats returns what l did so far.
func (l *Limiter) Stats() LimiterStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	st.Rate = l.rate
	return st
}

// Wait takes cost credits, waiting while the bucket is short of them; it returns ctx's error if
// ctx ends first (the credits stay taken: the caller gives up the call).
func (l *Limiter) Wait(ctx context.Context, cost float64) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	now := l.clk.Now()
	l.advance(now)
	l.count(cost)
	if l.rate == 0 {
		l.mu.Unlock()
		return nil
	}
	l.tokens -= cost
	var wait time.Duration
	if l.tokens < 0 {
		wait = time.Duration(-l.tokens / l.rate * float64(time.Second))
		l.stats.Waited += wait
	}
	l.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	return clock.Sleep(ctx, l.clk, wait)
}

// Charge takes cost credits without waiting (the messages a receive returned); the next calls
// wait for them.
func (l *Limiter) Charge(cost float64) {
	if l == nil || cost <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advance(l.clk.Now())
	l.count(cost)
	if l.rate > 0 {
		l.tokens -= cost
	}
}

// Observe learns from the outcome of a call: err a server-busy answer (IsServerBusy) cuts the
// rate, anything else is no news.
func (l *Limiter) Observe(err error) {
	if l == nil || err == nil || !IsServerBusy(err) {
		return
	}
	l.Busy()
}

// Busy records a server-busy answer.
func (l *Limiter) Busy() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	l.advance(now)
	l.stats.Busy++
	if !l.lastBusy.IsZero() && now.Sub(l.lastBusy) < LimiterWindow {
		return
	}
	l.lastBusy = now
	l.stats.Decreases++
	if l.rate > 0 {
		l.rate = max(LimiterMinRate, LimiterDecrease*l.rate)
	} else {
		// The first one: start from the credits used over the last window (the previous one
		// whole, and the current one's share), which the namespace just refused to exceed.
		frac := float64(now.Sub(l.windowStart)) / float64(LimiterWindow)
		used := l.used + l.prev*(1-min(frac, 1))
		l.rate = max(LimiterMinRate, used)
	}
	l.tokens = min(l.tokens, 0)
}

// advance refills the bucket and rolls the window and the increase up to now. Called with mu
// held.
func (l *Limiter) advance(now time.Time) {
	dt := now.Sub(l.last).Seconds()
	if dt <= 0 {
		return
	}
	l.last = now
	for now.Sub(l.windowStart) >= LimiterWindow {
		l.prev, l.used = l.used, 0
		if now.Sub(l.windowStart) >= 2*LimiterWindow {
			l.prev = 0
		}
		l.windowStart = l.windowStart.Add(LimiterWindow)
		if l.windowStart.Before(now.Add(-LimiterWindow)) {
			l.windowStart = now
		}
		if l.rate > 0 && now.Sub(l.lastBusy) >= LimiterWindow {
			l.rate += max(LimiterIncrease*l.rate, LimiterMinIncrease)
		}
	}
	if l.rate > 0 {
		l.tokens = min(l.tokens+dt*l.rate, LimiterBurst*l.rate)
	}
}

func (l *Limiter) count(cost float64) { l.used += cost }
