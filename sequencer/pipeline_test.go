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

// onCall returns a process hook that calls fn with the 1-based number of each call of op (before
// it takes effect) and passes every other call.
func onCall(op string, fn func(n int64) error) func(sequencertest.Call) error {
	var n atomic.Int64
	return func(c sequencertest.Call) error {
		if c.Op != op || c.Phase != sequencertest.Before {
			return nil
		}
		return fn(n.Add(1))
	}
}

// onComplete is onCall for the complete calls.
func onComplete(fn func(n int64) error) func(sequencertest.Call) error { return onCall("complete", fn) }

// restart replaces the bundle's process (after a crash) with a new one and a new engine.
func (b *bundle) restart(t *testing.T, cfg sequencer.EngineConfig) {
	t.Helper()
	b.proc = &sequencertest.Process{}
	b.client = b.broker.NewClient(b.proc)
	b.engine = b.newEngine(t, cfg, b.storeClient())
}

func TestEnginePipelinedCompletesOverlapTheNextHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pending int
		bound   bool
		runs    bool // pipelined runs instead of one save per message
		// held is the complete that waits for the next handler call [1]; last marks 4 last.
		held    int64
		last    bool
		overlap bool
		// accepted passes RunOptions.AcceptSent, ago before the run starts.
		accepted bool
		ago      time.Duration
	}{
		{pending: 4, bound: true, overlap: true},
		{pending: 1, bound: true, overlap: false},
		// A store of its own (Postgres) says nothing about the lock: the engine fences, and no
		// completion overlaps the next handler call.
		{pending: 4, bound: false, overlap: false},
		// ... but for the entries of a pipelined run the lease bounds the calls instead: once a
		// completion was answered, the next ones overlap the handler calls.
		// (With a store of its own no call of the run has been answered before complete(1), so
		// the lease waits for it: the second complete is the one held.)
		{pending: 4, bound: false, runs: true, held: 2, overlap: true},
		{pending: 4, bound: false, runs: true, held: 1, overlap: false},
		// The accept is a call the broker answered: given its time, the lease runs from it, and
		// the first completion overlaps the next handler call too; not once the lease is over.
		{pending: 4, bound: false, runs: true, held: 1, accepted: true, overlap: true},
		{pending: 4, bound: false, runs: true, held: 1, accepted: true, ago: 2 * time.Second, overlap: false},
		{pending: 4, bound: true, runs: true, held: 2, overlap: true},
		// The last message is saved on its own, right after the run's record: the record tells
		// the next holder to wait, so its handler call does not wait for the run's completions.
		{pending: 4, bound: false, runs: true, held: 3, last: true, overlap: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("pending=%d bound=%v runs=%v held=%d last=%v accepted=%v ago=%s", tt.pending, tt.bound, tt.runs, tt.held, tt.last, tt.accepted, tt.ago), func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: true, MaxPendingSettlements: tt.pending}
			if tt.runs {
				cfg = sequencer.EngineConfig{MaxPendingSettlements: tt.pending}
			}
			held := max(tt.held, 1)
			b := setupStore(t, cfg, tt.bound)
			next := make(chan struct{})
			b.setFail(func(m *sequencer.Message) error {
				if m.Sequence == held+1 {
					close(next)
				}
				return nil
			})
			var overlapped atomic.Bool
			b.proc.Hook = onComplete(func(n int64) error {
				if n != held {
					return nil
				}
				// The complete held waits for the handler of the next message.
				wait := 2 * time.Second
				if !tt.overlap {
					wait = 50 * time.Millisecond
				}
				select {
				case <-next:
					overlapped.Store(true)
				case <-time.After(wait):
				}
				return nil
			})
			last, want := int64(0), sequencer.OutcomeIdle
			if tt.last {
				last, want = 4, sequencer.OutcomeEnded
			}
			publish(b, "s1", seqs(1, 4), last)
			var opts *sequencer.RunOptions
			if tt.accepted {
				opts = &sequencer.RunOptions{AcceptSent: b.clock.Now().Add(-tt.ago)}
			}
			out, _ := b.runNextWith(t, opts)
			require.Equal(t, want, out)
			require.Equal(t, tt.overlap, overlapped.Load(), "handler(%d) ran while complete(%d) was in flight", held+1, held)
			require.Equal(t, seqs(1, 4), b.got("s1"))
			require.Zero(t, b.broker.Len(), "every message is completed before the session is released")
		})
	}
}

func TestEnginePipelinedCompleteErrorStopsTheSession(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		outcome sequencer.Outcome
	}{
		{"lock lost", fmt.Errorf("complete: %w", sequencer.ErrLockLost), sequencer.OutcomeLockLost},
		{"other error", sequencertest.ErrInjected, sequencer.OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: true, MaxPendingSettlements: 4}
			b := setupBound(t, cfg) // a store of its own never lets completes overlap handlers
			third := make(chan struct{})
			var handlerCause error
			b.setFail(nil)
			h := sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
				if m.Sequence < 3 {
					return b.handle(ctx, m)
				}
				if m.Sequence == 3 {
					close(third)
					if errors.Is(tt.err, sequencer.ErrLockLost) {
						<-ctx.Done() // a lost lock ends the handler's ctx at once
						handlerCause = context.Cause(ctx)
						return ctx.Err()
					}
				}
				return b.handle(ctx, m)
			})
			e, err := sequencer.NewEngine(cfg, sequencer.EngineDeps{Store: b.storeClient(), Handler: h, Clock: b.clock})
			require.NoError(t, err)
			// complete(1) fails once handler(3) is running: complete(2) is already on its way.
			b.proc.Hook = onComplete(func(n int64) error {
				if n != 1 {
					return nil
				}
				select {
				case <-third:
				case <-time.After(5 * time.Second):
				}
				return tt.err
			})
			publish(b, "s1", seqs(1, 6), 0)
			sess, err := b.client.AcceptNext(t.Context())
			require.NoError(t, err)
			out, err := e.RunSession(t.Context(), sess, nil)
			require.Equal(t, tt.outcome, out)
			require.ErrorIs(t, err, tt.err, "the background error is what the run returns")

			st, _ := b.store.Get("s1")
			calls := b.broker.Calls()
			if errors.Is(tt.err, sequencer.ErrLockLost) {
				require.ErrorIs(t, handlerCause, sequencer.ErrLockLost)
				require.Equal(t, []int64{1, 2}, b.got("s1"))
				require.Equal(t, int64(3), st.Next, "nothing saved after the lock was lost")
				require.LessOrEqual(t, calls["complete"], 1, "at most complete(2), issued before the loss, reached the broker")
			} else {
				// The error surfaces at the next complete or handler call: whatever was handled
				// until then was saved first.
				require.Equal(t, int64(len(b.got("s1"))+1), st.Next)
			}
			require.Zero(t, calls["defer"]+calls["dead_letter"])
			active, _ := b.broker.Pending("s1")
			require.GreaterOrEqual(t, active, 1+6-len(b.got("s1")), "message 1 and the unhandled ones return to the broker")

			// The next run completes the handled ones as duplicates and hands nothing twice.
			b.engine = b.newEngine(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited}, b.storeClient())
			b.setFail(nil)
			b.runAll(t)
			require.Equal(t, seqs(1, 6), b.got("s1"), "in order, each once")
			require.Zero(t, b.broker.Len())
		})
	}
}

func TestEngineCrashWithCompletesInFlightOnlyLeavesDuplicates(t *testing.T) {
	t.Parallel()
	cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: true, MaxPendingSettlements: 8}
	b := setupBound(t, cfg) // completes in flight while handlers run: a store kept in the session
	crashed := make(chan struct{})
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 4 {
			b.proc.Crash() // completes 1–3 are still in flight
			close(crashed)
			return errors.New("process died")
		}
		return nil
	})
	b.proc.Hook = onComplete(func(int64) error {
		select {
		case <-crashed:
		case <-time.After(5 * time.Second):
		}
		return nil
	})
	publish(b, "s1", seqs(1, 6), 6)
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	out, err := b.engine.RunSession(t.Context(), sess, nil)
	require.Equal(t, sequencer.OutcomeLockLost, out)
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	active, _ := b.broker.Pending("s1")
	require.Equal(t, 6, active, "the completes in flight were cut off by the crash")
	st, _ := b.store.Get("s1")
	require.Equal(t, int64(4), st.Next, "1–3 were saved as handled")

	b.setFail(nil)
	b.restart(t, cfg)
	b.runAll(t)
	require.Equal(t, seqs(1, 6), b.got("s1"), "each handed over exactly once")
	require.Equal(t, uint64(3), b.engine.Stats().Duplicates, "1–3 came back and were only completed")
	require.Zero(t, b.broker.Len())
}

func TestEngineRecordedRunSavesOncePerRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		order       []int64
		eachMessage bool
		runs        uint64
		saves       int
	}{
		// One save records 1–19, one ends the session with 20 (the last is never in a run): that
		// save is the tombstone, which the end does not write again.
		{"runs", seqs(1, 20), false, 1, 2},
		{"runs over the window", seqs(20, 1), false, 1, 2},
		// One per message, and a claim before the first handler call (a store of its own).
		{"save each message", seqs(1, 20), true, 0, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: tt.eachMessage, ReceiveBatch: 32})
			publish(b, "s1", tt.order, 20)
			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, seqs(1, 20), b.got("s1"))
			require.Zero(t, b.broker.Len())
			require.Equal(t, tt.runs, b.engine.Stats().Runs)
			require.Equal(t, tt.saves, b.store.Calls()["save"])
			st, _ := b.store.Get("s1")
			require.Empty(t, st.InFlight)
			require.Equal(t, int64(21), st.Next)
		})
	}
}

func TestEngineRecordedRunAfterACrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// order is published before the crash, later after it.
		order, later []int64
		// the process crashes at the crashAt-th complete, before or after it takes effect.
		crashAt int64
		after   bool
		want    []int64
	}{
		{name: "entry completed: gone, not handled again", order: seqs(1, 5), crashAt: 3, after: true, want: seqs(1, 5)},
		{name: "entry not completed: handled once more", order: seqs(1, 5), crashAt: 3, want: []int64{1, 2, 3, 3, 4, 5}},
		{name: "first entry not completed", order: seqs(1, 5), crashAt: 1, want: []int64{1, 1, 2, 3, 4, 5}},
		// 4 is published first, so it comes back before the entries (1–3, all gone): the
		// session idles with 4 held, which settles the record.
		{name: "settled when the session idles", order: []int64{4, 1, 2, 3}, crashAt: 3, after: true, want: seqs(1, 4)},
		// ... or when a message published later is delivered.
		{name: "settled by a later message", order: []int64{4, 1, 2, 3}, later: []int64{5}, crashAt: 3, after: true, want: seqs(1, 5)},
		// 1 and 2 are gone, 3 is delivered after 4: 3 and everything after it are still to do.
		{name: "settled by an entry", order: []int64{4, 1, 2, 3}, crashAt: 2, after: true, want: seqs(1, 4)},
		// Published in reverse, the run 1–5 is recorded from the window. 5, 4, 3 come back first
		// (in broker order); 1 and 2, not delivered before the session idles, are gone.
		{name: "reversed: settled when the session idles", order: seqs(5, 1), crashAt: 2, after: true, want: seqs(1, 5)},
		{name: "reversed: entry not completed", order: seqs(5, 1), crashAt: 2, want: []int64{1, 2, 2, 3, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited}
			b := setup(t, cfg)
			var completes atomic.Int64
			b.proc.Hook = func(c sequencertest.Call) error {
				if c.Op != "complete" || (c.Phase == sequencertest.After) != tt.after {
					return nil
				}
				if completes.Add(1) == tt.crashAt {
					return sequencertest.ErrCrash
				}
				return nil
			}
			publish(b, "s1", tt.order, 0)
			out, _ := b.engine.RunSession(t.Context(), mustAccept(t, b), nil)
			require.Equal(t, sequencer.OutcomeLockLost, out)
			st, _ := b.store.Get("s1")
			require.NotEmpty(t, st.InFlight, "the run was recorded")
			require.Equal(t, int64(1), st.Next)

			b.restart(t, cfg)
			publish(b, "s1", tt.later, 0)
			b.runAll(t)
			require.Equal(t, tt.want, b.got("s1"))
			require.Zero(t, b.broker.Len())
			st, _ = b.store.Get("s1")
			require.Empty(t, st.InFlight, "the record is settled")
			require.Equal(t, tt.want[len(tt.want)-1]+1, st.Next)
		})
	}
}

func mustAccept(t *testing.T, b *bundle) sequencer.Session {
	t.Helper()
	sess, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	return sess
}

func TestEngineInheritedRecordHoldsOtherCopiesUntilSettled(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited})
	copyOf1 := b.broker.PublishSeq("s1", 1, false)
	b.broker.PublishSeq("s1", 3, true)
	// An earlier run recorded 1 and 2 with broker sequence numbers the broker no longer holds:
	// both were handled and completed. The other copy of 1 must not be handed over again.
	st := sequencer.NewState()
	st.InFlight = map[int64]int64{1: copyOf1 + 100, 2: copyOf1 + 101}
	b.store.Put("s1", st)

	outs := b.runAll(t)
	require.Equal(t, []sequencer.Outcome{sequencer.OutcomeEnded}, outs)
	require.Equal(t, []int64{3}, b.got("s1"))
	require.Equal(t, uint64(1), b.engine.Stats().Duplicates)
	require.Zero(t, b.broker.Len())
	st, _ = b.store.Get("s1")
	require.Empty(t, st.InFlight)
	require.Equal(t, uint64(3), st.Counters.Handled, "the two entries count as handled, and 3")
}

// With a store of its own (Postgres), a save says nothing about the session lock. A worker whose
// lock is gone while a completion is still unanswered (the SDK retries a settlement on a dead
// link for seconds) must not go on to the next message: another worker holds the session by
// then and hands that message over itself, so the first worker's call would come after the
// other's progress. The engine fences: no handler call before the completions issued since the
// last save are answered, and a new holder claims the session in the store before its first
// handler call, so that the earlier holder can save no more.
func TestEngineFencesAStoreOfItsOwn(t *testing.T) {
	t.Parallel()
	cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: true, MaxPendingSettlements: 4}
	b := setup(t, cfg)
	publish(b, "s1", seqs(1, 5), 5)

	// A's complete(1) hangs on a link that is gone: its lock expires meanwhile.
	expired, release := make(chan struct{}), make(chan struct{})
	var staleCalls atomic.Int32
	var bStarted atomic.Bool
	b.setFail(func(m *sequencer.Message) error {
		select {
		case <-expired:
			if !bStarted.Load() {
				staleCalls.Add(1) // A's call after its lock expired
			}
		default:
		}
		return nil
	})
	b.proc.Hook = onComplete(func(n int64) error {
		if n == 1 {
			b.broker.ExpireLocks()
			close(expired)
			<-release
		}
		return nil
	})
	sessA, err := b.client.AcceptNext(t.Context())
	require.NoError(t, err)
	doneA := make(chan error, 1)
	go func() {
		_, err := b.engine.RunSession(t.Context(), sessA, nil)
		doneA <- err
	}()
	<-expired
	time.Sleep(100 * time.Millisecond) // time enough for A to call the handler, were it not fenced
	require.Zero(t, staleCalls.Load(), "A did not hand message 2 over after its lock expired")

	// B takes the session over and runs it to its end.
	bStarted.Store(true)
	procB := &sequencertest.Process{}
	clientB := b.broker.NewClient(procB)
	engineB := b.newEngine(t, cfg, b.store.Client(procB))
	sessB, err := clientB.Accept(t.Context(), "s1")
	require.NoError(t, err)
	outB, err := engineB.RunSession(t.Context(), sessB, nil)
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeEnded, outB)

	close(release)
	require.ErrorIs(t, <-doneA, sequencer.ErrLockLost, "A stops once its completion is refused")
	require.Equal(t, seqs(1, 5), b.got("s1"), "each handed over once, in order")
	require.Zero(t, staleCalls.Load())
}

// TestPipelinedRunLease: with PipelineRuns a run does not call the handler past
// EngineConfig.PipelineLease after the last call the broker answered (a connection cut leaves its
// completions hanging, and another replica may have the session by then), and a run that
// inherits a record waits the lease before its first handler call.
func TestPipelinedRunLease(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{true, false} {
		t.Run(fmt.Sprintf("bound=%v", bound), func(t *testing.T) {
			t.Parallel()
			testPipelinedRunLease(t, bound)
		})
	}
}

// testPipelinedRunLease is TestPipelinedRunLease with a store kept in the session (bound, the
// Service Bus session state's kind) or a store of its own (Postgres's kind).
func testPipelinedRunLease(t *testing.T, bound bool) {
	const quiet = 200 * time.Millisecond // real time in which no handler call may come

	t.Run("a run stops calling once its completions go unanswered for the lease", func(t *testing.T) {
		t.Parallel()
		cfg := sequencer.EngineConfig{MaxPendingSettlements: 4}
		b := setupStore(t, cfg, bound)
		release := make(chan struct{})
		b.proc.Hook = onComplete(func(n int64) error {
			if n >= 2 {
				<-release // from the second on, the completions hang (a cut connection)
			}
			return nil
		})
		third := make(chan struct{})
		b.setFail(func(m *sequencer.Message) error {
			if m.Sequence == 3 {
				b.clock.Advance(2 * time.Second) // the lease runs out while handler(3) runs
				close(third)
			}
			return nil
		})
		publish(b, "s1", seqs(1, 6), 0)
		done := b.runNextAsync(t)
		<-third
		time.Sleep(quiet)
		require.Equal(t, seqs(1, 3), b.got("s1"), "no handler call while the completions are unanswered past the lease")
		close(release)
		require.Equal(t, sequencer.OutcomeIdle, <-done)
		require.Equal(t, seqs(1, 6), b.got("s1"))
	})

	// inherit leaves in the store an earlier holder's run of 1 and 2, not completed, with both
	// entries and 3 at the broker (after what first publishes), and starts a run of s1.
	inherit := func(t *testing.T, cfg sequencer.EngineConfig, first func(*bundle)) (*bundle, <-chan sequencer.Outcome) {
		b := setupStore(t, cfg, bound)
		if first != nil {
			first(b)
		}
		bs1 := b.broker.PublishSeq("s1", 1, false)
		bs2 := b.broker.PublishSeq("s1", 2, false)
		b.broker.PublishSeq("s1", 3, false)
		st := sequencer.NewState()
		st.InFlight = map[int64]int64{1: bs1, 2: bs2}
		b.store.Put("s1", st)
		done := b.runNextAsync(t)
		return b, done
	}

	t.Run("a run that inherits a record waits the lease before a handler call", func(t *testing.T) {
		t.Parallel()
		// An unsequenced message passed through is handed over while the record is unresolved,
		// before any save.
		cfg := sequencer.EngineConfig{MaxPendingSettlements: 4, Unsequenced: sequencer.UnsequencedPassThrough}
		b, done := inherit(t, cfg, func(b *bundle) { b.broker.Publish("s1", nil, []byte("unsequenced")) })
		time.Sleep(quiet)
		require.Empty(t, b.got("s1"), "no handler call before the lease has passed")
		b.clock.Advance(time.Second)
		require.Equal(t, sequencer.OutcomeIdle, <-done)
		require.Equal(t, []int64{0, 1, 2, 3}, b.got("s1"), "the unsequenced message (sequence 0), then the replay")
	})

	t.Run("a run that inherits a record waits the lease before a save resolves it", func(t *testing.T) {
		t.Parallel()
		b, done := inherit(t, sequencer.EngineConfig{MaxPendingSettlements: 4}, nil)
		time.Sleep(quiet)
		// Every entry is delivered, so the run could resolve the record (and save the exact
		// Next) at once; a holder that loaded that save would find no record to wait for.
		got, _ := b.store.Get("s1")
		require.NotEmpty(t, got.InFlight, "the record stays until the lease has passed")
		require.Empty(t, b.got("s1"), "no replay before the lease has passed")
		b.clock.Advance(time.Second)
		require.Equal(t, sequencer.OutcomeIdle, <-done)
		require.Equal(t, seqs(1, 3), b.got("s1"))
	})
}

// TestOneSaveEachPipelined: with SaveEachMessage and PipelineRuns the handler goes on while the
// state save of the messages before runs in the background, at most MaxPendingSettlements
// messages ahead of the last save that landed; a message is completed only once a save covering
// it landed; a holder that finds a state saved that way waits the lease first; and the save at
// the release clears the mark.
func TestOneSaveEachPipelined(t *testing.T) {
	t.Parallel()
	const quiet = 200 * time.Millisecond // real time in which no further handler call may come
	cfg := sequencer.EngineConfig{SaveEachMessage: true, MaxPendingSettlements: 4}

	for _, bound := range []bool{true, false} {
		t.Run(fmt.Sprintf("bound=%v/the handler goes at most MaxPendingSettlements ahead of a hanging save", bound), func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, cfg, bound)
			release := make(chan struct{})
			first := int64(1) // the save that hangs: the first after the one that stores the mark
			if !bound {
				first = 2 // a store of its own is claimed first
			}
			var completesBefore atomic.Int64
			b.proc.Hook = func(c sequencertest.Call) error {
				if c.Op == "complete" && c.Phase == sequencertest.Before {
					select {
					case <-release:
					default:
						completesBefore.Add(1)
					}
				}
				return nil
			}
			saves := onCall("save", func(n int64) error {
				if n == first+1 {
					<-release
				}
				return nil
			})
			hook := b.proc.Hook
			b.proc.Hook = func(c sequencertest.Call) error {
				if err := hook(c); err != nil {
					return err
				}
				return saves(c)
			}
			publish(b, "s1", seqs(1, 10), 0)
			done := b.runNextAsync(t)
			require.Eventually(t, func() bool { return len(b.got("s1")) >= 6 }, 5*time.Second, time.Millisecond)
			time.Sleep(quiet)
			require.Equal(t, seqs(1, 6), b.got("s1"), "1 saved with the mark, then 2 in the hanging save and 3-6 behind it")
			require.LessOrEqual(t, completesBefore.Load(), int64(1), "only message 1, whose save landed, is completed")
			close(release)
			require.Equal(t, sequencer.OutcomeIdle, <-done)
			require.Equal(t, seqs(1, 10), b.got("s1"))
			require.Zero(t, b.broker.Len(), "every message completed")
			st, _ := b.store.Get("s1")
			require.Equal(t, int64(11), st.Next)
			require.False(t, st.Ahead, "the release's save clears the mark")
		})
	}

	for _, bound := range []bool{true, false} {
		t.Run(fmt.Sprintf("bound=%v/a batch in hand is saved in a few saves, not one a message", bound), func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{SaveEachMessage: true, MaxPendingSettlements: 16}
			b := setupStore(t, cfg, bound)
			var saves atomic.Int64
			b.proc.Hook = onCall("save", func(int64) error { saves.Add(1); return nil })
			// A handler slower than a save: each save lands before the next message is handled,
			// so one started as soon as the one before landed would cover a single message.
			b.setFail(func(*sequencer.Message) error { time.Sleep(time.Millisecond); return nil })
			publish(b, "s1", seqs(1, 32), 0)
			done := b.runNextAsync(t)
			require.Eventually(t, func() bool { return len(b.got("s1")) == 32 && b.broker.Len() == 0 }, 5*time.Second, time.Millisecond)
			b.clock.Advance(time.Second)
			require.Equal(t, sequencer.OutcomeIdle, <-done)
			require.Equal(t, seqs(1, 32), b.got("s1"))
			st, _ := b.store.Get("s1")
			require.Equal(t, int64(33), st.Next)
			// The mark's save (a store of its own claims the session with it), then one save for
			// every 12 handled messages while more are in hand (three quarters of the window), the
			// rest of the batch at its end, and the release's save that clears the mark.
			require.LessOrEqual(t, saves.Load(), int64(6), "saves for 32 messages")
		})
	}

	for _, bound := range []bool{true, false} {
		t.Run(fmt.Sprintf("bound=%v/the end of a batch saves what was handled after the save in flight", bound), func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{SaveEachMessage: true, MaxPendingSettlements: 16}
			b := setupBlocking(t, cfg) // the next receive waits for the idle timeout
			if !bound {
				b.bound = false
				b.engine = b.newEngine(t, cfg, b.storeClient())
			}
			slow := int64(2) // the save of messages 2-13, after the one that stores the mark
			if !bound {
				slow = 3 // a store of its own is claimed first
			}
			b.proc.Hook = onCall("save", func(n int64) error {
				if n == slow {
					time.Sleep(100 * time.Millisecond)
				}
				return nil
			})
			// 1 with the mark, 2-13 in the slow save, 14-16 handled while it is in flight: within
			// the window, so only the end of the batch makes the run wait for it.
			publish(b, "s1", seqs(1, 16), 0)
			done := b.runNextAsync(t)
			require.Eventually(t, func() bool { return b.broker.Len() == 0 }, 5*time.Second, time.Millisecond,
				"every message completed before the idle timeout, not at the release")
			require.Equal(t, seqs(1, 16), b.got("s1"))
			require.Equal(t, sequencer.OutcomeIdle, idleOut(t, b, done))
		})
	}

	t.Run("a holder that finds the mark waits the lease", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, cfg)
		publish(b, "s1", seqs(1, 3), 0)
		st := sequencer.NewState()
		st.Ahead = true
		b.store.Put("s1", st)
		done := b.runNextAsync(t)
		time.Sleep(quiet)
		require.Empty(t, b.got("s1"), "no handler call before the lease has passed")
		got, _ := b.store.Get("s1")
		require.True(t, got.Ahead, "no save before the lease has passed")
		b.clock.Advance(time.Second)
		require.Equal(t, sequencer.OutcomeIdle, <-done)
		require.Equal(t, seqs(1, 3), b.got("s1"))
		got, _ = b.store.Get("s1")
		require.False(t, got.Ahead)
	})
}

// lateSession delivers one message a receive late the first time it comes, after a later one:
// the SDK releases a message that lands on the link between two receives while a later one may
// already wait in the link's buffer, so the broker's next delivery of the first comes after the
// second, out of broker order.
type lateSession struct {
	*sequencertest.Session
	late    int64 // the broker sequence number delivered late
	pending *sequencer.Message
}

func (s *lateSession) Receive(ctx context.Context, max int) ([]*sequencer.Message, error) {
	if m := s.pending; m != nil {
		s.pending = nil
		return []*sequencer.Message{m}, nil
	}
	msgs, err := s.Session.Receive(ctx, max)
	if len(msgs) < 2 {
		return msgs, err
	}
	for i, m := range msgs {
		if m.BrokerSequence == s.late {
			s.late, s.pending = 0, m
			return append(msgs[:i:i], msgs[i+1:]...), err
		}
	}
	return msgs, err
}

// An inherited record is resolved right when the broker redelivers an entry after a later one
// (the SDK's releaser above): an entry not delivered is gone only if the broker no longer holds
// it, so the late entry is handed over, in order, and not taken as handled.
func TestEngineInheritedRecordWithAnEntryDeliveredLate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		crashAt int64 // the crashAt-th complete lands, then the process crashes
		late    int64 // the sequence delivered late after the crash
		want    []int64
	}{
		{name: "the first entry left", crashAt: 3, late: 4, want: seqs(1, 6)},
		{name: "an entry after the first left", crashAt: 2, late: 4, want: seqs(1, 6)},
		{name: "none gone", crashAt: 0, late: 1, want: seqs(1, 6)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited}
			b := setup(t, cfg)
			bs := map[int64]int64{}
			for seq := int64(1); seq <= 6; seq++ {
				bs[seq] = b.broker.PublishSeq("s1", seq, false)
			}
			var completes atomic.Int64
			b.proc.Hook = func(c sequencertest.Call) error {
				if c.Op == "complete" && c.Phase == sequencertest.After && completes.Add(1) == tt.crashAt {
					return sequencertest.ErrCrash
				}
				if c.Op == "complete" && c.Phase == sequencertest.Before && tt.crashAt == 0 {
					return sequencertest.ErrCrash
				}
				return nil
			}
			out, _ := b.engine.RunSession(t.Context(), mustAccept(t, b), nil)
			require.Equal(t, sequencer.OutcomeLockLost, out)
			st, _ := b.store.Get("s1")
			require.NotEmpty(t, st.InFlight, "the run was recorded")

			b.restart(t, cfg)
			sess := &lateSession{Session: mustAccept(t, b).(*sequencertest.Session), late: bs[tt.late]}
			_, err := b.engine.RunSession(t.Context(), sess, nil)
			require.NoError(t, err)
			require.Nil(t, sess.pending, "the late message was delivered")
			b.runAll(t)
			got := b.got("s1")
			require.Equal(t, tt.want, dedupe(got), "every sequence handed over, in order: %v", got)
			require.Zero(t, b.broker.Len())
			st, _ = b.store.Get("s1")
			require.Empty(t, st.InFlight, "the record is settled")
			require.Equal(t, int64(7), st.Next)
		})
	}
}

// dedupe drops the replays of a handed-over sequence (consecutive repeats): what is left is in
// order with nothing skipped exactly when the handler saw the session in order.
func dedupe(got []int64) []int64 {
	var out []int64
	for _, s := range got {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}
