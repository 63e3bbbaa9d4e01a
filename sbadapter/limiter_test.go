package sbadapter

import (
	"context"
	"errors"
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
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.Wait(t.Context(), 40))
		l.Charge(20)
	}
	l.Busy()
	st := l.Stats()
	require.InDelta(t, 600, st.Rate, 1, "the first refusal sets the rate to the credits used in the last second")
	require.Equal(t, uint64(1), st.Decreases)

	// More refusals within the same second are one overdraft: no further cut.
	l.Busy()
	l.Busy()
	require.InDelta(t, 600, l.Stats().Rate, 1)
	require.Equal(t, uint64(3), l.Stats().Busy)

	// Now calls wait for credits: the bucket is empty after the refusal.
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.Error(t, l.Wait(canceled, 60), "60 credits at 600/s: a wait of 100ms, and ctx ended")
	require.InDelta(t, 100*time.Millisecond, l.Stats().Waited, float64(time.Millisecond))

	// A refusal a second later cuts the rate multiplicatively (after the second's increase).
	clk.Advance(LimiterWindow)
	l.Busy()
	require.InDelta(t, (600+max(LimiterIncrease*600, LimiterMinIncrease))*LimiterDecrease, l.Stats().Rate, 1)

	// Each second without one raises it additively.
	before := l.Stats().Rate
	clk.Advance(LimiterWindow + time.Millisecond)
	l.Charge(1)
	require.InDelta(t, before+max(LimiterIncrease*before, LimiterMinIncrease), l.Stats().Rate, 1)
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
