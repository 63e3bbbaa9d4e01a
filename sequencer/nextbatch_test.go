package sequencer_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// setupBlocking is setupBound with a broker whose Receive waits for messages until its ctx ends,
// as the real one does: a receive asked for ahead of its time waits there.
func setupBlocking(t *testing.T, cfg sequencer.EngineConfig) *bundle {
	t.Helper()
	b := &bundle{bound: true, clock: clock.NewFake(time.Time{}), handled: map[string][]int64{}}
	b.broker = sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: b.clock, Blocking: true})
	b.store = sequencertest.NewStore()
	b.proc = &sequencertest.Process{}
	b.client = b.broker.NewClient(b.proc)
	b.engine = b.newEngine(t, cfg, b.storeClient())
	return b
}

// onReceive is onCall for the receive calls, with fn failing none.
func onReceive(fn func(n int64)) func(sequencertest.Call) error {
	return onCall("receive", func(n int64) error {
		fn(n)
		return nil
	})
}

// idleOut moves the bundle's fake clock on, a second at a time, until the run that done reports
// on has ended (its receive waits out the idle timeout), and returns its outcome.
func idleOut(t *testing.T, b *bundle, done <-chan sequencer.Outcome) sequencer.Outcome {
	t.Helper()
	var out sequencer.Outcome
	require.Eventually(t, func() bool {
		b.clock.Advance(time.Second)
		select {
		case out = <-done:
			return true
		default:
			return false
		}
	}, 5*time.Second, 10*time.Millisecond)
	return out
}

// TestNextBatch: with PipelineRuns a run asks for its next receive batch while it handles one,
// but not after a batch holding the session's last message; the idle timeout counts from the
// moment the run is ready for the batch; and a run that ends first drops the batch, whose
// messages stay at the broker for the next run.
func TestNextBatch(t *testing.T) {
	t.Parallel()
	cfg := sequencer.EngineConfig{ReceiveBatch: 4, IdleTimeout: time.Second}

	t.Run("the next batch is asked for while one is handled", func(t *testing.T) {
		t.Parallel()
		b := setupBlocking(t, cfg)
		second := make(chan struct{})
		b.proc.Hook = onReceive(func(n int64) {
			if n == 2 {
				close(second)
			}
		})
		var overlapped atomic.Bool
		b.setFail(func(m *sequencer.Message) error {
			if m.Sequence == 1 {
				select {
				case <-second:
					overlapped.Store(true)
				case <-time.After(2 * time.Second):
				}
			}
			return nil
		})
		publish(b, "s1", seqs(1, 6), 0)
		done := b.runNextAsync(t)
		require.Eventually(t, func() bool { return len(b.got("s1")) == 6 }, 5*time.Second, time.Millisecond)
		// The receive after the last batch is ready now: its idle timeout counts from here.
		require.Equal(t, sequencer.OutcomeIdle, idleOut(t, b, done))
		require.True(t, overlapped.Load(), "the receive of 5 and 6 was sent while 1 was handled")
		require.Equal(t, seqs(1, 6), b.got("s1"))
		require.Zero(t, b.broker.Len())
	})

	// Nothing is asked for after a batch when what is in hand may end the session.
	for _, tt := range []struct {
		name     string
		order    []int64
		receives int64
	}{
		{"not after the batch that holds the last message", seqs(1, 3), 1},
		// 6 (the last) to 3 come first and are held; 2 and 1 then complete the session.
		{"not when what is in hand ends the session", seqs(6, 1), 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupBlocking(t, cfg)
			var receives atomic.Int64
			b.proc.Hook = onReceive(func(n int64) { receives.Store(n) })
			last := slices.Max(tt.order)
			publish(b, "s1", tt.order, last)
			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, seqs(1, last), b.got("s1"))
			require.Equal(t, tt.receives, receives.Load(), "one receive a batch, none asked for after them")
		})
	}

	t.Run("the idle timeout counts from the moment the run is ready", func(t *testing.T) {
		t.Parallel()
		b := setupBlocking(t, cfg)
		b.setFail(func(m *sequencer.Message) error {
			if m.Sequence == 4 {
				// Handling takes longer than the idle timeout; 5 arrives after it, before the
				// run is ready for its next batch. A timeout counted from when the receive was
				// sent would have ended the session already.
				b.clock.Advance(3 * time.Second)
				b.broker.PublishSeq("s1", 5, true)
			}
			return nil
		})
		publish(b, "s1", seqs(1, 4), 0)
		out, _ := b.runNext(t)
		require.Equal(t, sequencer.OutcomeEnded, out)
		require.Equal(t, seqs(1, 5), b.got("s1"))
	})

	t.Run("a run that stops drops the batch it asked for", func(t *testing.T) {
		t.Parallel()
		b := setupBlocking(t, cfg)
		stop, stopNow := context.WithCancel(context.Background())
		defer stopNow()
		second := make(chan struct{})
		b.proc.Hook = func(c sequencertest.Call) error {
			if c.Op == "receive" && c.Phase == sequencertest.After && len(c.BrokerSequences) > 0 && c.BrokerSequences[0] > 4 {
				close(second) // the batch asked for ahead holds 5-8
			}
			return nil
		}
		var receivedEarly atomic.Bool
		b.setFail(func(m *sequencer.Message) error {
			if m.Sequence == 4 {
				select {
				case <-second:
					receivedEarly.Store(true)
				case <-time.After(2 * time.Second):
				}
				stopNow()
			}
			return nil
		})
		publish(b, "s1", seqs(1, 8), 0)
		sess, err := b.client.AcceptNext(t.Context())
		require.NoError(t, err)
		out, err := b.engine.RunSession(t.Context(), sess, &sequencer.RunOptions{Stop: stop})
		require.NoError(t, err)
		require.Equal(t, sequencer.OutcomeStopped, out)
		require.True(t, receivedEarly.Load(), "5-8 were received while 4 was handled")
		require.Equal(t, seqs(1, 4), b.got("s1"))
		active, deferred := b.broker.Pending("s1")
		require.Equal(t, 4, active, "5-8 are back at the broker, unsettled")
		require.Zero(t, deferred)

		b.proc.Hook = nil
		b.setFail(nil)
		done := b.runNextAsync(t)
		require.Equal(t, sequencer.OutcomeIdle, idleOut(t, b, done))
		require.Equal(t, seqs(1, 8), b.got("s1"), "the next run takes them, each once")
	})
}
