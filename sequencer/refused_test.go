package sequencer_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// refuseOnce makes the process refuse, as busy, the first settlement op of the message with
// broker sequence bs; the fake broker then leaves the message locked to the session until the
// session is released, as Service Bus does.
func refuseOnce(b *bundle, op string, bs int64) *atomic.Int64 {
	var refused atomic.Int64
	b.proc.Hook = func(c sequencertest.Call) error {
		if c.Op == op && c.Phase == sequencertest.Before && slices.Contains(c.BrokerSequences, bs) && refused.CompareAndSwap(0, 1) {
			return fmt.Errorf("server-busy: %w", sequencer.ErrSettlementRefused)
		}
		return nil
	}
	return &refused
}

// TestRefusedCompletionOfADeferredMessageKeepsItsIndexEntry: a deferred message whose completion
// the broker refused as busy stays deferred at the broker, which never delivers it again by
// itself. Its index entry stays (below Next, so the session needs a wake) and the run that a
// sweeper starts completes it. When the entry was dropped, the handled message stayed deferred
// with nothing to settle it (seen once under the emulator's throttle).
func TestRefusedCompletionOfADeferredMessageKeepsItsIndexEntry(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		t.Run(fmt.Sprintf("bound=%v", bound), func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, WindowMessages: sequencer.NoWindow, ReceiveBatch: 1}, bound)
			b.broker.PublishSeq("s1", 3, true)
			bs2 := b.broker.PublishSeq("s1", 2, false)
			b.broker.PublishSeq("s1", 1, false)
			refused := refuseOnce(b, "complete", bs2)

			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, seqs(1, 3), b.got("s1"))
			require.EqualValues(t, 1, refused.Load())
			require.EqualValues(t, 1, b.engine.Stats().SettlementsRefused)
			active, deferred := b.broker.Pending("s1")
			require.Equal(t, []int{0, 1}, []int{active, deferred}, "2 is still deferred at the broker")
			st, _ := b.store.Get("s1")
			require.NotNil(t, st, "the state stays while it indexes a message to settle")
			require.Equal(t, map[int64]int64{2: bs2}, st.Deferred, "the entry of 2 stays")
			require.True(t, st.NeedsWake(), "a sweeper wakes the session")

			b.runByID(t, "s1", nil) // the sweeper's wake
			require.Equal(t, seqs(1, 3), b.got("s1"), "2 is not handled again")
			require.Zero(t, b.broker.Len(), "2 is completed")
			if st, _ := b.store.Get("s1"); st != nil {
				require.Empty(t, st.Deferred)
				require.False(t, st.NeedsWake())
			}
		})
	}
}

// TestRefusedDeadLetteringOfASkippedPoisonMessageKeepsItsMarker: PoisonSkip dead-letters a message
// whose handler keeps failing; when the broker refuses that as busy, the message comes back once
// the session is released, and its SkippedPoison marker must still be there so that the copy is
// dead-lettered, not completed as a duplicate of a handled message.
func TestRefusedDeadLetteringOfASkippedPoisonMessageKeepsItsMarker(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, Poison: sequencer.PoisonSkip})
	bs1 := b.broker.PublishSeq("s1", 1, false)
	b.broker.PublishSeq("s1", 2, false)
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 1 {
			return fmt.Errorf("poison")
		}
		return nil
	})
	refused := refuseOnce(b, "dead_letter", bs1)

	b.runAll(t)
	require.EqualValues(t, 1, refused.Load())
	require.Equal(t, []int64{2}, b.got("s1"))
	require.Zero(t, b.broker.Len(), "the copy of 1 was delivered again and dead-lettered")
	dl := b.broker.DeadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, bs1, dl[0].Message.BrokerSequence)
	require.Equal(t, sequencer.ReasonHandlerFailed, dl[0].Reason)
	st, _ := b.store.Get("s1")
	require.Empty(t, st.SkippedPoison, "the marker goes once the dead-lettering landed")
	require.EqualValues(t, 1, b.engine.Stats().DeadLettered)
}

// TestRefusedCompletionsOfARunKeepTheReplayWindow: the broker refuses every completion as busy
// (a throttled namespace). A refused completion leaves its entry at the broker as a crash would,
// yet frees its slot, so without a save the messages a lost lock hands over again grew with
// every refusal (a throttled 8-replica bench cell replayed 32, the window being 17). At each
// handler call the stored state must name at most EngineConfig.ReplayWindow messages, the one
// in hand included, as handed over and still at the broker.
func TestRefusedCompletionsOfARunKeepTheReplayWindow(t *testing.T) {
	t.Parallel()
	for _, pipelined := range []bool{true, false} {
		for _, bound := range []bool{true, false} {
			// slowSaves makes each save take a while: an extended run's entries are then handed
			// over before its extension lands, and completed (refused) once it has.
			for _, slowSaves := range []bool{false, true} {
				t.Run(fmt.Sprintf("pipelined=%v bound=%v slow_saves=%v", pipelined, bound, slowSaves), func(t *testing.T) {
					t.Parallel()
					testRefusedCompletionsKeepTheReplayWindow(t, pipelined, bound, slowSaves)
				})
			}
		}
	}
}

// testRefusedCompletionsKeepTheReplayWindow is one case of
// TestRefusedCompletionsOfARunKeepTheReplayWindow.
func testRefusedCompletionsKeepTheReplayWindow(t *testing.T, pipelined, bound, slowSaves bool) {
	cfg := sequencer.EngineConfig{MaxPendingSettlements: 4, Pipelining: pipeliningOf(pipelined), PipelineLease: -1, ReceiveBatch: 8}
	window := int64(cfg.ReplayWindow())
	b := setupStore(t, cfg, bound)
	b.proc.Hook = func(c sequencertest.Call) error {
		if c.Op == "complete" && c.Phase == sequencertest.Before {
			return fmt.Errorf("server-busy: %w", sequencer.ErrSettlementRefused)
		}
		if slowSaves && c.Op == "save" && c.Phase == sequencertest.Before {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	var worst atomic.Int64
	b.setFail(func(m *sequencer.Message) error {
		next := int64(1)
		if st, _ := b.store.Get("s1"); st != nil {
			next = st.Next
		}
		if n := m.Sequence - next + 1; n > worst.Load() {
			worst.Store(n)
		}
		return nil
	})
	publish(b, "s1", seqs(1, 40), 0)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Equal(t, seqs(1, 40), b.got("s1"))
	require.LessOrEqual(t, worst.Load(), window, "messages a crash would hand over again, window %d", window)
	require.Positive(t, b.engine.Stats().SettlementsRefused)

	b.proc.Hook = nil // the namespace recovers: the refused copies are duplicates now
	b.runAll(t)
	require.Equal(t, seqs(1, 40), b.got("s1"), "nothing handed over twice")
	require.Zero(t, b.broker.Len())
}
