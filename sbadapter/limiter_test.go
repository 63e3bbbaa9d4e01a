package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
)

func TestLimiterDoesNotLimitUntilBusy(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	l := NewLimiter(clk)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for range 10_000 {
		require.NoError(t, l.Wait(canceled, 1), "no wait, so the ended ctx does not matter")
	}
	l.Observe(errors.New("some other failure"))
	st := l.Stats()
	require.Zero(t, st.Rate)
	require.Zero(t, st.Busy)
	require.Zero(t, st.Waited)
}

func TestLimiterLearnsTheRateFromServerBusy(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	l := NewLimiter(clk)
	// 600 credits in the first second, then the namespace refuses one.
	for range 10 {
		require.NoError(t, l.Wait(t.Context(), 40))
		l.Charge(20)
		clk.Advance(100 * time.Millisecond)
	}
	l.Busy()
	st := l.Stats()
	require.InDelta(t, LimiterDecrease*600, st.Rate, 1, "the first refusal sets the rate to a share of the credits used in the last second")
	require.Equal(t, uint64(1), st.Decreases)

	// More refusals within the same second are one overdraft: no further cut.
	l.Busy()
	l.Busy()
	require.InDelta(t, LimiterDecrease*600, l.Stats().Rate, 1)
	require.Equal(t, uint64(3), l.Stats().Busy)
	require.Equal(t, uint64(1), l.Stats().Decreases)
}

func TestLimiterDecreaseMeasuresUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// before runs the calls before the refusal on clk.
		before func(clk *clock.Fake, l *Limiter)
		want   float64
	}{
		{
			// A replica that had just started used 150 credits in 300 ms: 500 per second, not 150.
			name: "fresh replica",
			before: func(clk *clock.Fake, l *Limiter) {
				clk.Advance(5 * time.Second)
				for range 30 {
					l.Charge(5)
					clk.Advance(10 * time.Millisecond)
				}
			},
			want: LimiterDecrease * 500,
		},
		{
			// A later cut starts from the allowed rate, not from the use of the last window,
			// which is bursty (a receive charges its whole batch at once).
			name: "later cut",
			before: func(clk *clock.Fake, l *Limiter) {
				l.Charge(1000)
				clk.Advance(LimiterWindow)
				l.Busy()                       // rate 900
				clk.Advance(3 * LimiterWindow) // no call waited: no rise
				for range 10 {
					l.Charge(20)
					clk.Advance(100 * time.Millisecond)
				}
			},
			want: LimiterDecrease * 900,
		},
		{
			name:   "nothing used",
			before: func(*clock.Fake, *Limiter) {},
			want:   LimiterMinRate,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Time{})
			l := NewLimiter(clk)
			tc.before(clk, l)
			l.Busy()
			require.InDelta(t, tc.want, l.Stats().Rate, 1)
		})
	}
}

func TestLimiterHoldsCallsAfterARefusal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	l := NewLimiter(clk)
	l.Charge(1000)
	clk.Advance(LimiterWindow)
	l.Busy() // rate 900, calls held
	seen := map[time.Duration]bool{}
	for range 6 { // 900 ms: within the window, so no further cut of the rate
		clk.Advance(3 * LimiterHold) // the hold is over, the bucket full again
		l.Busy()
		wait := l.reserve(1)
		require.GreaterOrEqual(t, wait, LimiterHold, "every refusal holds the calls")
		require.LessOrEqual(t, wait, 2*LimiterHold+time.Second/900+time.Microsecond)
		seen[wait] = true
	}
	require.InDelta(t, 900, l.Stats().Rate, 0.001)
	require.Greater(t, len(seen), 1, "the hold is jittered")
}

func TestLimiterIncreasesWhileItHoldsCallsBack(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	l := NewLimiter(clk)
	l.Charge(1000)
	clk.Advance(LimiterWindow)
	l.Busy()
	rate := l.Stats().Rate
	require.InDelta(t, 900, rate, 1)

	// Within a window of the refusal: no increase, however much the calls wait.
	for range 9 {
		clk.Advance(100 * time.Millisecond)
		l.reserve(1000)
	}
	require.InDelta(t, rate, l.Stats().Rate, 0.001)

	// Then it rises continuously, by LimiterIncrease of itself plus LimiterMinIncrease per
	// second (from the window's end, 1.1 s here): dr/dt = k·r + a.
	clk.Advance(100 * time.Millisecond)
	l.reserve(1000)
	for range 100 {
		clk.Advance(10 * time.Millisecond)
		l.reserve(1000)
	}
	k, a := LimiterIncrease, LimiterMinIncrease
	require.InDelta(t, (rate+a/k)*math.Exp(k*1.1)-a/k, l.Stats().Rate, 1)

	// Not while nothing waits: idle sessions do not raise it.
	rate = l.Stats().Rate
	clk.Advance(2 * LimiterWindow)
	l.Charge(1)
	clk.Advance(5 * LimiterWindow)
	l.Charge(1)
	require.InDelta(t, rate, l.Stats().Rate, 0.001)
}

// namespace is the Standard tier's throttle as the emulator models it (emulator/pressure.go):
// credits granted at the start of each second, at most one second's worth kept, an operation
// refused while the balance is not positive.
type namespace struct {
	perSecond         int64
	balance, second   int64
	admitted, refused int64
}

func (n *namespace) admit(now time.Time) bool {
	if s := now.Unix(); s > n.second {
		n.balance = min(n.balance+n.perSecond*(s-n.second), n.perSecond)
		n.second = s
	}
	if n.balance <= 0 {
		n.refused++
		return false
	}
	n.balance--
	n.admitted++
	return true
}

// TestLimiterReplicasConvergeOnTheNamespaceRate runs 1 to 8 replicas, each with more demand than
// the namespace allows and a limiter of its own, against one throttled namespace (1 ms steps on
// a fake clock; replicas start 300 ms apart, as they do when they scale out): once they have
// settled, the namespace's credits are nearly all used, refusals are rare, and no replica is
// starved.
func TestLimiterReplicasConvergeOnTheNamespaceRate(t *testing.T) {
	t.Parallel()
	const (
		perSecond = 1000
		demand    = 3 // calls per replica per millisecond when not paced: 3,000 per second
		settle    = 15 * time.Second
		measure   = 30 * time.Second
	)
	for _, replicas := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint(replicas), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Time{})
			ns := &namespace{perSecond: perSecond, balance: perSecond, second: clk.Now().Unix()}
			type replica struct {
				l        *Limiter
				start    time.Time
				next     time.Time // the earliest time of its next call
				admitted int64
			}
			rs := make([]*replica, replicas)
			for i := range rs {
				start := clk.Now().Add(time.Duration(i) * 300 * time.Millisecond)
				rs[i] = &replica{l: NewLimiter(clk), start: start, next: start}
			}
			var admitted0, refused0 int64
			shares0 := make([]int64, replicas)
			end := clk.Now().Add(settle + measure)
			for now := clk.Now(); now.Before(end); now = clk.Now() {
				if now.Equal(end.Add(-measure)) {
					admitted0, refused0 = ns.admitted, ns.refused
					for i, r := range rs {
						shares0[i] = r.admitted
					}
				}
				for _, r := range rs {
					for range demand {
						if now.Before(r.next) {
							break
						}
						if ns.admit(now) {
							r.admitted++
						} else {
							r.l.Busy()
						}
						r.next = now.Add(r.l.reserve(1))
					}
				}
				clk.Advance(time.Millisecond)
			}
			admitted, refused := ns.admitted-admitted0, ns.refused-refused0
			used := float64(admitted) / (perSecond * measure.Seconds())
			t.Logf("%d replicas: %.3f of the credits used, %d refused (%.1f per second)", replicas, used, refused, float64(refused)/measure.Seconds())
			require.GreaterOrEqual(t, used, 0.9, "share of the namespace's credits used")
			require.LessOrEqual(t, float64(refused)/measure.Seconds(), 10.0, "refusals per second")
			fair := float64(admitted) / float64(replicas)
			for i, r := range rs {
				share := float64(r.admitted - shares0[i])
				t.Logf("replica %d: %.2f of a fair share", i, share/fair)
				require.Greater(t, share, 0.25*fair, "replica %d starved", i)
			}
		})
	}
}

func TestLimiterWaitsForCredits(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	l := NewLimiter(clk)
	l.Charge(100)
	l.Busy() // rate 100 credits/s
	done := make(chan error, 1)
	go func() { done <- l.Wait(t.Context(), 50) }()
	select {
	case err := <-done:
		t.Fatalf("returned at once (%v): the bucket was empty", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(500 * time.Millisecond)
	require.NoError(t, <-done)
}

func TestNilLimiter(t *testing.T) {
	t.Parallel()
	var l *Limiter
	require.NoError(t, l.Wait(t.Context(), 1))
	l.Charge(1)
	l.Busy()
	l.Observe(errors.New("x"))
}
