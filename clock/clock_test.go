package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeAdvanceFiresDueTimersInOrder(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	var fired []string
	var seenAt []time.Time
	record := func(name string) func() {
		return func() { fired = append(fired, name); seenAt = append(seenAt, c.Now()) }
	}
	c.AfterFunc(3*time.Second, record("c"))
	c.AfterFunc(time.Second, record("a"))
	c.AfterFunc(2*time.Second, record("b1"))
	c.AfterFunc(2*time.Second, record("b2"))
	c.AfterFunc(10*time.Second, record("late"))

	c.Advance(3 * time.Second)
	require.Equal(t, []string{"a", "b1", "b2", "c"}, fired)
	require.Equal(t, []time.Time{epoch.Add(time.Second), epoch.Add(2 * time.Second), epoch.Add(2 * time.Second), epoch.Add(3 * time.Second)}, seenAt)
	require.Equal(t, epoch.Add(3*time.Second), c.Now())
	require.Equal(t, []time.Time{epoch.Add(10 * time.Second)}, c.Pending())
}

func TestFakeStopPreventsCall(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	called := false
	tm := c.AfterFunc(time.Second, func() { called = true })
	require.True(t, tm.Stop())
	require.False(t, tm.Stop())
	c.Advance(time.Hour)
	require.False(t, called)
}

func TestFakeCallbackMayScheduleMore(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	var ticks []time.Time
	var tick func()
	tick = func() {
		ticks = append(ticks, c.Now())
		c.AfterFunc(time.Second, tick)
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(3500 * time.Millisecond)
	require.Len(t, ticks, 3)
	require.Equal(t, epoch.Add(3*time.Second), ticks[2])
	require.Equal(t, epoch.Add(3500*time.Millisecond), c.Now())
}

func TestFakeSetNeverGoesBack(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	c.Set(epoch.Add(-time.Hour))
	require.Equal(t, epoch, c.Now())
	fired := false
	c.AfterFunc(0, func() { fired = true })
	c.Advance(0)
	require.True(t, fired)
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	c := clock.Real()
	require.WithinDuration(t, time.Now(), c.Now(), time.Second)
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	require.True(t, c.AfterFunc(time.Hour, func() {}).Stop(), "a pending real timer can be stopped")
}

func TestFakeNewTimer(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	first := c.NewTimer(time.Second)
	stopped := c.NewTimer(time.Second)
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop())
	fired := false
	c.AfterFunc(2*time.Second, func() { fired = true })
	require.Len(t, c.Pending(), 2)
	require.True(t, c.WaitForTimers(2))

	c.Advance(time.Second)
	require.Equal(t, epoch.Add(time.Second), <-first.C())
	require.False(t, fired)
	require.NotNil(t, stopped.C(), "a stopped timer keeps its channel")
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	c.Advance(time.Second)
	require.True(t, fired)
	require.Empty(t, c.Pending())
	require.False(t, first.Stop(), "a fired timer is no longer pending")

	now := c.NewTimer(0)
	require.Equal(t, c.Now(), <-now.C(), "a non-positive duration fires at once, as time.NewTimer does")
	require.Empty(t, c.Pending())
}

func TestFakeStartsAtAFixedDate(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), clock.NewFake(time.Time{}).Now())
}

func TestRealNewTimer(t *testing.T) {
	t.Parallel()
	tm := clock.Real().NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	af := clock.Real().AfterFunc(time.Hour, func() {})
	require.Nil(t, af.C(), "AfterFunc timers have no channel")
	require.True(t, af.Stop())
}

func TestSleep(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(epoch)
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), c, time.Minute) }()
	c.WaitForTimers(1)
	c.Advance(time.Minute)
	require.NoError(t, <-done)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- clock.Sleep(ctx, c, time.Minute) }()
	c.WaitForTimers(1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, clock.Sleep(context.Background(), c, 0))
}
