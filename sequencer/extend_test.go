package sequencer_test

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// extendCase is one session of TestExtendedRuns, TestExtendedRunCrash and TestRunTail: 1–last
// published in order (last the session's last message) and received four at a time, with a
// process hook that sees the handler calls too.
type extendCase struct {
	b *bundle
	// handlerCalled[k] is closed when the handler is called for sequence k.
	handlerCalled map[int64]chan struct{}
	mu            sync.Mutex
	// saved are the states stored, in order; savesLanded counts the saves answered.
	saved       []*sequencer.State
	savesLanded atomic.Int64
	// completedAfter[bs] is the number of saves landed when broker sequence bs was completed
	// (published alone and in order, sequence k has broker sequence k).
	completedAfter map[int64]int64
	// onHandler, if set before the run, is called at the start of each handler call.
	onHandler func(m *sequencer.Message)
	// secondBatch is closed when a receive returned broker sequence 5 (the second batch).
	secondBatch     chan struct{}
	secondBatchOnce sync.Once
}

func newExtendCase(t *testing.T, bound bool, last int64) *extendCase {
	t.Helper()
	cfg := sequencer.EngineConfig{ReceiveBatch: 4}
	c := &extendCase{handlerCalled: map[int64]chan struct{}{}, completedAfter: map[int64]int64{}, secondBatch: make(chan struct{})}
	if bound {
		c.b = setupBound(t, cfg)
	} else {
		c.b = setup(t, cfg)
	}
	for k := int64(1); k <= last; k++ {
		c.handlerCalled[k] = make(chan struct{})
	}
	var once sync.Map
	c.b.setFail(func(m *sequencer.Message) error {
		if c.onHandler != nil {
			c.onHandler(m)
		}
		if _, done := once.LoadOrStore(m.Sequence, true); !done {
			close(c.handlerCalled[m.Sequence])
		}
		return nil
	})
	publish(c.b, "s1", seqs(1, last), last)
	return c
}

// hook observes the saves and completes of the session, then runs fn (nil: none).
func (c *extendCase) hook(fn func(sequencertest.Call) error) {
	c.b.proc.Hook = func(call sequencertest.Call) error {
		switch {
		case call.Op == "save" && call.Phase == sequencertest.After:
			st, _ := c.b.store.Get("s1")
			c.mu.Lock()
			c.saved = append(c.saved, st)
			c.mu.Unlock()
			c.savesLanded.Add(1)
		case call.Op == "receive" && call.Phase == sequencertest.After && slices.Contains(call.BrokerSequences, 5):
			c.secondBatchOnce.Do(func() { close(c.secondBatch) })
		case call.Op == "complete" && call.Phase == sequencertest.Before:
			c.mu.Lock()
			for _, bs := range call.BrokerSequences {
				c.completedAfter[bs] = c.savesLanded.Load()
			}
			c.mu.Unlock()
		}
		if fn != nil {
			return fn(call)
		}
		return nil
	}
}

// waitCalled waits (up to 5s) for the handler call of sequence k.
func (c *extendCase) waitCalled(k int64) {
	select {
	case <-c.handlerCalled[k]:
	case <-time.After(5 * time.Second):
	}
}

// spans reports whether a stored record held both sequences a and b as entries.
func (c *extendCase) spans(a, b int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.saved, func(st *sequencer.State) bool {
		_, hasA := st.InFlight[a]
		_, hasB := st.InFlight[b]
		return hasA && hasB
	})
}

// waitForSecondBatch returns an onHandler that holds the handler call of 2 until the second
// receive (5–8, sent while 1–4 are handled) has returned: the entries after 2 extend the run.
func waitForSecondBatch(c *extendCase) func(m *sequencer.Message) {
	return func(m *sequencer.Message) {
		if m.Sequence != 2 {
			return
		}
		select {
		case <-c.secondBatch:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(50 * time.Millisecond) // the receive's result reaches the run after its call returns
	}
}

// runAllWithLease runs b's sessions (runAll) while it moves the fake clock on, a second at a
// time: a run that inherits a record waits the pipeline lease before its first handler call.
func runAllWithLease(t *testing.T, b *bundle) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.runAll(t)
	}()
	require.Eventually(t, func() bool {
		b.clock.Advance(time.Second)
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
}

// replayedInOrder checks what a session that crashed after handling 1–handled and was run
// again handed over: 1–handled, then a replay from some k ≤ replayFrom on, up to last.
func replayedInOrder(t *testing.T, got []int64, handled, replayFrom, last int64) {
	t.Helper()
	require.GreaterOrEqual(t, int64(len(got)), handled)
	require.Equal(t, seqs(1, handled), got[:handled])
	rest := got[handled:]
	require.NotEmpty(t, rest)
	require.LessOrEqual(t, rest[0], replayFrom, "what was handled and not saved is handed over again")
	require.Equal(t, seqs(rest[0], last), rest, "in order, no gap")
}

// TestExtendedRuns: with pipelined runs, a recorded run extends over the next batch when that
// was received while the run's entries were handled (the receive of the next batch is sent
// meanwhile, see TestNextBatch): one save, sent in the background while the entries go on,
// records the run over both batches, and the entries of the next batch need no save of their
// own. Entries of the extension handed over before it lands are completed only after it has
// landed; a crash before it lands leaves them at the broker, handed over again in order.
func TestExtendedRuns(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		name := map[bool]string{false: "store of its own", true: "session-bound store"}[bound]
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			t.Run("one record over two batches", func(t *testing.T) {
				t.Parallel()
				c := newExtendCase(t, bound, 8)
				c.hook(nil)
				c.onHandler = waitForSecondBatch(c)
				out, _ := c.b.runNext(t)
				require.Equal(t, sequencer.OutcomeEnded, out)
				require.Equal(t, seqs(1, 8), c.b.got("s1"))
				require.Zero(t, c.b.broker.Len())
				require.True(t, c.spans(4, 7), "a record over both batches was stored: %v", c.saved)
				// The record of 1–4, its extension over 5–7 (8, the last, never is an entry), the
				// tombstone with 8.
				require.Equal(t, 3, c.b.store.Calls()["save"])
				require.Equal(t, uint64(2), c.b.engine.Stats().Runs)
				for bs, landed := range c.completedAfter {
					if bs >= 5 {
						require.GreaterOrEqual(t, landed, int64(2), "broker sequence %d completed before the record holding it landed", bs)
					}
				}
			})

			t.Run("entries go ahead of the extension, completed after it", func(t *testing.T) {
				t.Parallel()
				c := newExtendCase(t, bound, 8)
				var saves atomic.Int64
				var ahead atomic.Bool
				c.hook(func(call sequencertest.Call) error {
					// The extension (the second save) lands only once 6 was handed over.
					if call.Op == "save" && call.Phase == sequencertest.Before && saves.Add(1) == 2 {
						c.waitCalled(6)
						select {
						case <-c.handlerCalled[6]:
							ahead.Store(true)
						default:
						}
					}
					return nil
				})
				c.onHandler = waitForSecondBatch(c)
				out, _ := c.b.runNext(t)
				require.Equal(t, sequencer.OutcomeEnded, out)
				require.Equal(t, seqs(1, 8), c.b.got("s1"))
				require.True(t, c.spans(4, 7), "a record over both batches was stored: %v", c.saved)
				require.True(t, ahead.Load(), "6 was handed over while the extension was in flight")
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, bs := range []int64{5, 6} {
					require.GreaterOrEqual(t, c.completedAfter[bs], int64(2), "broker sequence %d completed before the extension landed", bs)
				}
			})
		})
	}
}

// TestExtendedRunCrash: a crash while the extension's save is in flight, with entries of the
// extension already handed over, leaves them at the broker: the next run hands them over again,
// in order, and the session ends.
func TestExtendedRunCrash(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		t.Run(map[bool]string{false: "store of its own", true: "session-bound store"}[bound], func(t *testing.T) {
			t.Parallel()
			c := newExtendCase(t, bound, 8)
			var saves atomic.Int64
			c.hook(func(call sequencertest.Call) error {
				if call.Op == "save" && call.Phase == sequencertest.Before && saves.Add(1) == 2 {
					c.waitCalled(6)
					return sequencertest.ErrCrash
				}
				return nil
			})
			c.onHandler = waitForSecondBatch(c)
			out, _ := c.b.engine.RunSession(t.Context(), mustAccept(t, c.b), nil)
			require.Equal(t, sequencer.OutcomeLockLost, out)
			got := c.b.got("s1")
			require.GreaterOrEqual(t, len(got), 6, "6 was handed over before the crash")

			c.b.restart(t, sequencer.EngineConfig{ReceiveBatch: 4})
			runAllWithLease(t, c.b)
			replayedInOrder(t, c.b.got("s1"), int64(len(got)), 5, 8)
			require.Zero(t, c.b.broker.Len())
			st, _ := c.b.store.Get("s1")
			require.Equal(t, int64(9), st.Next)
			require.Empty(t, st.InFlight)
		})
	}
}

// TestRunTail: the messages after a run's record, up to the session's last one, all in hand
// (the last batch came in only after the run's entries were handled), are handed over with no
// record or save of their own: the last message's save covers them, and they are completed
// after it; a crash before that save leaves them at the broker, handed over again in order.
func TestRunTail(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		t.Run(map[bool]string{false: "store of its own", true: "session-bound store"}[bound], func(t *testing.T) {
			t.Parallel()
			for _, crash := range []bool{false, true} {
				t.Run(map[bool]string{false: "ends", true: "crash before the last save"}[crash], func(t *testing.T) {
					t.Parallel()
					c := newExtendCase(t, bound, 7)
					var receives, saves atomic.Int64
					c.hook(func(call sequencertest.Call) error {
						switch {
						case call.Op == "receive" && call.Phase == sequencertest.Before && receives.Add(1) == 2:
							// The last batch (5–7) comes in after 1–4 were handed over: no extension.
							c.waitCalled(4)
						case call.Op == "save" && call.Phase == sequencertest.Before && saves.Add(1) == 2 && crash:
							return sequencertest.ErrCrash
						}
						return nil
					})
					if !crash {
						out, _ := c.b.runNext(t)
						require.Equal(t, sequencer.OutcomeEnded, out)
						require.Equal(t, seqs(1, 7), c.b.got("s1"))
						require.Zero(t, c.b.broker.Len())
						// The record of 1–4 and the tombstone with 7, which covers 5 and 6.
						require.Equal(t, 2, c.b.store.Calls()["save"])
						require.Equal(t, uint64(1), c.b.engine.Stats().Runs)
						c.mu.Lock()
						defer c.mu.Unlock()
						require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7}, slices.Sorted(maps.Keys(c.completedAfter)))
						for _, bs := range []int64{5, 6, 7} {
							require.Equal(t, int64(2), c.completedAfter[bs], "broker sequence %d completed before the save covering it", bs)
						}
						return
					}
					out, _ := c.b.engine.RunSession(t.Context(), mustAccept(t, c.b), nil)
					require.Equal(t, sequencer.OutcomeLockLost, out)
					require.Equal(t, seqs(1, 7), c.b.got("s1"))
					c.b.restart(t, sequencer.EngineConfig{ReceiveBatch: 4})
					runAllWithLease(t, c.b)
					replayedInOrder(t, c.b.got("s1"), 7, 5, 7)
					require.Zero(t, c.b.broker.Len())
					st, _ := c.b.store.Get("s1")
					require.Equal(t, int64(8), st.Next)
				})
			}
		})
	}
}
