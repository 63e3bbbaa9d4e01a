package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

type bundle struct {
	// bound: the engine's store is kept in the session (sequencer.SessionBoundStore), as the
	// Service Bus session state is; otherwise it is a store of its own, like Postgres.
	bound  bool
	clock  *clock.Fake
	broker *sequencertest.Broker
	store  *sequencertest.Store
	proc   *sequencertest.Process
	client *sequencertest.Client
	engine *sequencer.Engine

	mu      sync.Mutex
	handled map[string][]int64
	fail    func(m *sequencer.Message) error
	events  []sequencer.Event
}

func setup(t *testing.T, cfg sequencer.EngineConfig) *bundle {
	t.Helper()
	return setupStore(t, cfg, false)
}

// setupBound is setup with a store kept in the session (the Service Bus session state's kind).
func setupBound(t *testing.T, cfg sequencer.EngineConfig) *bundle {
	t.Helper()
	return setupStore(t, cfg, true)
}

func setupStore(t *testing.T, cfg sequencer.EngineConfig, bound bool) *bundle {
	t.Helper()
	b := &bundle{bound: bound, clock: clock.NewFake(time.Time{}), handled: map[string][]int64{}}
	b.broker = sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: b.clock})
	b.store = sequencertest.NewStore()
	b.proc = &sequencertest.Process{}
	b.client = b.broker.NewClient(b.proc)
	b.engine = b.newEngine(t, cfg, b.storeClient())
	return b
}

// storeClient is the store as the bundle's process sees it.
func (b *bundle) storeClient() *sequencertest.StoreClient {
	if b.bound {
		return b.store.BoundClient(b.proc)
	}
	return b.store.Client(b.proc)
}

func (b *bundle) newEngine(t *testing.T, cfg sequencer.EngineConfig, store sequencer.StateStore) *sequencer.Engine {
	t.Helper()
	if cfg.Retry.Attempts == 0 {
		cfg.Retry = sequencer.RetryPolicy{Attempts: 3}
	}
	e, err := sequencer.NewEngine(cfg, sequencer.EngineDeps{
		Store:    store,
		Handler:  sequencer.HandlerFunc(b.handle),
		Clock:    b.clock,
		Observer: sequencer.ObserverFunc(b.observe),
	})
	require.NoError(t, err)
	return e
}

func (b *bundle) handle(_ context.Context, m *sequencer.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		if err := b.fail(m); err != nil {
			return err
		}
	}
	b.handled[m.SessionID] = append(b.handled[m.SessionID], m.Sequence)
	return nil
}

func (b *bundle) observe(e sequencer.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, e)
}

func (b *bundle) setFail(f func(m *sequencer.Message) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = f
}

func (b *bundle) got(session string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.handled[session]...)
}

// runNext accepts the next session and runs it; ok is false when none is available.
func (b *bundle) runNext(t *testing.T) (sequencer.Outcome, bool) {
	t.Helper()
	return b.runNextWith(t, nil)
}

// runNextWith is runNext with the options of RunSession.
func (b *bundle) runNextWith(t *testing.T, opts *sequencer.RunOptions) (sequencer.Outcome, bool) {
	t.Helper()
	sess, err := b.client.AcceptNext(t.Context())
	if errors.Is(err, sequencer.ErrNoSession) {
		return 0, false
	}
	require.NoError(t, err)
	out, err := b.engine.RunSession(t.Context(), sess, opts)
	require.NoError(t, err)
	return out, true
}

// runNextAsync runs the next session (runNext) on a goroutine of its own and returns where its
// outcome will come, for a test that acts on the run while it goes on.
func (b *bundle) runNextAsync(t *testing.T) <-chan sequencer.Outcome {
	t.Helper()
	done := make(chan sequencer.Outcome, 1)
	go func() {
		out, _ := b.runNext(t)
		done <- out
	}()
	return done
}

// runAll runs sessions until none is offered and returns their outcomes.
func (b *bundle) runAll(t *testing.T) []sequencer.Outcome {
	t.Helper()
	var outs []sequencer.Outcome
	for range 1000 {
		out, ok := b.runNext(t)
		if !ok {
			return outs
		}
		outs = append(outs, out)
	}
	t.Fatal("sessions never ran out")
	return nil
}

func (b *bundle) runByID(t *testing.T, id string, opts *sequencer.RunOptions) sequencer.Outcome {
	t.Helper()
	sess, err := b.client.Accept(t.Context(), id)
	require.NoError(t, err)
	out, err := b.engine.RunSession(t.Context(), sess, opts)
	require.NoError(t, err)
	return out
}

func seqs(from, to int64) []int64 {
	var out []int64
	if from <= to {
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
	} else {
		for i := from; i >= to; i-- {
			out = append(out, i)
		}
	}
	return out
}

func publish(b *bundle, session string, order []int64, last int64) {
	for _, s := range order {
		b.broker.PublishSeq(session, s, s == last)
	}
}

func TestEngineInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", seqs(1, 3), 0)
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Equal(t, seqs(1, 3), b.got("s1"))
	active, deferred := b.broker.Pending("s1")
	require.Zero(t, active+deferred, "handled messages are completed")
	st, _ := b.store.Get("s1")
	require.Equal(t, int64(4), st.Next)
	require.Equal(t, uint64(3), st.Counters.Handled)
}

func TestEngineEndDeletesStateOrKeepsTombstone(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{sequencer.NoTombstone, time.Hour} {
		t.Run(fmt.Sprint(ttl), func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, TombstoneTTL: ttl})
			publish(b, "s1", seqs(1, 3), 3)
			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, seqs(1, 3), b.got("s1"))
			st, _ := b.store.Get("s1")
			if ttl == sequencer.NoTombstone {
				require.Nil(t, st)
				return
			}
			require.False(t, st.EndedAt.IsZero())
			// A late copy of the ended sequence is a duplicate while the tombstone lives.
			b.broker.PublishSeq("s1", 2, false)
			out, _ = b.runNext(t)
			require.Equal(t, sequencer.OutcomeIdle, out)
			require.Equal(t, seqs(1, 3), b.got("s1"))
			require.Zero(t, b.broker.Len())
			st, _ = b.store.Get("s1")
			require.Equal(t, uint64(1), st.Counters.Duplicates)
			// Once expired, the tombstone is deleted and the session starts anew.
			b.clock.Advance(2 * time.Hour)
			publish(b, "s1", seqs(1, 1), 1)
			out, _ = b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, []int64{1, 2, 3, 1}, b.got("s1"))
		})
	}
}

func TestEngineReversedUsesWindowWithoutDeferral(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	publish(b, "s1", seqs(10, 1), 10)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, seqs(1, 10), b.got("s1"))
	calls := b.broker.Calls()
	require.Zero(t, calls["defer"], "messages whose predecessors arrive while held are never deferred")
	require.Zero(t, b.broker.Len())
}

func TestEngineDefersBeyondWindowAndDrainsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, WindowMessages: sequencer.NoWindow, DeferredBatch: 4, ReceiveBatch: 3})
	publish(b, "s1", seqs(10, 1), 10)
	out, _ := b.runNext(t)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, seqs(1, 10), b.got("s1"))
	calls := b.broker.Calls()
	require.Equal(t, 9, calls["defer"])
	require.Equal(t, 3, calls["receive_deferred"], "9 consecutive deferred messages in runs of at most 4")
	require.Zero(t, b.broker.Len())
}
