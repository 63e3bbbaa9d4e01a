package sequencer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sequencer"
)

// The gap policy, the blocked mark and unsequenced pass-through: what an operator sees in the
// stored state and what the handler gets.

func (b *bundle) eventsOf(kind sequencer.EventKind) []sequencer.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []sequencer.Event
	for _, e := range b.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func TestEngineGapPolicy(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Minute
	tests := []struct {
		policy      sequencer.GapPolicy
		wantHandled []int64
		wantOutcome sequencer.Outcome
		check       func(t *testing.T, b *bundle, st *sequencer.State)
	}{
		{sequencer.GapWait, []int64{1}, sequencer.OutcomeIdle, func(t *testing.T, b *bundle, st *sequencer.State) {
			require.Nil(t, st.Parked)
			require.Equal(t, int64(2), st.Next)
			require.True(t, st.GapSince.Equal(b.clock.Now().Add(-timeout)), "still waiting since the first release")
			require.Zero(t, b.engine.Stats().Skipped)
		}},
		{sequencer.GapSkip, []int64{1, 3, 4}, sequencer.OutcomeIdle, func(t *testing.T, b *bundle, st *sequencer.State) {
			require.Equal(t, int64(5), st.Next)
			require.Equal(t, uint64(1), b.engine.Stats().Skipped)
			require.Equal(t, timeout, b.engine.Stats().GapWait)
			require.Zero(t, b.broker.Len())
		}},
		{sequencer.GapPark, []int64{1}, sequencer.OutcomeParked, func(t *testing.T, b *bundle, st *sequencer.State) {
			require.NotNil(t, st.Parked)
			require.True(t, st.Parked.OnGap())
			require.Equal(t, int64(2), st.Parked.Sequence)
			require.Equal(t, "gap timeout: sequence 2 missing since "+b.clock.Now().Add(-timeout).Format(time.RFC3339), st.Parked.Reason)
			require.True(t, st.GapSince.Equal(b.clock.Now().Add(-timeout)), "the wait goes on")
			require.False(t, st.GapExpired(b.clock.Now().Add(time.Hour), timeout), "a parked session is not woken for its gap")
			require.Len(t, st.Deferred, 2, "what waits behind the gap is deferred")
			require.Empty(t, b.broker.DeadLetters(), "a missing message has nothing to dead-letter")
			require.Equal(t, uint64(1), b.engine.Stats().Parked)
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, GapTimeout: timeout, GapPolicy: tt.policy})
			publish(b, "s1", []int64{1, 3, 4}, 0)
			require.Equal(t, []sequencer.Outcome{sequencer.OutcomeIdle}, b.runAll(t))
			opened := b.eventsOf(sequencer.EventGapOpened)
			require.Len(t, opened, 1, "the release says the gap opened")
			require.Equal(t, int64(2), opened[0].Sequence)
			require.Equal(t, int64(3), opened[0].Lowest)

			b.clock.Advance(timeout)
			require.Equal(t, tt.wantOutcome, b.runByID(t, "s1", nil), "a sweeper wakes it")
			require.Equal(t, tt.wantHandled, b.got("s1"))
			require.Len(t, b.eventsOf(sequencer.EventGapOpened), 1, "a gap is announced once, not at every release")
			st, _ := b.store.Get("s1")
			tt.check(t, b, st)
		})
	}
}

func TestEngineGapParkEndsWhenTheMissingMessageArrives(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		t.Run(map[bool]string{false: "own store", true: "session state"}[bound], func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, GapTimeout: time.Minute, GapPolicy: sequencer.GapPark}, bound)
			publish(b, "s1", []int64{1, 3, 4}, 4)
			b.runAll(t)
			b.clock.Advance(time.Minute)
			require.Equal(t, sequencer.OutcomeParked, b.runByID(t, "s1", nil))
			b.clock.Advance(time.Minute)
			publish(b, "s1", []int64{5}, 0) // arrives while parked: invalid (after the last) at once
			b.broker.PublishSeq("s1", 2, false)
			outs := b.runAll(t)
			require.Contains(t, outs, sequencer.OutcomeEnded)
			require.Equal(t, []int64{1, 2, 3, 4}, b.got("s1"), "the late message unparks the session, the rest drains")
			require.Equal(t, 2*time.Minute, b.engine.Stats().GapWait, "the whole wait, parked time included")
			require.Zero(t, b.broker.Len())
			dl := b.broker.DeadLetters()
			require.Len(t, dl, 1)
			require.Equal(t, sequencer.ReasonInvalidSequence, dl[0].Reason)
		})
	}
}

func TestEngineGapParkResumeAndSkip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		skip        bool
		wantHandled []int64
		wantNext    int64
	}{
		{"resume waits for the missing message again", false, []int64{1}, 2},
		{"skip goes on from the lowest deferred sequence", true, []int64{1, 4, 5}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, GapTimeout: time.Minute, GapPolicy: sequencer.GapPark})
			publish(b, "s1", []int64{1, 4, 5}, 0)
			b.runAll(t)
			b.clock.Advance(time.Minute)
			require.Equal(t, sequencer.OutcomeParked, b.runByID(t, "s1", nil))
			out := b.runByID(t, "s1", &sequencer.RunOptions{Resume: &sequencer.ResumeOptions{Skip: tt.skip}})
			require.Equal(t, sequencer.OutcomeIdle, out)
			require.Equal(t, tt.wantHandled, b.got("s1"))
			st, _ := b.store.Get("s1")
			require.Nil(t, st.Parked)
			require.Equal(t, tt.wantNext, st.Next)
			if !tt.skip {
				require.True(t, st.GapSince.Equal(b.clock.Now()), "the gap clock restarts at the resume")
				b.clock.Advance(time.Minute)
				require.Equal(t, sequencer.OutcomeParked, b.runByID(t, "s1", nil), "and parks again after a full timeout")
			} else {
				require.Equal(t, uint64(2), st.Counters.Skipped, "sequences 2 and 3")
			}
		})
	}
}

func TestEnginePoisonBlockRecordsTheBlock(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonBlock})
	fails := 6 // two runs of three attempts
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 2 && fails > 0 {
			fails--
			return errors.New("downstream 503")
		}
		return nil
	})
	publish(b, "s1", []int64{1, 2, 3}, 3)

	require.Equal(t, sequencer.OutcomeBlocked, b.runByID(t, "s1", nil))
	st, _ := b.store.Get("s1")
	require.NotNil(t, st.Blocked, "an operator can list the blocked session")
	require.Equal(t, int64(2), st.Blocked.Sequence)
	require.Equal(t, "downstream 503", st.Blocked.Reason)
	require.Equal(t, uint64(1), st.Blocked.Times)
	since := st.Blocked.Since
	require.Len(t, b.eventsOf(sequencer.EventBlocked), 1)
	require.Empty(t, b.eventsOf(sequencer.EventDeadLettered), "nothing was dead-lettered")

	b.clock.Advance(time.Minute)
	require.Equal(t, sequencer.OutcomeBlocked, b.runByID(t, "s1", nil))
	st, _ = b.store.Get("s1")
	require.Equal(t, uint64(2), st.Blocked.Times)
	require.True(t, st.Blocked.Since.Equal(since), "blocked since the first time")

	out := b.runByID(t, "s1", nil)
	require.Equal(t, []int64{1, 2, 3}, b.got("s1"))
	require.Equal(t, sequencer.OutcomeEnded, out)
	st, _ = b.store.Get("s1")
	require.Nil(t, st.Blocked, "handling the message clears the mark")
}

func TestEnginePoisonBlockUntilMaxDeliveryCountLeavesTheMark(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonBlock})
	b.setFail(func(*sequencer.Message) error { return errors.New("boom") })
	publish(b, "s1", []int64{1, 2}, 0)
	b.runAll(t)
	st, _ := b.store.Get("s1")
	require.NotNil(t, st.Blocked, "the broker dead-lettered the message; the mark says where the session stands")
	require.Equal(t, uint64(10), st.Blocked.Times)
	require.Equal(t, int64(1), st.Next)
}

// publishUnsequenced publishes a message without the sequence property.
func publishUnsequenced(b *bundle, session, body string) {
	b.broker.Publish(session, map[string]any{"kind": "notification"}, []byte(body))
}

func TestEngineUnsequencedMessages(t *testing.T) {
	t.Parallel()
	t.Run("dead-lettered by default", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
		publishUnsequenced(b, "s1", "n")
		b.runAll(t)
		require.Empty(t, b.got("s1"))
		dl := b.broker.DeadLetters()
		require.Len(t, dl, 1)
		require.Equal(t, sequencer.ReasonInvalidSequence, dl[0].Reason)
	})

	for _, atomicStore := range []bool{false, true} {
		t.Run(map[bool]string{false: "passed through", true: "passed through in the store's transaction"}[atomicStore], func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, Unsequenced: sequencer.UnsequencedPassThrough, Poison: sequencer.PoisonPark}
			b := setup(t, cfg)
			if atomicStore {
				b.engine = b.newEngine(t, cfg, b.store.Client(b.proc).Atomic())
			}
			b.setFail(func(m *sequencer.Message) error {
				if string(m.Body) == "poison" || m.Sequence == 4 {
					return errors.New("boom")
				}
				return nil
			})
			// A gap (2 missing), then unordered messages: they are handled at once.
			publish(b, "s1", []int64{1, 3}, 0)
			publishUnsequenced(b, "s1", "n1")
			publishUnsequenced(b, "s1", "poison")
			b.runAll(t)
			require.Equal(t, []int64{1, 0}, b.got("s1"), "n1 is handled while 3 waits for 2")
			dl := b.broker.DeadLetters()
			require.Len(t, dl, 1, "a failing unsequenced message is dead-lettered, not parked on")
			require.Equal(t, sequencer.ReasonHandlerFailed, dl[0].Reason)
			st, _ := b.store.Get("s1")
			require.Equal(t, int64(2), st.Next)
			require.Nil(t, st.Parked)
			require.Equal(t, uint64(1), st.Counters.Handled, "the state counts ordered messages only")

			// Parked (4 fails): unsequenced messages still go through.
			publish(b, "s1", []int64{2, 4, 5}, 0)
			publishUnsequenced(b, "s1", "n2")
			b.runAll(t)
			require.Equal(t, []int64{1, 0, 2, 3, 0}, b.got("s1"))
			st, _ = b.store.Get("s1")
			require.NotNil(t, st.Parked)
			require.Equal(t, int64(4), st.Parked.Sequence)
			active, _ := b.broker.Pending("s1")
			require.Zero(t, active)
		})
	}

	t.Run("no state for a session of unsequenced messages", func(t *testing.T) {
		t.Parallel()
		cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, Unsequenced: sequencer.UnsequencedPassThrough}
		b := setup(t, cfg)
		b.engine = b.newEngine(t, cfg, b.store.Client(b.proc).Atomic())
		publishUnsequenced(b, "s1", "n1")
		publishUnsequenced(b, "s1", "n2")
		b.runAll(t)
		require.Equal(t, []int64{0, 0}, b.got("s1"))
		st, _ := b.store.Get("s1")
		require.Nil(t, st)
	})

	t.Run("a sequence property that does not parse is invalid, not unsequenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Unsequenced: sequencer.UnsequencedPassThrough})
		b.broker.Publish("s1", map[string]any{contract.SequenceProperty: "soon"}, nil)
		b.runAll(t)
		require.Empty(t, b.got("s1"))
		dl := b.broker.DeadLetters()
		require.Len(t, dl, 1)
		require.Equal(t, sequencer.ReasonInvalidSequence, dl[0].Reason)
		require.True(t, strings.Contains(dl[0].Description, contract.SequenceProperty), dl[0].Description)
	})
}

func TestStateOperatorTransitions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	t.Run("unblock", func(t *testing.T) {
		t.Parallel()
		st := sequencer.NewState()
		require.False(t, st.Unblock(now))
		st.Blocked = &sequencer.Blocked{Sequence: 1, BrokerSequence: 7}
		require.True(t, st.Unblock(now))
		require.Nil(t, st.Blocked)
		require.True(t, st.UpdatedAt.Equal(now))
	})
	tests := []struct {
		name        string
		next, last  int64
		parked      *sequencer.Parked
		blocked     *sequencer.Blocked
		to          int64
		wantSkipped uint64
		wantNext    int64
		wantEnded   bool
	}{
		{"not ahead", 4, 0, nil, nil, 4, 0, 4, false},
		{"over a gap", 4, 0, nil, nil, 7, 3, 7, false},
		{"past a parked message", 4, 0, &sequencer.Parked{Sequence: 4, BrokerSequence: 9}, nil, 5, 1, 5, false},
		{"past a blocked message", 4, 0, nil, &sequencer.Blocked{Sequence: 4, BrokerSequence: 9}, 5, 1, 5, false},
		{"to the end", 4, 6, nil, nil, 7, 3, 7, true},
		{"beyond the end stops at it", 4, 6, nil, nil, 9, 3, 7, true},
	}
	for _, tt := range tests {
		t.Run("skip to: "+tt.name, func(t *testing.T) {
			t.Parallel()
			st := sequencer.NewState()
			st.Next, st.Last, st.Parked, st.Blocked = tt.next, tt.last, tt.parked, tt.blocked
			st.GapSince = now.Add(-time.Hour)
			require.Equal(t, tt.wantSkipped, st.SkipTo(tt.to, now))
			require.Equal(t, tt.wantNext, st.Next)
			require.Equal(t, tt.wantEnded, !st.EndedAt.IsZero())
			if tt.to > tt.next {
				require.Nil(t, st.Parked)
				require.Nil(t, st.Blocked)
				require.True(t, st.GapSince.IsZero())
			}
		})
	}
}
