package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// adversarial is a hand-made scenario for the crash-at-every-step harness of the property test:
// chunks of publications, each drained before the next is published, so a fault in one chunk's
// drain is followed by the publications of the next (duplicates of recorded sequences, the
// missing head of a drain, the last message).
type adversarial struct {
	name   string
	n      int64
	poison []int64
	cfg    sequencer.EngineConfig
	// chunks lists application sequences per publication chunk; a negative number publishes an
	// invalid message (sequence 0).
	chunks [][]int64
}

func (a adversarial) propCase(seed uint64) *propCase {
	const id = "s0"
	c := &propCase{
		rng:      rand.New(rand.NewPCG(seed, seed)),
		sessions: map[string]int64{id: a.n},
		poison:   map[string]map[int64]bool{id: {}},
		flaky:    map[string]map[int64]int{id: {}},
		invalid:  map[int64]bool{},
		cfg:      a.cfg,
	}
	c.cfg.Retry = sequencer.RetryPolicy{Attempts: 2}
	c.cfg.TombstoneTTL = 1000 * time.Hour
	for _, p := range a.poison {
		c.poison[id][p] = true
	}
	for _, chunk := range a.chunks {
		var pubs []func(*sequencertest.Broker)
		for _, s := range chunk {
			if s < 0 {
				pubs = append(pubs, func(b *sequencertest.Broker) {
					c.invalid[b.Publish(id, map[string]any{"Sequence": 0}, nil)] = true
				})
				continue
			}
			pubs = append(pubs, func(b *sequencertest.Broker) { b.PublishSeq(id, s, s == a.n) })
		}
		c.chunks = append(c.chunks, pubs)
	}
	return c
}

func adversarialScenarios() []adversarial {
	return []adversarial{
		{
			// A recorded run 1..8; after a fault, copies of recorded sequences arrive, some
			// already handled, some not, then the end.
			name: "duplicates-of-recorded", n: 10,
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 32},
			chunks: [][]int64{{1, 2, 3, 4, 5, 6, 7, 8}, {3, 4, 8, 5, 9, 10, 2}},
		},
		{
			// Reverse order with a window of 2 smaller than the batch: most is deferred, and
			// the head 1..4 arrives as a run whose last entry is the anchor of the drain.
			name: "window-full-drain", n: 12,
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 32, WindowMessages: 2, DeferredBatch: 3},
			chunks: [][]int64{{12, 11, 10, 9, 8, 7, 6, 5}, {1, 2, 3, 4}},
		},
		{
			// A run interrupted by a batch boundary (batch of 3) with copies and an invalid
			// message inside, the last message inside the batch of the run.
			name: "last-inside-run", n: 7,
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 3},
			chunks: [][]int64{{2, 1, 3, -1, 5, 4, 7, 6, 6, 1}},
		},
		{
			// Poison in the middle of a run, parked (the sweeper resumes with a skip).
			name: "poison-park-mid-run", n: 8,
			poison: []int64{4},
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 32, Poison: sequencer.PoisonPark},
			chunks: [][]int64{{1, 2, 3, 4, 5, 6}, {7, 8}},
		},
		{
			// Poison in the middle of a run, skipped.
			name: "poison-skip-mid-run", n: 8,
			poison: []int64{3},
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 32, Poison: sequencer.PoisonSkip},
			chunks: [][]int64{{2, 1, 3, 4, 5, 6, 7, 8}},
		},
		{
			// A drain in progress when the run is recorded: 4..6 deferred, 1..3 arrive (3 is
			// the anchor), then a run of 7.. follows the drain in the same batch.
			name: "drain-then-run", n: 10,
			cfg:    sequencer.EngineConfig{Pipelining: sequencer.Awaited, ReceiveBatch: 32, WindowMessages: sequencer.NoWindow, DeferredBatch: 2},
			chunks: [][]int64{{4, 5, 6}, {1, 2, 3, 7, 8, 9, 10}},
		},
	}
}

// TestAdversarialCrashAtEveryStep fails or crashes the process, or lets its session locks expire,
// at every call of hand-made scenarios aimed at recorded runs, with completions pipelined or not
// (after an expiry the process carries on until the broker refuses it), and checks the invariants
// of the property test: each sequence handled in order, a repeat only of the message in hand at
// the fault, nothing left at the broker, the dead-letter queue exactly the poison and invalid
// messages, a tombstone at the end.
func TestAdversarialCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for i, a := range adversarialScenarios() {
		for _, pending := range []int{1, 8} {
			for _, fault := range []string{"crash", "error", "expire"} {
				crash := fault == "crash"
				t.Run(fmt.Sprintf("%s/pending=%d/%s", a.name, pending, fault), func(t *testing.T) {
					t.Parallel()
					scenario := func() *propCase {
						c := a.propCase(uint64(i))
						c.cfg.MaxPendingSettlements = pending
						c.expirePlan = fault == "expire"
						c.stops = pending > 1 // and some runs stop gracefully after a few messages
						return c
					}
					var tot propTotals
					if k, err := strconv.Atoi(os.Getenv("SEQBUS_PROP_FAULT")); err == nil {
						c := scenario()
						c.faultPlan, c.crashPlan = []int{k}, crash
						runCase(t, 0, c, &tot)
						return
					}
					clean := scenario()
					clean.faultPlan = []int{}
					n := runCase(t, 0, clean, &tot)
					require.Positive(t, tot.runs, "the scenario records runs")
					t.Logf("%d calls, %d runs", n, tot.runs)
					for k := 1; k <= n; k++ {
						c := scenario()
						c.faultPlan, c.crashPlan = []int{k}, crash
						runCase(t, 0, c, &tot)
						if t.Failed() {
							t.Logf("fault at call %d (rerun it with SEQBUS_PROP_FAULT=%d)", k, k)
							return
						}
					}
				})
			}
		}
	}
}

// TestAdversarialCrashTwice crashes the process at every call, then the process that takes over
// at one of its first calls: the second run starts with an unresolved run record (Next only a
// lower bound) and crashes before or while resolving it, so the third run inherits it again.
func TestAdversarialCrashTwice(t *testing.T) {
	t.Parallel()
	for i, a := range adversarialScenarios() {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			scenario := func() *propCase { return a.propCase(uint64(i)) }
			var tot propTotals
			clean := scenario()
			clean.faultPlan = []int{}
			n := runCase(t, 0, clean, &tot)
			for k := 1; k <= n; k++ {
				for _, k2 := range []int{2, 3, 5, 8, 13} {
					c := scenario()
					c.faultPlan, c.crashPlan = []int{k, k2}, true
					runCase(t, 0, c, &tot)
					if t.Failed() {
						t.Logf("faults at calls %d, %d", k, k2)
						return
					}
				}
			}
		})
	}
}

// TestAdversarialLockExpiryRace lets the session lock of engine A expire while A's handler is
// inside message 3 of the session; engine B takes the session over (and, in one case, is held
// inside its own handler of 3 while A carries on). A's late save must fail on the store's
// version check and A's late completions on the broker's lock check: neither may corrupt B's
// progress. The handler sees 3 twice (A's message in hand, then B's) and everything else once.
func TestAdversarialLockExpiryRace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		eachMessage bool
		pending     int
		// bFirst: B runs to the end before A's handler returns; otherwise B is held in its
		// handler of 3 while A returns and tries to save and complete.
		bFirst bool
	}{
		{"runs/b-first", false, 1, true},
		{"runs/a-first", false, 1, false},
		{"runs/pipelined/a-first", false, 8, false},
		{"save-each/b-first", true, 1, true},
		{"save-each/a-first", true, 1, false},
		{"save-each/pipelined/a-first", true, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Time{})
			broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk})
			store := sequencertest.NewStore()
			const n = 6
			for s := int64(1); s <= n; s++ {
				broker.PublishSeq("s", s, s == n)
			}
			var mu = make(chan struct{}, 1)
			var seen []string
			record := func(who string, seq int64) {
				mu <- struct{}{}
				seen = append(seen, fmt.Sprintf("%s%d", who, seq))
				<-mu
			}
			cfg := sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: tc.eachMessage, MaxPendingSettlements: tc.pending, TombstoneTTL: time.Hour}
			newEngine := func(who string, h func(seq int64)) *sequencer.Engine {
				e, err := sequencer.NewEngine(cfg, sequencer.EngineDeps{
					Store: store.Client(nil), Clock: clk,
					Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
						record(who, m.Sequence)
						h(m.Sequence)
						return nil
					}),
				})
				require.NoError(t, err)
				return e
			}
			aIn, aGo := make(chan struct{}), make(chan struct{})
			engA := newEngine("a", func(seq int64) {
				if seq == 3 {
					close(aIn)
					<-aGo
				}
			})
			bIn, bGo := make(chan struct{}), make(chan struct{})
			engB := newEngine("b", func(seq int64) {
				if seq == 3 && !tc.bFirst {
					close(bIn)
					<-bGo
				}
			})
			sessA, err := broker.NewClient(nil).AcceptNext(t.Context())
			require.NoError(t, err)
			type result struct {
				out sequencer.Outcome
				err error
			}
			aDone := make(chan result, 1)
			go func() {
				out, err := engA.RunSession(t.Context(), sessA, nil)
				aDone <- result{out, err}
			}()
			<-aIn
			broker.ExpireLocks()
			sessB, err := broker.NewClient(nil).Accept(t.Context(), "s")
			require.NoError(t, err)
			bDone := make(chan result, 1)
			go func() {
				out, err := engB.RunSession(t.Context(), sessB, nil)
				bDone <- result{out, err}
			}()
			var a, b result
			if tc.bFirst {
				b = <-bDone
				close(aGo)
				a = <-aDone
			} else {
				<-bIn
				close(aGo)
				a = <-aDone
				close(bGo)
				b = <-bDone
			}
			require.Error(t, a.err, "A's late save or completion is refused")
			require.Contains(t, []sequencer.Outcome{sequencer.OutcomeLockLost, sequencer.OutcomeFailed}, a.out)
			// If A saved before B (save-each, A first), B's save fails on the version check;
			// later runs finish the session.
			for range 5 {
				if b.err == nil && b.out == sequencer.OutcomeEnded {
					break
				}
				sess, err := broker.NewClient(nil).AcceptNext(t.Context())
				if errors.Is(err, sequencer.ErrNoSession) {
					break
				}
				require.NoError(t, err)
				b.out, b.err = newEngine("c", func(int64) {}).RunSession(t.Context(), sess, nil)
			}
			require.Zero(t, broker.Len(), "nothing left at the broker")
			require.Empty(t, broker.DeadLetters())
			st, _ := store.Get("s")
			require.NotNil(t, st)
			require.False(t, st.EndedAt.IsZero(), "tombstone")
			require.Equal(t, int64(n+1), st.Next)
			require.Empty(t, st.InFlight)
			var seqs []int64
			for _, s := range seen {
				v, err := strconv.ParseInt(s[1:], 10, 64)
				require.NoError(t, err)
				seqs = append(seqs, v)
			}
			require.Equal(t, []int64{1, 2, 3, 3, 4, 5, 6}, seqs, "handler calls %v", seen)
		})
	}
}

// TestAdversarialCrashLoopDeadLettersRun: a handler that crashes its process on message 2 every
// time (an out-of-memory, say) while 3..6 are in hand. After MaxDeliveryCount deliveries the
// broker dead-letters 2..6 (MaxDeliveryCountExceeded). When 7 and 8 arrive later, the engine must
// not take 3..6, which no handler ever saw, as handled: the session waits on the gap at 2, as it
// does with a save per message.
func TestAdversarialCrashLoopDeadLettersRun(t *testing.T) {
	t.Parallel()
	for _, eachMessage := range []bool{false, true} {
		t.Run(fmt.Sprintf("save-each=%v", eachMessage), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Time{})
			broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk, MaxDeliveryCount: 3})
			store := sequencertest.NewStore()
			for s := int64(1); s <= 6; s++ {
				broker.PublishSeq("s", s, false)
			}
			var handled []int64
			runOnce := func() bool {
				proc := &sequencertest.Process{}
				e, err := sequencer.NewEngine(sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: eachMessage, TombstoneTTL: time.Hour,
					Retry: sequencer.RetryPolicy{Attempts: 1}},
					sequencer.EngineDeps{Store: store.Client(proc), Clock: clk,
						Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
							if m.Sequence == 2 {
								proc.Crash()
								return errors.New("process died")
							}
							handled = append(handled, m.Sequence)
							return nil
						})})
				require.NoError(t, err)
				sess, err := broker.NewClient(proc).AcceptNext(t.Context())
				if errors.Is(err, sequencer.ErrNoSession) {
					return false
				}
				require.NoError(t, err)
				_, _ = e.RunSession(t.Context(), sess, nil)
				return true
			}
			for i := 0; runOnce(); i++ {
				require.Less(t, i, 10)
			}
			// 2..6, and 1 when its completion was still in flight at the crash.
			dead := map[int64]bool{}
			for _, d := range broker.DeadLetters() {
				require.Equal(t, "MaxDeliveryCountExceeded", d.Reason)
				dead[d.Message.BrokerSequence] = true
			}
			for bs := int64(2); bs <= 6; bs++ {
				require.True(t, dead[bs], "%d dead-lettered by the broker", bs)
			}
			broker.PublishSeq("s", 7, false)
			broker.PublishSeq("s", 8, true)
			for i := 0; runOnce(); i++ {
				require.Less(t, i, 10)
			}
			require.Equal(t, []int64{1}, handled, "nothing after the crashing message is handled")
			st, _ := store.Get("s")
			require.NotNil(t, st)
			require.Equal(t, int64(2), st.Next, "the session waits on the gap at 2")
			require.Empty(t, st.InFlight)
			require.Equal(t, 2, broker.Calls()["defer"], "7 and 8 wait deferred")
		})
	}
}

// TestAdversarialStopKeepsTheNextMessageActive: a graceful stop (a deploy) arrives while 1 is in
// hand and 2, already in order, waits in the window. Deferring 2 would leave the session with
// deferred messages only, which the broker never offers to accept-next: without a sweeper it
// would never continue. The in-order message stays active instead, and the next process simply
// carries on.
func TestAdversarialStopKeepsTheNextMessageActive(t *testing.T) {
	t.Parallel()
	for _, eachMessage := range []bool{false, true} {
		t.Run(fmt.Sprintf("save-each=%v", eachMessage), func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, SaveEachMessage: eachMessage})
			publish(b, "s1", []int64{3, 2, 1}, 3)
			stop, cancel := context.WithCancel(t.Context())
			b.setFail(func(m *sequencer.Message) error {
				if m.Sequence == 1 {
					cancel() // the stop arrives while message 1 is in hand
				}
				return nil
			})
			sess, err := b.client.AcceptNext(t.Context())
			require.NoError(t, err)
			out, err := b.engine.RunSession(t.Context(), sess, &sequencer.RunOptions{Stop: stop})
			require.NoError(t, err)
			require.Equal(t, sequencer.OutcomeStopped, out)
			require.Equal(t, []int64{1}, b.got("s1"))
			b.runAll(t) // accept-next alone, no sweeper
			require.Equal(t, seqs(1, 3), b.got("s1"))
			require.Zero(t, b.broker.Len())
			st, _ := b.store.Get("s1")
			require.Equal(t, int64(4), st.Next)
			require.False(t, st.EndedAt.IsZero())
		})
	}
}

// TestAdversarialLockExpiryWhileResolving: process A crashes inside message 3 of a recorded run;
// B inherits the record, resolves it (3 is still at the broker) and is inside message 4 when its
// lock expires; C takes over. B's late save must fail on the version check, and the session must
// end exactly once with each repeat being the message in hand at one of the two faults.
func TestAdversarialLockExpiryWhileResolving(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk})
	store := sequencertest.NewStore()
	for s := int64(1); s <= 6; s++ {
		broker.PublishSeq("s", s, s == 6)
	}
	seen := make(chan int64, 32)
	engine := func(proc *sequencertest.Process, h func(seq int64)) *sequencer.Engine {
		e, err := sequencer.NewEngine(sequencer.EngineConfig{Pipelining: sequencer.Awaited, TombstoneTTL: time.Hour, Retry: sequencer.RetryPolicy{Attempts: 1}},
			sequencer.EngineDeps{Store: store.Client(proc), Clock: clk,
				Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
					seen <- m.Sequence
					h(m.Sequence)
					return nil
				})})
		require.NoError(t, err)
		return e
	}
	procA := &sequencertest.Process{}
	sess, err := broker.NewClient(procA).AcceptNext(t.Context())
	require.NoError(t, err)
	out, _ := engine(procA, func(seq int64) {
		if seq == 3 {
			procA.Crash()
		}
	}).RunSession(t.Context(), sess, nil)
	require.Equal(t, sequencer.OutcomeLockLost, out)
	st, _ := store.Get("s")
	require.NotEmpty(t, st.InFlight, "A left a run record")

	bIn, bGo := make(chan struct{}), make(chan struct{})
	sessB, err := broker.NewClient(nil).AcceptNext(t.Context())
	require.NoError(t, err)
	bDone := make(chan error, 1)
	go func() {
		_, err := engine(nil, func(seq int64) {
			if seq == 4 {
				close(bIn)
				<-bGo
			}
		}).RunSession(t.Context(), sessB, nil)
		bDone <- err
	}()
	<-bIn
	broker.ExpireLocks()
	sessC, err := broker.NewClient(nil).AcceptNext(t.Context())
	require.NoError(t, err)
	out, err = engine(nil, func(int64) {}).RunSession(t.Context(), sessC, nil)
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeEnded, out)
	close(bGo)
	require.Error(t, <-bDone, "B's late save or completion is refused")

	close(seen)
	var got []int64
	for s := range seen {
		got = append(got, s)
	}
	require.Equal(t, []int64{1, 2, 3, 3, 4, 4, 5, 6}, got)
	require.Zero(t, broker.Len())
	require.Empty(t, broker.DeadLetters())
	st, _ = store.Get("s")
	require.Equal(t, int64(7), st.Next)
	require.False(t, st.EndedAt.IsZero())
	require.Empty(t, st.InFlight)
}

// TestAdversarialPipelinedRunHole: with PipelineRuns the completion of entry 2 is refused after
// that of entry 3 landed, and the process dies handling 4, so the next run finds 2 still at the
// broker below 3, which is gone. 3 was handled after 2, so 2 is a duplicate now: the next run goes
// on from 4 instead of handing 2 over again and then waiting for 3 forever.
func TestAdversarialPipelinedRunHole(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk})
	store := sequencertest.NewStore()
	for s := int64(1); s <= 6; s++ {
		broker.PublishSeq("s", s, s == 6)
	}
	var handled []int64
	proc := &sequencertest.Process{}
	// The order is forced: 1 and 3 land, the handler is called for 4, then 2 is refused, then
	// the process dies. (Left to the scheduler, 1 could still be in flight at the crash, or 2's
	// refusal could stop the run before handler(4).)
	landed1, landed3, started4, refused2 := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	proc.Hook = func(c sequencertest.Call) error {
		if c.Op != "complete" {
			return nil
		}
		switch {
		case c.Phase == sequencertest.Before && slices.Equal(c.BrokerSequences, []int64{2}):
			<-landed3
			<-started4
			close(refused2)
			return sequencertest.ErrInjected
		case c.Phase == sequencertest.After && slices.Equal(c.BrokerSequences, []int64{1}):
			close(landed1)
		case c.Phase == sequencertest.After && slices.Equal(c.BrokerSequences, []int64{3}):
			close(landed3)
		}
		return nil
	}
	engine := func(proc *sequencertest.Process) *sequencer.Engine {
		e, err := sequencer.NewEngine(sequencer.EngineConfig{TombstoneTTL: time.Hour, PipelineLease: -1,
			Retry: sequencer.RetryPolicy{Attempts: 1}},
			sequencer.EngineDeps{Store: store.BoundClient(proc), Clock: clk,
				Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
					handled = append(handled, m.Sequence)
					if proc != nil && m.Sequence == 4 {
						close(started4)
						<-refused2
						<-landed1
						proc.Crash()
						return errors.New("process died")
					}
					return nil
				})})
		require.NoError(t, err)
		return e
	}
	sess, err := broker.NewClient(proc).AcceptNext(t.Context())
	require.NoError(t, err)
	_, err = engine(proc).RunSession(t.Context(), sess, nil)
	require.Error(t, err)
	require.Equal(t, []int64{1, 2, 3, 4}, handled)
	st, _ := store.Get("s")
	require.Equal(t, int64(1), st.Next)
	require.Len(t, st.InFlight, 5, "the run left its record of 1..5")

	clk.Advance(time.Minute) // the dead holder's lock expires
	sess, err = broker.NewClient(nil).AcceptNext(t.Context())
	require.NoError(t, err)
	out, err := engine(nil).RunSession(t.Context(), sess, nil)
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, []int64{1, 2, 3, 4, 4, 5, 6}, handled, "2 is not handed over again, 3 is not waited for")
	require.Zero(t, broker.Len())
	require.Empty(t, broker.DeadLetters())
	st, _ = store.Get("s")
	require.Equal(t, int64(7), st.Next)
	require.Equal(t, uint64(6), st.Counters.Handled)
	require.Equal(t, uint64(1), st.Counters.Duplicates)
	require.Empty(t, st.InFlight)
}
