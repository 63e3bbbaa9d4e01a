package sequencer_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// TestIndexedActiveMessageAnchorsTheDrain: an active message that an index entry names (its
// deferral was saved and the process died before the defer) is, once handled, the drain's anchor
// like any other active message while the message for the next sequence is deferred: a stop
// right after it leaves it at the broker, which offers the session again. Completed at once, it
// left only deferred messages at the broker when the rest of the drain was never made (a session
// nothing wakes); TestPropertyReleasedRetries found that (seed 1795813116691169845).
func TestIndexedActiveMessageAnchorsTheDrain(t *testing.T) {
	t.Parallel()
	cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, WindowMessages: sequencer.NoWindow, ReceiveBatch: 1}
	b := setup(t, cfg)
	// 3 and 2 come early and are deferred, each saved in the index first; the process dies at
	// the defer of 2, which stays active and indexed.
	publish(b, "s1", []int64{3, 2}, 3)
	var defers atomic.Int64
	b.proc.Hook = func(c sequencertest.Call) error {
		if c.Op == "defer" && c.Phase == sequencertest.Before && defers.Add(1) == 2 {
			return sequencertest.ErrCrash
		}
		return nil
	}
	out, _ := b.engine.RunSession(t.Context(), mustAccept(t, b), nil)
	require.Equal(t, sequencer.OutcomeLockLost, out)
	active, deferred := b.broker.Pending("s1")
	require.Equal(t, []int{1, 1}, []int{active, deferred}, "2 active, 3 deferred")
	// 1 is handled meanwhile (say an operator skipped it): 2 is the next.
	st, _ := b.store.Get("s1")
	require.Len(t, st.Deferred, 2, "2 and 3 are indexed")
	bs2 := st.Deferred[2]
	st.Next = 2
	b.store.Put("s1", st)
	b.restart(t, cfg)

	var mu sync.Mutex
	var completed []int64
	b.proc.Hook = func(c sequencertest.Call) error {
		if c.Op == "complete" && c.Phase == sequencertest.After {
			mu.Lock()
			completed = append(completed, c.BrokerSequences...)
			mu.Unlock()
		}
		return nil
	}
	// Handling 2 makes 3, deferred, the next: 2 is the drain's anchor. A stop comes right after
	// it, before 3 is handed over.
	stop, cancel := context.WithCancel(t.Context())
	defer cancel()
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 2 {
			cancel()
		}
		return nil
	})
	out, err := b.engine.RunSession(t.Context(), mustAccept(t, b), &sequencer.RunOptions{Stop: stop})
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeStopped, out)
	require.Equal(t, []int64{2}, b.got("s1"))
	mu.Lock()
	require.False(t, slices.Contains(completed, bs2), "2, the anchor, stays at the broker after the stop")
	mu.Unlock()
	active, _ = b.broker.Pending("s1")
	require.Equal(t, 1, active, "the broker has an active message to offer the session with")

	// The broker offers the session again; the next run completes 2 (handled) and ends it.
	b.setFail(nil)
	b.runAll(t)
	require.Equal(t, []int64{2, 3}, b.got("s1"))
	require.Zero(t, b.broker.Len())
	st, _ = b.store.Get("s1")
	require.Equal(t, int64(4), st.Next)
	require.Empty(t, st.Deferred)
}
