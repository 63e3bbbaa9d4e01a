package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

func TestEngineEarlyMessageNeverHandledBeforePredecessors(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", []int64{2, 3}, 0)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Empty(t, b.got("s1"))
	st, _ := b.store.Get("s1")
	require.Len(t, st.Deferred, 2, "still early at release: deferred and recorded")
	require.False(t, st.GapSince.IsZero(), "the gap is recorded")
	require.False(t, st.DueDeferred())
	_, deferred := b.broker.Pending("s1")
	require.Equal(t, 2, deferred)

	b.clock.Advance(time.Minute)
	publish(b, "s1", []int64{1}, 0)
	b.runAll(t)
	require.Equal(t, seqs(1, 3), b.got("s1"))
	require.Zero(t, b.broker.Len())
	require.Equal(t, time.Minute, b.engine.Stats().GapWait)
	st, _ = b.store.Get("s1")
	require.Empty(t, st.Deferred)
	require.True(t, st.GapSince.IsZero())
}

func TestEngineDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	// 1, then copies of 3 (held), then 1 again (late), then 2.
	publish(b, "s1", []int64{1, 3, 3, 1, 2}, 3)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, seqs(1, 3), b.got("s1"))
	require.Zero(t, b.broker.Len(), "duplicates are completed")
	require.Empty(t, b.broker.DeadLetters())
	require.Equal(t, uint64(2), b.engine.Stats().Duplicates)
	st, _ := b.store.Get("s1")
	require.Equal(t, uint64(2), st.Counters.Duplicates)

	// A copy of a deferred message is a duplicate too.
	b2 := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b2, "s", []int64{2}, 0)
	b2.runAll(t)
	publish(b2, "s", []int64{2, 1}, 0)
	b2.runAll(t)
	require.Equal(t, seqs(1, 2), b2.got("s"))
	require.Zero(t, b2.broker.Len())
}

func TestEngineInvalidMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		props map[string]any
		desc  string
	}{
		{"missing", map[string]any{}, `application property "Sequence" is missing`},
		{"not an integer", map[string]any{"Sequence": "abc"}, `application property "Sequence" = "abc" (string) is not an integer`},
		{"float", map[string]any{"Sequence": 1.5}, `application property "Sequence" = 1.5 (float64) is not an integer`},
		{"zero", map[string]any{"Sequence": int32(0)}, `application property "Sequence" = 0 is below the first sequence 1`},
		{"negative string", map[string]any{"Sequence": "-4"}, `application property "Sequence" = -4 is below the first sequence 1`},
		{"too far ahead", map[string]any{"Sequence": uint64(500)}, `application property "Sequence" = 500 is 499 ahead of the next expected sequence 1 (max gap 100)`},
		{"huge unsigned", map[string]any{"Sequence": uint64(1 << 63)}, `application property "Sequence" = 9223372036854775808 (uint64) is not an integer`},
		{"bad last mark", map[string]any{"Sequence": 1, "IsLast": "yes"}, `application property "IsLast" = "yes" (string) is neither a bool nor "true"/"false"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, MaxGap: 100})
			b.broker.Publish("s1", tt.props, nil)
			publish(b, "s1", []int64{1}, 0) // the session is not blocked
			b.runAll(t)
			require.Equal(t, []int64{1}, b.got("s1"))
			dl := b.broker.DeadLetters()
			require.Len(t, dl, 1)
			require.Equal(t, sequencer.ReasonInvalidSequence, dl[0].Reason)
			require.Equal(t, tt.desc, dl[0].Description)
			require.Zero(t, b.broker.Len())
		})
	}
}

func TestEngineSequenceTypesAndLastMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, SequenceProperty: "seq", LastProperty: "end"})
	for i, v := range []any{int8(1), int16(2), int32(3), int64(4), uint8(5), uint16(6), uint32(7), uint(8), 9, "10"} {
		props := map[string]any{"seq": v, "end": "false"}
		if i == 9 {
			props["end"] = "TRUE"
		}
		b.broker.Publish("s1", props, nil)
	}
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, seqs(1, 10), b.got("s1"))
}

func TestEngineMessagesAfterLastAreInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", []int64{4, 3}, 0)
	b.broker.PublishSeq("s1", 2, true) // the last mark arrives after 3 and 4
	publish(b, "s1", []int64{1}, 0)
	b.runAll(t)
	require.Equal(t, seqs(1, 2), b.got("s1"))
	dl := b.broker.DeadLetters()
	require.Len(t, dl, 2)
	for _, d := range dl {
		require.Equal(t, sequencer.ReasonInvalidSequence, d.Reason)
		require.Contains(t, d.Description, "after the last sequence 2")
	}
	require.Zero(t, b.broker.Len())
}

func TestEngineRetriesWithBackoffThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{
		Pipelining:        sequencer.Awaited,
		Retry:             sequencer.RetryPolicy{Attempts: 4, Base: 10 * time.Second, Cap: 15 * time.Second},
		LockRenewInterval: 20 * time.Second,
	})
	calls := 0
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 1 {
			calls++
			if calls < 4 {
				return errors.New("transient")
			}
		}
		return nil
	})
	publish(b, "s1", []int64{1, 2}, 0)
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	done := make(chan sequencer.Outcome)
	go func() {
		out, _ := b.engine.RunSession(t.Context(), sess, nil)
		done <- out
	}()
	// Waits of 10s, 15s (capped), 15s: the lock (60s) is renewed every 20s meanwhile.
	for _, d := range []time.Duration{10 * time.Second, 15 * time.Second, 15 * time.Second} {
		require.True(t, b.clock.WaitForTimers(2), "renewal and backoff timers")
		require.Empty(t, b.got("s1"), "no later message is handled meanwhile")
		b.clock.Advance(d)
	}
	require.Equal(t, sequencer.OutcomeIdle, <-done)
	require.Equal(t, seqs(1, 2), b.got("s1"))
	require.Equal(t, 4, calls)
	require.Equal(t, uint64(3), b.engine.Stats().Retries)
	require.GreaterOrEqual(t, b.engine.Stats().BrokerCalls["renew_lock"], uint64(1), "the lock is renewed while retrying")
	require.Empty(t, b.broker.DeadLetters())
}

// During a retry wait the engine makes no call that would show a lost session lock. If another
// holder wrote the state meanwhile (the lock was lost and taken again behind the engine's back,
// as the SDK's link recovery can do), the engine stops instead of handing the message over again
// after the other holder's progress.
func TestEngineRetryWaitChecksTheStoredStateFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{
		Pipelining:        sequencer.Awaited,
		Retry:             sequencer.RetryPolicy{Attempts: 3, Base: 10 * time.Second},
		LockRenewInterval: time.Hour,
	})
	var calls atomic.Int32
	b.setFail(func(m *sequencer.Message) error {
		calls.Add(1)
		return errors.New("transient")
	})
	publish(b, "s1", []int64{1, 2}, 0)
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.engine.RunSession(ctx, sess, nil)
		done <- err
	}()
	require.True(t, b.clock.WaitForTimers(2), "renewal and backoff timers")
	other := sequencer.NewState()
	other.Next, other.EndedAt = 3, b.clock.Now() // another holder ended the session meanwhile
	b.store.Put("s1", other)
	b.clock.Advance(10 * time.Second)
	select {
	case err := <-done:
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	case <-time.After(10 * time.Second):
		t.Fatalf("the engine went on after another holder's progress (handler calls: %d)", calls.Load())
	}
	require.Equal(t, int32(1), calls.Load(), "the handler is not called again after the other holder's progress")
	st, _ := b.store.Get("s1")
	require.False(t, st.EndedAt.IsZero(), "the other holder's state stands")
}

func TestEnginePoisonPark(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("resume skip=%v", skip), func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
			b.setFail(func(m *sequencer.Message) error {
				if m.Sequence == 2 && m.DeliveryCount < 100 && m.MessageID != "replayed" {
					return errors.New("boom")
				}
				return nil
			})
			publish(b, "s1", []int64{1, 2, 3}, 4)
			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeParked, out)
			require.Equal(t, []int64{1}, b.got("s1"))
			dl := b.broker.DeadLetters()
			require.Len(t, dl, 1)
			require.Equal(t, sequencer.ReasonHandlerFailed, dl[0].Reason)
			require.Equal(t, "boom", dl[0].Description)
			st, _ := b.store.Get("s1")
			require.NotNil(t, st.Parked)
			require.Equal(t, int64(2), st.Parked.Sequence)
			require.Equal(t, "boom", st.Parked.Reason)
			require.False(t, st.DueDeferred(), "a parked session waits for an operator")

			// Later messages are deferred, not handled, while parked.
			publish(b, "s1", []int64{4}, 4)
			require.Equal(t, []sequencer.Outcome{sequencer.OutcomeParked}, b.runAll(t))
			require.Equal(t, []int64{1}, b.got("s1"))
			_, deferred := b.broker.Pending("s1")
			require.Equal(t, 2, deferred, "nothing is lost")

			if !skip {
				// The operator replays the dead-lettered message, then resumes.
				b.broker.Publish("s1", dl[0].Message.Properties, dl[0].Message.Body)
				b.runAll(t)
				require.Equal(t, []int64{1}, b.got("s1"), "a replay before resume is deferred")
				b.setFail(nil)
			}
			out = b.runByID(t, "s1", &sequencer.RunOptions{Resume: &sequencer.ResumeOptions{Skip: skip}})
			require.Equal(t, sequencer.OutcomeEnded, out)
			if skip {
				require.Equal(t, []int64{1, 3, 4}, b.got("s1"))
			} else {
				require.Equal(t, seqs(1, 4), b.got("s1"))
			}
			require.Zero(t, b.broker.Len())
		})
	}
}

func TestEnginePoisonSkip(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonSkip})
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 2 {
			return errors.New("boom")
		}
		return nil
	})
	publish(b, "s1", []int64{3, 2, 1}, 3)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, []int64{1, 3}, b.got("s1"))
	dl := b.broker.DeadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, sequencer.ReasonHandlerFailed, dl[0].Reason)
	require.Zero(t, b.broker.Len())
	require.Equal(t, uint64(1), b.engine.Stats().Skipped)
}

func TestEnginePoisonBlockEndsByMaxDeliveryCount(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonBlock})
	b.setFail(func(*sequencer.Message) error { return errors.New("boom") })
	publish(b, "s1", []int64{1}, 0)
	outs := b.runAll(t)
	require.Len(t, outs, 10, "the broker's max delivery count (10) ends it")
	require.Equal(t, sequencer.OutcomeBlocked, outs[0])
	dl := b.broker.DeadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, "MaxDeliveryCountExceeded", dl[0].Reason)
	st, _ := b.store.Get("s1")
	require.Equal(t, int64(1), st.Next)
}

func TestEngineHandlerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonSkip})
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 1 {
			panic("kaboom")
		}
		return nil
	})
	publish(b, "s1", []int64{1, 2}, 0)
	b.runAll(t)
	require.Equal(t, []int64{2}, b.got("s1"))
	require.Equal(t, "handler panic: kaboom", b.broker.DeadLetters()[0].Description)
}

func TestEngineGapTimeoutSkipsMissingSequence(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, GapTimeout: 5 * time.Minute, GapPolicy: sequencer.GapSkip})
	publish(b, "s1", []int64{1, 3, 4}, 0)
	require.Equal(t, []sequencer.Outcome{sequencer.OutcomeIdle}, b.runAll(t))
	require.Equal(t, []int64{1}, b.got("s1"))
	st, _ := b.store.Get("s1")
	require.True(t, st.GapSince.Equal(b.clock.Now()))
	require.False(t, st.GapExpired(b.clock.Now(), 5*time.Minute))

	b.clock.Advance(5 * time.Minute)
	st, _ = b.store.Get("s1")
	require.True(t, st.GapExpired(b.clock.Now(), 5*time.Minute))
	out := b.runByID(t, "s1", nil) // a sweeper wakes it
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Equal(t, []int64{1, 3, 4}, b.got("s1"))
	require.Equal(t, uint64(1), b.engine.Stats().Skipped)
	require.Equal(t, 5*time.Minute, b.engine.Stats().GapWait)
	require.Zero(t, b.broker.Len())
}

func TestEngineLockLostStopsAllWork(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, LockRenewInterval: 10 * time.Second})
	publish(b, "s1", []int64{1, 2}, 0)
	started := make(chan struct{})
	var handlerCtxErr error
	e2, err := sequencer.NewEngine(sequencer.EngineConfig{Pipelining: sequencer.Awaited, LockRenewInterval: 10 * time.Second}, sequencer.EngineDeps{
		Store: b.store.Client(b.proc),
		Handler: sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			close(started)
			<-ctx.Done()
			handlerCtxErr = context.Cause(ctx)
			return ctx.Err()
		}),
		Clock: b.clock,
	})
	require.NoError(t, err)
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	done := make(chan sequencer.Outcome)
	go func() {
		out, _ := e2.RunSession(t.Context(), sess, nil)
		done <- out
	}()
	<-started
	b.broker.ExpireLocks() // someone else's view: the lock is gone
	require.True(t, b.clock.WaitForTimers(1))
	b.clock.Advance(10 * time.Second) // the renewal finds out
	require.Equal(t, sequencer.OutcomeLockLost, <-done)
	require.ErrorIs(t, handlerCtxErr, sequencer.ErrLockLost)
	calls := b.broker.Calls()
	require.Zero(t, calls["complete"]+calls["defer"]+calls["dead_letter"], "nothing settled")
	st, _ := b.store.Get("s1")
	if st != nil { // at most the record of the run about to be handled
		require.Equal(t, int64(1), st.Next, "no progress saved")
	}
	active, _ := b.broker.Pending("s1")
	require.Equal(t, 2, active, "the session is picked up again later")
}

func TestEngineGracefulStopDefersHeldMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", []int64{3, 1, 2}, 0)
	stop, cancel := context.WithCancel(t.Context())
	b.setFail(func(m *sequencer.Message) error {
		cancel() // the stop arrives while message 1 is in hand
		return nil
	})
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	out, err := b.engine.RunSession(t.Context(), sess, &sequencer.RunOptions{Stop: stop})
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeStopped, out)
	require.Equal(t, []int64{1}, b.got("s1"))
	st, _ := b.store.Get("s1")
	require.Equal(t, int64(2), st.Next)
	require.Equal(t, map[int64]int64{3: 1}, st.Deferred, "the held message is deferred")
	active, deferred := b.broker.Pending("s1")
	require.Equal(t, []int{1, 1}, []int{active, deferred}, "the message not yet looked at returns unsettled")
}

func TestEngineStoreAndBrokerErrorsReleaseTheSession(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"load", "save", "receive", "complete", "defer", "receive_deferred"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, WindowMessages: sequencer.NoWindow, ReceiveBatch: 1})
			failed := false
			b.proc.Hook = func(c sequencertest.Call) error {
				if c.Op == op && c.Phase == sequencertest.Before && !failed {
					failed = true
					return sequencertest.ErrInjected
				}
				return nil
			}
			publish(b, "s1", []int64{2, 1}, 2)
			sess, err := b.client.AcceptNext(t.Context())
			require.NoError(t, err)
			out, err := b.engine.RunSession(t.Context(), sess, nil)
			require.ErrorIs(t, err, sequencertest.ErrInjected)
			require.Equal(t, sequencer.OutcomeFailed, out)
			b.runAll(t)
			require.Equal(t, seqs(1, 2), b.got("s1"))
			require.Zero(t, b.broker.Len())
		})
	}
}

func TestEngineVersionConflictStops(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", []int64{1}, 0)
	b.proc.Hook = func(c sequencertest.Call) error {
		if c.Op == "load" && c.Phase == sequencertest.After {
			b.store.Put("s1", sequencer.NewState()) // a concurrent writer
		}
		return nil
	}
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	_, err = b.engine.RunSession(t.Context(), sess, nil)
	require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	active, _ := b.broker.Pending("s1")
	require.Equal(t, 1, active)
}

func TestEngineAtomicStore(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Retry: sequencer.RetryPolicy{Attempts: 2}})
	b.engine = b.newEngine(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Retry: sequencer.RetryPolicy{Attempts: 2}}, b.store.Client(b.proc).Atomic())
	fails := 1
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 2 && fails > 0 {
			fails--
			return errors.New("once")
		}
		return nil
	})
	publish(b, "s1", []int64{3, 2, 1}, 3)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, seqs(1, 3), b.got("s1"))
	require.Zero(t, b.broker.Len())
}

func TestEngineConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  sequencer.EngineConfig
	}{
		{"same properties", sequencer.EngineConfig{Pipelining: sequencer.Awaited, SequenceProperty: "x", LastProperty: "x"}},
		{"bad window", sequencer.EngineConfig{Pipelining: sequencer.Awaited, WindowMessages: -5}},
		{"bad policy", sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: "explode"}},
		{"negative timeout", sequencer.EngineConfig{Pipelining: sequencer.Awaited, IdleTimeout: -time.Second}},
		{"negative gap", sequencer.EngineConfig{Pipelining: sequencer.Awaited, MaxGap: -1}},
		{"negative batch", sequencer.EngineConfig{Pipelining: sequencer.Awaited, DeferredBatch: -1}},
		{"negative base", sequencer.EngineConfig{Pipelining: sequencer.Awaited, Retry: sequencer.RetryPolicy{Attempts: 1, Base: -1}}},
		{"bad ttl", sequencer.EngineConfig{Pipelining: sequencer.Awaited, TombstoneTTL: -2}},
		{"bad pending settlements", sequencer.EngineConfig{Pipelining: sequencer.Awaited, MaxPendingSettlements: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sequencer.NewEngine(tt.cfg, sequencer.EngineDeps{
				Store: sequencertest.NewStore().Client(nil), Handler: sequencer.HandlerFunc(nil)})
			require.Error(t, err)
		})
	}
	_, err := sequencer.NewEngine(sequencer.EngineConfig{Pipelining: sequencer.Awaited}, sequencer.EngineDeps{})
	require.Error(t, err)
	require.Equal(t, 15*time.Second, sequencer.RetryPolicy{Base: time.Second, Cap: 15 * time.Second}.Backoff(5))
	require.Equal(t, "lock_lost", sequencer.OutcomeLockLost.String())
	require.Equal(t, "receive_deferred", sequencer.CallReceiveDeferred.String())
	require.Equal(t, "lock_lost", sequencer.EventLockLost.String())
	require.Equal(t, "unknown", sequencer.EventKind(99).String())
}

func TestStateUnpark(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		skip     bool
		last     int64
		wantNext int64
		wantEnd  bool
	}{
		{"replay", false, 0, 4, false},
		{"skip", true, 0, 5, false},
		{"skip the last", true, 4, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := sequencer.NewState()
			require.False(t, st.Unpark(tt.skip, now), "not parked")
			st.Next, st.Last = 4, tt.last
			st.Parked = &sequencer.Parked{Sequence: 4, BrokerSequence: 9}
			require.True(t, st.Unpark(tt.skip, now))
			require.Nil(t, st.Parked)
			require.Equal(t, tt.wantNext, st.Next)
			require.Equal(t, tt.wantEnd, !st.EndedAt.IsZero())
			require.True(t, st.TombstoneExpired(now.Add(time.Hour), time.Hour) == tt.wantEnd)
		})
	}
}

func TestEngineRenewsLockWhileHandling(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	release := make(chan struct{})
	e, err := sequencer.NewEngine(sequencer.EngineConfig{Pipelining: sequencer.Awaited}, sequencer.EngineDeps{
		Store: b.store.Client(nil),
		Handler: sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
		Clock: b.clock,
	})
	require.NoError(t, err)
	publish(b, "s1", []int64{1}, 1)
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	done := make(chan sequencer.Outcome)
	go func() {
		out, _ := e.RunSession(t.Context(), sess, nil)
		done <- out
	}()
	// The lock lasts 60s; the handler takes 150s of fake time. Renewal every 30s keeps it.
	for range 5 {
		require.True(t, b.clock.WaitForTimers(1), "the renewal timer (re)armed after the last renewal")
		b.clock.Advance(30 * time.Second)
	}
	close(release)
	require.Equal(t, sequencer.OutcomeEnded, <-done)
	require.Zero(t, b.broker.Len())
	require.GreaterOrEqual(t, e.Stats().BrokerCalls["renew_lock"], uint64(4))
}
