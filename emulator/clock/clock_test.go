package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/emulator/clock"
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
