package sequencer_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

type runnerBundle struct {
	broker *sequencertest.Broker
	store  *sequencertest.Store
	runner *sequencer.Runner

	mu      sync.Mutex
	handled map[string][]int64
	// inFlight counts handler calls per session running now, to catch concurrent handling.
	inFlight  map[string]int
	maxGlobal atomic.Int64
	global    atomic.Int64
	block     chan struct{}
}

func setupRunner(t *testing.T, maxSessions int, handlerDelay time.Duration) *runnerBundle {
	t.Helper()
	return setupRunnerWith(t, maxSessions, handlerDelay, 50*time.Millisecond)
}

func setupRunnerWith(t *testing.T, maxSessions int, handlerDelay, acceptTimeout time.Duration) *runnerBundle {
	t.Helper()
	b := &runnerBundle{handled: map[string][]int64{}, inFlight: map[string]int{}}
	b.broker = sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	b.store = sequencertest.NewStore()
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: b.broker.NewClient(nil),
		Store:  b.store.Client(nil),
		Handler: sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			b.mu.Lock()
			b.inFlight[m.SessionID]++
			if b.inFlight[m.SessionID] > 1 {
				t.Errorf("session %s: two messages handled at once", m.SessionID)
			}
			block := b.block
			b.mu.Unlock()
			n := b.global.Add(1)
			for {
				cur := b.maxGlobal.Load()
				if n <= cur || b.maxGlobal.CompareAndSwap(cur, n) {
					break
				}
			}
			defer b.global.Add(-1)
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
					b.mu.Lock()
					b.inFlight[m.SessionID]--
					b.mu.Unlock()
					return ctx.Err()
				}
			}
			time.Sleep(handlerDelay)
			b.mu.Lock()
			defer b.mu.Unlock()
			b.inFlight[m.SessionID]--
			b.handled[m.SessionID] = append(b.handled[m.SessionID], m.Sequence)
			return nil
		}),
		Engine:                sequencer.EngineConfig{Pipelining: sequencer.Awaited, IdleTimeout: 30 * time.Millisecond, Retry: sequencer.RetryPolicy{Attempts: 1}},
		MaxConcurrentSessions: maxSessions,
		AcceptTimeout:         acceptTimeout,
		ErrorBackoff:          5 * time.Millisecond,
	})
	require.NoError(t, err)
	b.runner = r
	return b
}

func (b *runnerBundle) got(id string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.handled[id]...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRunnerManySessionsBoundedConcurrency(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 3, time.Millisecond)
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		for s := int64(5); s >= 1; s-- {
			b.broker.PublishSeq(id, s, s == 5)
		}
	}
	require.NoError(t, b.runner.Start(t.Context()))
	require.Error(t, b.runner.Start(t.Context()), "a second start is refused")
	waitFor(t, "all sessions", func() bool { return b.broker.Len() == 0 && b.runner.Stats().Handled == 30 })
	require.NoError(t, b.runner.Stop(t.Context()))
	for _, id := range ids {
		require.Equal(t, seqs(1, 5), b.got(id), id)
	}
	require.LessOrEqual(t, b.maxGlobal.Load(), int64(3))
	st := b.runner.Stats()
	require.Equal(t, uint64(30), st.Handled)
	require.Equal(t, 0, st.ActiveSessions)
	require.Equal(t, uint64(30), st.BrokerCalls["complete"])
}

func TestRunnerGracefulStopFinishesMessageInHand(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 2, 0)
	b.block = make(chan struct{})
	publish := func(id string) {
		for _, s := range []int64{1, 3, 2} {
			b.broker.PublishSeq(id, s, false)
		}
	}
	publish("a")
	require.NoError(t, b.runner.Start(t.Context()))
	waitFor(t, "handler running", func() bool { return b.global.Load() == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- b.runner.Stop(t.Context()) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("stop returned before the message in hand finished: %v", err)
	default:
	}
	close(b.block)
	require.NoError(t, <-stopped)
	<-b.runner.Stopped()
	got := b.got("a")
	require.NotEmpty(t, got)
	require.Equal(t, int64(1), got[0])
	st, _ := b.store.Get("a")
	require.Equal(t, int64(len(got)+1), st.Next, "the handled message was saved")
	active, deferred := b.broker.Pending("a")
	require.Equal(t, 3-len(got), active+deferred, "nothing lost")
}

func TestRunnerStopDeadlineCancels(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 1, 0)
	b.block = make(chan struct{}) // never closed: only cancellation ends the handler
	b.broker.PublishSeq("a", 1, false)
	require.NoError(t, b.runner.Start(t.Context()))
	waitFor(t, "handler running", func() bool { return b.global.Load() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	err := b.runner.Stop(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, b.got("a"))
	active, _ := b.broker.Pending("a")
	require.Equal(t, 1, active, "the canceled message returns to the broker")
	st, _ := b.store.Get("a")
	if st != nil { // a store of its own has the run's claim (Next unchanged), nothing more
		require.Equal(t, int64(1), st.Next, "the canceled message is not recorded as handled")
	}
}

func TestRunnerStopAndCancel(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 1, 0)
	b.block = make(chan struct{})
	b.broker.PublishSeq("a", 1, false)
	require.NoError(t, b.runner.Start(t.Context()))
	waitFor(t, "handler running", func() bool { return b.global.Load() == 1 })
	require.NoError(t, b.runner.StopAndCancel(t.Context()))
	require.Empty(t, b.got("a"))
	require.NoError(t, b.runner.Stop(t.Context()), "stop after stop is harmless")
}

func TestRunnerWakeServesStrandedSession(t *testing.T) {
	t.Parallel()
	// An accept-next wait far longer than the test: the wake must interrupt it.
	b := setupRunnerWith(t, 1, 0, time.Hour)
	// Session "a" holds only a deferred message that is due: accept-next never offers it.
	c := b.broker.NewClient(nil)
	bs := b.broker.PublishSeq("a", 1, true)
	sess, err := c.Accept(t.Context(), "a")
	require.NoError(t, err)
	msgs, err := sess.Receive(t.Context(), 1)
	require.NoError(t, err)
	require.NoError(t, sess.(sequencer.DeferringSession).Defer(t.Context(), msgs[0]))
	require.NoError(t, sess.Close(t.Context()))
	st := sequencer.NewState()
	st.Deferred[1] = bs
	b.store.Put("a", st)
	require.True(t, st.DueDeferred())

	require.NoError(t, b.runner.Start(t.Context()))
	time.Sleep(60 * time.Millisecond)
	require.Empty(t, b.got("a"), "accept-next does not offer a session with only deferred messages")
	start := time.Now()
	b.runner.Wake("a")
	b.runner.Wake("a")
	waitFor(t, "woken session", func() bool { return len(b.got("a")) == 1 })
	require.Less(t, time.Since(start), 5*time.Second, "served while the accept-next wait had an hour to go")
	require.NoError(t, b.runner.Stop(t.Context()))
	require.Zero(t, b.broker.Len())
}

func TestRunnerNotStartedStopIsNoop(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 1, 0)
	require.NoError(t, b.runner.Stop(t.Context()))
	require.NoError(t, b.runner.StopAndCancel(t.Context()))
	_, err := sequencer.NewRunner(sequencer.RunnerConfig{})
	require.Error(t, err)
}

func TestRunnerResumeParkedSession(t *testing.T) {
	t.Parallel()
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	store := sequencertest.NewStore()
	var mu sync.Mutex
	var handled []int64
	failing := true
	var events atomic.Int64
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: broker.NewClient(nil),
		Store:  store.Client(nil),
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if m.Sequence == 2 && failing {
				return context.DeadlineExceeded
			}
			handled = append(handled, m.Sequence)
			return nil
		}),
		Engine:                sequencer.EngineConfig{Pipelining: sequencer.Awaited, IdleTimeout: 20 * time.Millisecond, Retry: sequencer.RetryPolicy{Attempts: 2}},
		MaxConcurrentSessions: 2,
		AcceptTimeout:         30 * time.Millisecond,
		Observer:              sequencer.ObserverFunc(func(sequencer.Event) { events.Add(1) }),
	})
	require.NoError(t, err)
	require.NotNil(t, r.Engine())
	for s := int64(1); s <= 3; s++ {
		broker.PublishSeq("p", s, s == 3)
	}
	require.NoError(t, r.Start(t.Context()))
	waitFor(t, "parked", func() bool { return r.Stats().Parked == 1 })
	require.NoError(t, r.Stop(t.Context()))
	st, _ := store.Get("p")
	require.NotNil(t, st.Parked)

	mu.Lock()
	failing = false
	mu.Unlock()
	out, err := r.Resume(t.Context(), "p", sequencer.ResumeOptions{Skip: true})
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, []int64{1, 3}, handled)
	stats := r.Stats()
	require.Equal(t, uint64(2), stats.Handled)
	require.Equal(t, uint64(1), stats.DeadLettered)
	require.Equal(t, uint64(1), stats.Retries)
	require.Positive(t, stats.TotalBrokerCalls())
	require.Positive(t, events.Load())
	require.Zero(t, broker.Len())

	_, err = r.RunSessionByID(t.Context(), "p", nil)
	require.NoError(t, err, "a session with a tombstone runs and idles")
}

func TestRunnerBacksOffOnStoreFailure(t *testing.T) {
	t.Parallel()
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	var loads atomic.Int64
	proc := &sequencertest.Process{Hook: func(c sequencertest.Call) error {
		if c.Op == "load" && c.Phase == sequencertest.Before {
			loads.Add(1)
			return sequencertest.ErrInjected
		}
		return nil
	}}
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source:                broker.NewClient(nil),
		Store:                 sequencertest.NewStore().Client(proc),
		Handler:               sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil }),
		MaxConcurrentSessions: 1,
		ErrorBackoff:          50 * time.Millisecond,
	})
	require.NoError(t, err)
	broker.PublishSeq("a", 1, false)
	require.NoError(t, r.Start(t.Context()))
	time.Sleep(120 * time.Millisecond)
	require.NoError(t, r.Stop(t.Context()))
	require.LessOrEqual(t, loads.Load(), int64(4), "failing sessions are retried after a pause, not in a spin")
	require.GreaterOrEqual(t, loads.Load(), int64(2))
	active, _ := broker.Pending("a")
	require.Equal(t, 1, active)
}

func TestRunnerSecondStopCancels(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, 1, 0)
	b.block = make(chan struct{}) // never closed
	b.broker.PublishSeq("a", 1, false)
	require.NoError(t, b.runner.Start(t.Context()))
	waitFor(t, "handler running", func() bool { return b.global.Load() == 1 })
	first := make(chan error, 1)
	go func() { first <- b.runner.Stop(t.Context()) }()
	time.Sleep(10 * time.Millisecond)
	select {
	case <-first:
		t.Fatal("a graceful stop waits for the message in hand")
	default:
	}
	require.NoError(t, b.runner.Stop(t.Context()), "the second stop cancels")
	require.NoError(t, <-first)
	require.Empty(t, b.got("a"))
}

// TestRunnerLeaseCountsFromTheAccept: the Runner gives each run the time it sent the accept
// (RunOptions.AcceptSent), an answered call like any other, so with a store of its own a
// pipelined run's first completion overlaps the next handler call as the later ones do, instead
// of being awaited because nothing was answered yet.
func TestRunnerLeaseCountsFromTheAccept(t *testing.T) {
	t.Parallel()
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	proc := &sequencertest.Process{}
	second := make(chan struct{})
	var overlapped atomic.Bool
	proc.Hook = onComplete(func(n int64) error {
		if n == 1 {
			select {
			case <-second:
				overlapped.Store(true)
			case <-time.After(2 * time.Second):
			}
		}
		return nil
	})
	for s := range int64(4) {
		broker.PublishSeq("s1", s+1, false)
	}
	var handled atomic.Int64
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: broker.NewClient(proc),
		Store:  sequencertest.NewStore().Client(proc),
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			if m.Sequence == 2 {
				close(second)
			}
			handled.Add(1)
			return nil
		}),
		Engine: sequencer.EngineConfig{IdleTimeout: 30 * time.Millisecond, Retry: sequencer.RetryPolicy{Attempts: 1},
			MaxPendingSettlements: 4},
		MaxConcurrentSessions: 1,
		AcceptTimeout:         50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	require.Eventually(t, func() bool { return handled.Load() == 4 }, 5*time.Second, time.Millisecond)
	require.NoError(t, r.Stop(t.Context()))
	require.True(t, overlapped.Load(), "handler(2) ran while complete(1) was in flight")
	require.Zero(t, broker.Len(), "every message completed")
}

// oneSlotRunner is a Runner with one slot on broker, its session calls seen by proc, and a
// handler that records the session of each message; handled returns them in order.
func oneSlotRunner(t *testing.T, broker *sequencertest.Broker, proc *sequencertest.Process) (_ *sequencer.Runner, handled func() []string) {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: broker.NewClient(proc),
		Store:  sequencertest.NewStore().Client(proc),
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, m.SessionID)
			return nil
		}),
		Engine:                sequencer.EngineConfig{Pipelining: sequencer.Awaited, IdleTimeout: 30 * time.Millisecond},
		MaxConcurrentSessions: 1,
		AcceptTimeout:         50 * time.Millisecond,
	})
	require.NoError(t, err)
	return r, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ids)
	}
}

// TestRunnerFreesTheSlotBeforeTheTail: a session's slot is free once its last handler call
// returned (RunOptions.Released): with one slot, the next session is accepted and handled while
// a step of the first one's tail (the last save, the completion, the close) still hangs; the
// tails are bounded (as many as the slots: a third session waits while two tails hang), and Stop
// waits for them.
func TestRunnerFreesTheSlotBeforeTheTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		op   string
		nth  int // the call of op on a session that hangs
	}{
		// The store is not session-bound: the first save is the claim before the handler call.
		{name: "last save", op: "save", nth: 2},
		{name: "completion", op: "complete", nth: 1},
		{name: "close", op: "close", nth: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
			unblock := make(chan struct{})
			hanging := make(chan string, 3)
			var mu sync.Mutex
			calls := map[string]int{}
			r, got := oneSlotRunner(t, broker, &sequencertest.Process{Hook: func(c sequencertest.Call) error {
				if c.Op != tc.op || c.Phase != sequencertest.Before || c.SessionID == "c" {
					return nil
				}
				mu.Lock()
				calls[c.SessionID]++
				n := calls[c.SessionID]
				mu.Unlock()
				if n == tc.nth {
					hanging <- c.SessionID
					<-unblock
				}
				return nil
			}})
			broker.PublishSeq("a", 1, true)
			require.NoError(t, r.Start(t.Context()))
			next := func() string {
				select {
				case id := <-hanging:
					return id
				case <-time.After(5 * time.Second):
					return "nothing"
				}
			}
			require.Equal(t, "a", next())
			broker.PublishSeq("b", 1, true)
			require.Equal(t, "b", next(), "b is accepted and handled while a's tail hangs")
			require.Equal(t, []string{"a", "b"}, got())
			require.Equal(t, 0, r.Stats().ActiveSessions, "a session in its tail is not active")
			broker.PublishSeq("c", 1, true)
			time.Sleep(100 * time.Millisecond)
			require.Equal(t, []string{"a", "b"}, got(), "no third session while two tails hang")
			stopped := make(chan error, 1)
			go func() { stopped <- r.Stop(t.Context()) }()
			select {
			case <-stopped:
				t.Fatal("Stop returned while a session's tail was still in flight")
			case <-time.After(50 * time.Millisecond):
			}
			close(unblock)
			require.NoError(t, <-stopped)
			require.Equal(t, []string{"a", "b"}, got())
			active, _ := broker.Pending("c")
			require.Equal(t, 1, active, "c waits for the next start")
		})
	}
}

// TestRunnerKeepsTheSlotOfARunRefusedAsBusy: a run whose settlement the broker refused as busy
// (a throttled namespace) before its last handler call keeps its slot through its tail, so the
// namespace is not offered more work while it refuses this run's.
func TestRunnerKeepsTheSlotOfARunRefusedAsBusy(t *testing.T) {
	t.Parallel()
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	unblock := make(chan struct{})
	closing := make(chan struct{})
	var refused, closed atomic.Bool
	r, got := oneSlotRunner(t, broker, &sequencertest.Process{Hook: func(c sequencertest.Call) error {
		switch {
		case c.Op == "complete" && c.SessionID == "a" && c.Phase == sequencertest.Before && refused.CompareAndSwap(false, true):
			return sequencer.ErrSettlementRefused
		case c.Op == "close" && c.SessionID == "a" && c.Phase == sequencertest.Before && closed.CompareAndSwap(false, true):
			close(closing)
			<-unblock
		}
		return nil
	}})
	broker.PublishSeq("a", 1, false)
	broker.PublishSeq("a", 2, true)
	require.NoError(t, r.Start(t.Context()))
	<-closing
	broker.PublishSeq("b", 1, true)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, []string{"a", "a"}, got(), "b waits while the refused run's close hangs")
	close(unblock)
	waitFor(t, "b handled and a's refused message completed", func() bool {
		return len(got()) == 3 && broker.Len() == 0
	})
	require.NoError(t, r.Stop(t.Context()))
	require.Equal(t, []string{"a", "a", "b"}, got(), "a's redelivered message is a duplicate")
}
