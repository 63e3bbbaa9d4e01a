package sbadapter

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// Limiter paces the broker calls of a Source's sessions so that a throttled namespace spends its
// credits on messages rather than on refusals. It learns the namespace's rate from server-busy
// answers alone, additive increase, multiplicative decrease (AIMD), so that replicas sharing a
// namespace converge to fair shares without talking to each other.
//
// The namespace (Service Bus Standard) grants its credits at the start of each period of about
// a second and refuses every operation once they are spent, until the next period. Two things
// follow. Using all the credits means running close to the limit, so some refusals are the price
// of probing for it; and a refusal says "nothing more this period", so every call made until the
// refill is refused too. What a refusal costs depends on the call: a state operation is refused
// visibly and retried at our pace, but a refused settlement stalls its session and leaves the
// message locked (see the package documentation, "Throttling"). So the Limiter:
//
//   - does not limit at all until the first server-busy answer (an unthrottled namespace never
//     pays for it);
//   - on every server-busy answer holds all calls for LimiterHold plus a random share of it of
//     its own (the rest of the period would refuse them too; the jitter spreads the replicas'
//     restarts so that they do not all spend the refill at once);
//   - at most once per LimiterWindow, and only if a call was admitted since the last cut, cuts
//     the rate to LimiterDecrease of itself. While the namespace refuses everything (its
//     balance in debt after a publisher's large batch) refusals say nothing of the rate: in the
//     bench every replica was cut again each second of such a debt, to a fraction of its share.
//     The first cut starts from the credits actually used over the last window, measured over
//     the time since its first call if that is shorter, and from at least LimiterStartRate, so
//     that a replica refused at its first calls is not cut to nothing (in the bench, one such
//     replica held its 4 sessions at 5-12 credits/s for 16 s after the others had finished).
//     (Later cuts from the use of the last window were tried: with 4 and 8 replicas the bench
//     spent less of the credits than before; a replica's use over a window is bursty, a
//     receive charges its batch at once.)
//   - while calls wait for credits and no refusal came for a LimiterWindow, raises the rate
//     continuously by LimiterIncrease of itself plus LimiterMinIncrease per second: slowly, so
//     that the probing that ends in a refusal comes seldom, and without steps, so that replicas
//     that were cut together do not all raise their rate at the same instant. After LimiterQuiet
//     without a refusal it rises by LimiterQuietIncrease per second instead: the namespace has
//     credits to spare, as when the other replicas' sessions ended and the last ones are this
//     replica's. The rise is the same for every replica, whatever its rate, so that they still
//     converge to fair shares. "Calls wait" counts every call until its wait ends, however
//     long ago it was reserved: after a receive charged a batch at a low rate, the next call
//     waits for seconds, and that low rate is what must rise.
//
// Calls wait for credits in a token bucket that holds at most LimiterBurst worth of the rate. A
// call costs one credit before it is made; a receive also owes one per message it returned
// (deliveries are never refused, but they use up the balance the other calls need). The costs
// are the namespace's: one per message operation. Safe for concurrent use.
type Limiter struct {
	clk clock.Clock

	mu  sync.Mutex
	rnd *rand.Rand
	// rate is the allowed credits per second (0: not limiting yet).
	rate   float64
	tokens float64
	last   time.Time
	// first is the first call's time (zero: none yet). used counts the credits of the current
	// window (since windowStart), prev those of the one before.
	first       time.Time
	windowStart time.Time
	used, prev  float64
	// lastBusy is the last server-busy answer, lastDecrease the last cut, lastWait the last
	// call that had to wait for credits.
	lastBusy, lastDecrease, lastWait time.Time
	// waitUntil is when the last call that waited for credits may go.
	waitUntil time.Time
	// admitted counts the calls answered without server-busy since the last cut.
	admitted uint64
	stats    LimiterStats
}

// The Limiter's constants. The Standard tier grants credits per second, so one second is the
// window of a decrease and of the usage it is measured on.
const (
	LimiterWindow   = time.Second
	LimiterDecrease = 0.9
	// LimiterIncrease (per second) takes a rate cut by LimiterDecrease back to where it was in
	// about 3.5 s: with a refusal at the end of each such climb, the namespace's credits are
	// used at 95 % on average and refusals come once every few seconds, not every other one.
	LimiterIncrease    = 0.01
	LimiterMinIncrease = 20.0
	LimiterMinRate     = 5.0
	// LimiterStartRate is the least rate a first cut sets: a replica refused in its first
	// moments (the namespace spent by the others) used too little to measure a rate from; a
	// tenth of a Standard namespace.
	LimiterStartRate = 100.0
	// LimiterQuiet is how long without a refusal, while calls wait, makes the rate rise by
	// LimiterQuietIncrease credits/s per second instead: the namespace has credits to spare. In
	// the simulation of the bench's cell (TestLimiterCellUsesTheCredits), 2.5 s and 3 s left 4
	// replicas at 0.83-0.89 of the credits, and 500 per second at 0.88-0.91; this pair costs
	// more refusals once the replicas have settled (TestLimiterReplicasConvergeOnTheNamespaceRate:
	// up to 14 per second with 4 replicas and 21 with 8, against 2 and 7 before it).
	LimiterQuiet         = 2 * time.Second
	LimiterQuietIncrease = 1000.0
	LimiterBurst         = 0.1 // seconds of the rate
	// LimiterHold is how long every call waits after a server-busy answer, at least (and at
	// most twice that). The namespace refills within a second; without a pause every call until
	// then is refused too, a long one leaves the refill unused. In a simulation of the
	// emulator's throttle (TestLimiterReplicasConvergeOnTheNamespaceRate), no hold refused 3-4×
	// more calls than 50 ms, and 200 ms left about 5 % more of the credits unused.
	LimiterHold = 50 * time.Millisecond
)

// LimiterStats counts what a Limiter did.
type LimiterStats struct {
	// Busy counts the server-busy answers observed, Decreases the rate cuts they caused.
	Busy, Decreases uint64
	// Waited is the total time calls waited for credits.
	Waited time.Duration
	// Used is the credits the calls and receives took (refused calls included).
	Used float64
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
	return &Limiter{clk: clk, last: now, windowStart: now, rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// Stats returns what l did so far.
func (l *Limiter) Stats() LimiterStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	st.Rate = l.rate
	return st
}

// busyCount is the number of server-busy answers observed so far (0 for a nil Limiter); a
// settlement compares it before and after to tell whether the namespace refused calls meanwhile.
func (l *Limiter) busyCount() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats.Busy
}

// Wait takes cost credits, waiting while the bucket is short of them; it returns ctx's error if
// ctx ends first (the credits stay taken: the caller gives up the call).
func (l *Limiter) Wait(ctx context.Context, cost float64) error {
	if l == nil {
		return nil
	}
	wait := l.reserve(cost)
	if wait <= 0 {
		return nil
	}
	return clock.Sleep(ctx, l.clk, wait)
}

// reserve takes cost credits and returns how long the caller must wait before its call.
func (l *Limiter) reserve(cost float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	l.advance(now)
	l.count(now, cost)
	if l.rate == 0 {
		return 0
	}
	l.tokens -= cost
	if l.tokens >= 0 {
		return 0
	}
	wait := time.Duration(-l.tokens / l.rate * float64(time.Second))
	l.stats.Waited += wait
	l.lastWait = now
	if until := now.Add(wait); until.After(l.waitUntil) {
		l.waitUntil = until
	}
	return wait
}

// Charge takes cost credits without waiting (the messages a receive returned); the next calls
// wait for them.
func (l *Limiter) Charge(cost float64) {
	if l == nil || cost <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	l.advance(now)
	l.count(now, cost)
	if l.rate > 0 {
		l.tokens -= cost
	}
}

// Observe learns from the outcome of a call: err a server-busy answer (IsServerBusy) cuts the
// rate, anything else is no news.
func (l *Limiter) Observe(err error) {
	if l == nil {
		return
	}
	if err == nil {
		l.mu.Lock()
		l.admitted++
		l.mu.Unlock()
		return
	}
	if IsServerBusy(err) {
		l.Busy()
	}
}

// Busy records a server-busy answer: it holds the calls and, once per window, cuts the rate.
func (l *Limiter) Busy() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	l.advance(now)
	l.stats.Busy++
	l.lastBusy = now
	// A cut needs a call admitted since the last one: while the namespace refuses everything
	// (its balance in debt after a large batch, or in the hold), the refusals say nothing about
	// the rate the replica was just allowed.
	if l.rate == 0 || (now.Sub(l.lastDecrease) >= LimiterWindow && l.admitted > 0) {
		l.lastDecrease = now
		l.admitted = 0
		l.stats.Decreases++
		// The credits used over the last window (the previous one's share and the current
		// one), per second of the time they were used in, are what the namespace just refused
		// to exceed, together with the other replicas' use.
		frac := min(float64(now.Sub(l.windowStart))/float64(LimiterWindow), 1)
		used := l.used + l.prev*(1-frac)
		span := LimiterWindow
		if !l.first.IsZero() && now.Sub(l.first) < span {
			span = now.Sub(l.first)
		}
		measured := used / max(span.Seconds(), 0.2) // a burst in the first moments is no rate
		if l.rate > 0 {
			// Later cuts start from the allowed rate: a replica's use over one window is too
			// bursty (a receive charges a whole batch at once) to start from.
			measured = l.rate
		}
		if l.rate == 0 {
			// A replica refused before it ran for long (while the others, or the publisher,
			// had spent the namespace's credits) measured little of anything.
			measured = max(measured, LimiterStartRate/LimiterDecrease)
		}
		l.rate = max(LimiterMinRate, LimiterDecrease*measured)
	}
	hold := LimiterHold + time.Duration(l.rnd.Int64N(int64(LimiterHold)+1))
	l.tokens = min(l.tokens, -hold.Seconds()*l.rate)
}

// advance refills the bucket, rolls the window and raises the rate up to now. Called with mu
// held.
func (l *Limiter) advance(now time.Time) {
	dt := now.Sub(l.last).Seconds()
	if dt <= 0 {
		return
	}
	since := l.last
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
	}
	if l.rate == 0 {
		return
	}
	// Raise the rate only while it is what holds the calls back (a replica whose sessions are
	// idle would otherwise reach any rate and spend it at once when they wake) and no refusal
	// came for a window.
	// Calls wait until waitUntil, however long ago the last of them was reserved: after a
	// receive that charged a batch, the next calls wait for seconds at a low rate, and that low
	// rate is what must rise.
	waiting := since.Before(l.waitUntil) || now.Sub(l.lastWait) < LimiterWindow
	switch quiet := now.Sub(l.lastBusy); {
	case !waiting || quiet < LimiterWindow:
	case quiet < LimiterQuiet:
		l.rate += dt * (LimiterIncrease*l.rate + LimiterMinIncrease)
	default:
		// No refusal for LimiterQuiet although calls wait: the namespace has credits to spare
		// (the other replicas' sessions ended, or they hold back); find them fast.
		// The same for every replica, whatever its rate, so that the replicas still converge
		// to fair shares (a rise in proportion to the rate would keep their ratios).
		l.rate += dt * LimiterQuietIncrease
	}
	l.tokens = min(l.tokens+dt*l.rate, LimiterBurst*l.rate)
}

// count adds cost to the usage of the current window. Called with mu held.
func (l *Limiter) count(now time.Time, cost float64) {
	if l.first.IsZero() {
		l.first = now
	}
	l.used += cost
	l.stats.Used += cost
}
