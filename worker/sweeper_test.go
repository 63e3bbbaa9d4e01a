package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

type sweepBundle struct {
	store *memory.Store
	clk   *clock.Fake
	s     *sweeper
	woken []string
	logs  *bytes.Buffer
	now   time.Time
}

func newSweepBundle(t *testing.T, gapTimeout time.Duration, policy sequencer.GapPolicy) *sweepBundle {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() map[string]uint64 { return nil }, func() float64 { return 0 })
	require.NoError(t, err)
	b := &sweepBundle{store: memory.New(), logs: &bytes.Buffer{}, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b.clk = clock.NewFake(b.now)
	b.s = &sweeper{
		attention: listerAttention{lister: b.store}, wake: func(id string) { b.woken = append(b.woken, id) },
		gapTimeout: gapTimeout, gapActs: gapPolicyActs(sequencer.EngineConfig{GapTimeout: gapTimeout, GapPolicy: policy}),
		clock: b.clk, m: m,
		log:    slog.New(slog.NewTextHandler(b.logs, nil)),
		warned: map[string]gapWarned{},
	}
	return b
}

func (b *sweepBundle) save(t *testing.T, id string, st *sequencer.State) {
	t.Helper()
	_, err := b.store.Save(context.Background(), sequencer.SaveParams{Session: storetest.NewSession(id), State: st})
	require.NoError(t, err)
}

func (b *sweepBundle) sweep(t *testing.T) {
	t.Helper()
	b.woken = nil
	b.clk.Set(b.now)
	require.NoError(t, b.s.sweep(context.Background()))
}

func TestSweepWakesStrandedAndCountsParked(t *testing.T) {
	t.Parallel()
	b := newSweepBundle(t, 0, sequencer.GapWait)
	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred[3] = 3, 30
	b.save(t, "stranded", stranded)
	parked := sequencer.NewState()
	parked.Parked = &sequencer.Parked{Sequence: 1, BrokerSequence: 7, Reason: "boom"}
	b.save(t, "parked", parked)
	ended := sequencer.NewState()
	ended.EndedAt = b.now
	ended.Parked = &sequencer.Parked{Sequence: 1}
	b.save(t, "ended", ended)
	blocked := sequencer.NewState()
	blocked.Blocked = &sequencer.Blocked{Sequence: 1, BrokerSequence: 9, Reason: "503", Since: b.now, Times: 4}
	b.save(t, "blocked", blocked)

	b.sweep(t)
	require.Equal(t, []string{"stranded"}, b.woken, "a parked session waits for an operator, a blocked one for the broker")
	require.Equal(t, 1.0, testutil.ToFloat64(b.s.m.sessionsParked), "ended sessions do not count")
	require.Equal(t, 1.0, testutil.ToFloat64(b.s.m.sessionsBlocked))
	require.Equal(t, 1.0, testutil.ToFloat64(b.s.m.sweeperWakes))

	parked.Unpark(false, b.now)
	b.store = memory.New() // the operator resumed; the stranded session ran
	b.s.attention = listerAttention{lister: b.store}
	b.save(t, "parked", parked)
	b.sweep(t)
	require.Empty(t, b.woken)
	require.Zero(t, testutil.ToFloat64(b.s.m.sessionsParked), "the gauge returns to 0")
	require.Zero(t, testutil.ToFloat64(b.s.m.sessionsBlocked))
}

func TestSweepGapTimeoutWakesAndWarns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		gapTimeout time.Duration
		policy     sequencer.GapPolicy
		wantWoken  []string
	}{
		{"skip acts after the timeout", 5 * time.Minute, sequencer.GapSkip, []string{"gap"}},
		{"park acts after the timeout", 5 * time.Minute, sequencer.GapPark, []string{"gap"}},
		{"wait only reports", 5 * time.Minute, sequencer.GapWait, nil},
		{"no timeout: waits forever", 0, sequencer.GapWait, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newSweepBundle(t, tt.gapTimeout, tt.policy)
			gap := sequencer.NewState()
			gap.Next, gap.Deferred[4], gap.GapSince = 2, 40, b.now.Add(-30*time.Second)
			b.save(t, "gap", gap)

			b.sweep(t)
			require.Empty(t, b.woken, "not yet due")
			require.InDelta(t, 30, testutil.ToFloat64(b.s.m.gapOldest), 0.001)
			require.Empty(t, b.logs.String(), "no warning before a minute")

			b.now = b.now.Add(45 * time.Second) // 75s open
			b.sweep(t)
			require.Equal(t, 1, strings.Count(b.logs.String(), "still waiting for a missing sequence"))
			require.Contains(t, b.logs.String(), "session_id=gap expected=2 lowest_waiting=4 waiting=1m15s")
			b.sweep(t)
			require.Equal(t, 1, strings.Count(b.logs.String(), "still waiting"), "one warning per threshold")

			b.now = b.now.Add(10 * time.Minute)
			b.sweep(t)
			require.Equal(t, 2, strings.Count(b.logs.String(), "still waiting"), "again at 10 minutes")
			require.Equal(t, tt.wantWoken, b.woken)
			require.InDelta(t, (10*time.Minute + 75*time.Second).Seconds(), testutil.ToFloat64(b.s.m.gapOldest), 0.001)
		})
	}
}

func TestSweepForgetsClosedGaps(t *testing.T) {
	t.Parallel()
	b := newSweepBundle(t, 0, sequencer.GapWait)
	gap := sequencer.NewState()
	gap.Next, gap.Deferred[4], gap.GapSince = 2, 40, b.now.Add(-2*time.Minute)
	b.save(t, "gap", gap)
	b.sweep(t)
	require.Len(t, b.s.warned, 1)

	b.store = memory.New()
	b.s.attention = listerAttention{lister: b.store}
	b.sweep(t)
	require.Empty(t, b.s.warned)
	require.Zero(t, testutil.ToFloat64(b.s.m.gapOldest), "no gap open")

	// A new gap in the same session warns again.
	gap.GapSince = b.now.Add(-90 * time.Second)
	b.save(t, "gap", gap)
	b.sweep(t)
	require.Equal(t, 2, strings.Count(b.logs.String(), "still waiting"))
}

// A released retry is woken when due: at once by the sweep that finds it due, on time by the
// timer for one not due yet (not at the next sweep), and not woken as stranded before.
func TestSweepWakesReleasedRetriesOnTime(t *testing.T) {
	t.Parallel()
	b := newSweepBundle(t, 0, sequencer.GapWait)
	retry := func(at time.Time) *sequencer.State {
		st := sequencer.NewState()
		st.Next, st.Deferred[3], st.Deferred[4] = 3, 30, 40
		st.Retrying = &sequencer.Retrying{Sequence: 3, BrokerSequence: 30, At: at, Attempts: 2, Reason: "503"}
		return st
	}
	b.save(t, "due", retry(b.now.Add(-time.Second)))
	b.save(t, "later", retry(b.now.Add(20*time.Second)))
	b.save(t, "latest", retry(b.now.Add(45*time.Second)))

	b.sweep(t)
	require.Equal(t, []string{"due"}, b.woken)
	require.Equal(t, 3.0, testutil.ToFloat64(b.s.m.retrying))

	b.woken = nil
	b.clk.Advance(20*time.Second - time.Millisecond)
	require.Empty(t, b.woken, "not before its time")
	b.clk.Advance(time.Millisecond)
	require.Equal(t, []string{"later"}, b.woken, "woken at its time by the timer, between sweeps")
	b.clk.Advance(25 * time.Second)
	require.Equal(t, []string{"later", "latest"}, b.woken, "the timer is armed again for the next one")
	require.Equal(t, 3.0, testutil.ToFloat64(b.s.m.sweeperWakes))

	// Losing the lease forgets the plan: the new holder wakes them.
	b.save(t, "again", retry(b.now.Add(time.Hour)))
	b.sweep(t)
	b.s.planRetries(nil)
	b.woken = nil
	b.clk.Advance(2 * time.Hour)
	require.Empty(t, b.woken)
}

// countingLease is held, and counts how often it was renewed.
type countingLease struct{ holds atomic.Int32 }

func (l *countingLease) Hold(context.Context) (bool, error) { l.holds.Add(1); return true, nil }
func (l *countingLease) Release(context.Context)            {}

// blockingAttention is a sweep that lasts until release is closed.
type blockingAttention struct{ started, release chan struct{} }

func (a blockingAttention) sessions(context.Context, time.Time) ([]sessionstate.Entry, error) {
	close(a.started)
	<-a.release
	return nil, nil
}

func (blockingAttention) reset() {}

// TestSweepKeepsTheLeaseWhileItRuns: a sweep that outlasts intervals renews the lease at each
// one, so that the lease's lock does not run out and pass to another replica mid-sweep.
func TestSweepKeepsTheLeaseWhileItRuns(t *testing.T) {
	t.Parallel()
	b := newSweepBundle(t, 0, sequencer.GapWait)
	l := &countingLease{}
	att := blockingAttention{started: make(chan struct{}), release: make(chan struct{})}
	b.s.lease, b.s.attention, b.s.interval = l, att, 5*time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.s.tick(context.Background())
	}()
	<-att.started
	require.Equal(t, int32(1), l.holds.Load(), "taken at the start of the tick")
	for i := 2; i <= 3; i++ {
		require.True(t, b.clk.WaitForTimers(1), "the renewal waits for the next interval")
		b.clk.Advance(5 * time.Second)
		require.Eventually(t, func() bool { return l.holds.Load() == int32(i) }, 5*time.Second, time.Millisecond,
			"renewed once per interval the sweep lasts")
	}
	close(att.release)
	<-done
	b.clk.Advance(time.Minute)
	require.Equal(t, int32(3), l.holds.Load(), "no renewal once the sweep is over")
}
