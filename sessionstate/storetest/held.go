package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// NewHeldStoreFunc returns the store under test, empty: each call a store of its own (with
// Postgres, a store for an entity of its own), since the suite counts what a store holds in all.
type NewHeldStoreFunc func(t *testing.T) sequencer.HeldStore

// RunHeld exercises a sequencer.HeldStore against its contract: holding messages with the
// state, the version check, first copies, the removal with the advance and the delete, large
// bodies, order, stats and dead letters. Subtests run in parallel.
func RunHeld(t *testing.T, newStore NewHeldStoreFunc, newSession NewSessionFunc) {
	t.Helper()

	type bundle struct {
		store sequencer.HeldStore
		ctx   context.Context
		sess  sequencer.Session
	}
	setup := func(t *testing.T, name string) *bundle {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return &bundle{store: newStore(t), ctx: ctx, sess: newSession(t, name+"-"+randomSuffix())}
	}
	// hold holds msgs with a state whose Next is next, expecting version v.
	hold := func(t *testing.T, b *bundle, v, next int64, msgs ...*sequencer.HeldMessage) sequencer.HoldResult {
		t.Helper()
		res, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(next), ExpectedVersion: v, Messages: msgs})
		require.NoError(t, err)
		require.NotZero(t, res.Version)
		return res
	}
	held := func(t *testing.T, b *bundle) []*sequencer.HeldMessage {
		t.Helper()
		got, err := b.store.Held(b.ctx, sequencer.HeldParams{Session: b.sess})
		require.NoError(t, err)
		return got
	}
	stats := func(t *testing.T, b *bundle) sequencer.HeldStats {
		t.Helper()
		st, err := b.store.HeldStats(b.ctx, sequencer.HeldStatsParams{Session: b.sess})
		require.NoError(t, err)
		return st
	}
	totals := func(t *testing.T, b *bundle) sequencer.HeldTotals {
		t.Helper()
		tt, err := b.store.HeldTotals(b.ctx, sequencer.HeldTotalsParams{})
		require.NoError(t, err)
		return tt
	}
	// requireUnchanged checks that the stored version and held sequences are still these.
	requireUnchanged := func(t *testing.T, b *bundle, version int64, seqs ...int64) {
		t.Helper()
		_, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
		require.NoError(t, err)
		require.Equal(t, version, v, "the state's version")
		require.Equal(t, seqs, sequences(held(t, b)), "the held sequences")
	}

	t.Run("HoldStoresMessagesWithTheState", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "hold")
		want := []*sequencer.HeldMessage{SampleHeld(3), SampleHeld(5), SampleHeld(4)}
		want[1].IsLast = true
		st := stateWithNext(2)
		st.Last = 5
		res, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: st, Messages: want})
		require.NoError(t, err)
		require.Equal(t, 3, res.Stored)
		wantBytes := sequencer.HeldSize(want[0]) + sequencer.HeldSize(want[1]) + sequencer.HeldSize(want[2])
		require.Equal(t, sequencer.HeldStats{Messages: 3, Bytes: wantBytes}, res.Stats)
		require.Equal(t, res.Stats, stats(t, b))

		got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
		require.NoError(t, err)
		require.Equal(t, res.Version, v)
		requireStateEqual(t, st, got)

		msgs := held(t, b)
		require.Equal(t, []int64{3, 4, 5}, sequences(msgs), "in sequence order")
		RequireHeldEqual(t, want[0], msgs[0])
		RequireHeldEqual(t, want[2], msgs[1])
		RequireHeldEqual(t, want[1], msgs[2])

		// The messages returned are the caller's own.
		msgs[0].Body[0] ^= 0xff
		msgs[0].Properties["Note"] = "changed"
		RequireHeldEqual(t, want[0], held(t, b)[0])

		// A later hold adds to what is held and moves the version on.
		res2 := hold(t, b, res.Version, 2, SampleHeld(7))
		require.NotEqual(t, res.Version, res2.Version)
		require.Equal(t, 1, res2.Stored)
		require.Equal(t, 4, res2.Stats.Messages)
		require.Equal(t, wantBytes+sequencer.HeldSize(SampleHeld(7)), res2.Stats.Bytes)
	})

	t.Run("HeldFromAndLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "from")
		var msgs []*sequencer.HeldMessage
		for seq := int64(2); seq <= 9; seq++ {
			msgs = append(msgs, SampleHeld(seq))
		}
		hold(t, b, 0, 1, msgs...)
		tests := []struct {
			from  int64
			limit int
			want  []int64
		}{
			{0, 0, []int64{2, 3, 4, 5, 6, 7, 8, 9}},
			{5, 0, []int64{5, 6, 7, 8, 9}},
			{5, 2, []int64{5, 6}},
			{0, 3, []int64{2, 3, 4}},
			{10, 0, nil},
		}
		for _, tt := range tests {
			got, err := b.store.Held(b.ctx, sequencer.HeldParams{Session: b.sess, From: tt.from, Limit: tt.limit})
			require.NoError(t, err)
			require.Equal(t, tt.want, sequences(got), "from %d limit %d", tt.from, tt.limit)
		}
		got, err := b.store.Held(b.ctx, sequencer.HeldParams{Session: b.sess, From: 4, Limit: 1, OmitBody: true})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Nil(t, got[0].Body, "OmitBody")
		require.Equal(t, sequencer.HeldSize(SampleHeld(4)), got[0].Size, "the size counts the body left out")
		require.Equal(t, SampleHeld(4).MessageID, got[0].MessageID)
	})

	t.Run("StaleVersionRefusesTheHoldAndStoresNothing", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			expected func(v1, v2 int64) int64
		}{
			{name: "zero while a state is stored", expected: func(_, _ int64) int64 { return 0 }},
			{name: "previous version", expected: func(v1, _ int64) int64 { return v1 }},
			{name: "version never issued", expected: func(_, v2 int64) int64 { return v2 + 1000 }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, "stale")
				v1 := hold(t, b, 0, 1, SampleHeld(3)).Version
				v2 := hold(t, b, v1, 1, SampleHeld(4)).Version
				before := stats(t, b)

				_, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(2),
					ExpectedVersion: tt.expected(v1, v2), Messages: []*sequencer.HeldMessage{SampleHeld(5), SampleHeld(6)}})
				require.ErrorIs(t, err, sequencer.ErrVersionConflict)
				requireUnchanged(t, b, v2, 3, 4)
				require.Equal(t, before, stats(t, b))
			})
		}
		t.Run("no state stored", func(t *testing.T) {
			t.Parallel()
			b := setup(t, "phantom")
			_, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(1), ExpectedVersion: 42,
				Messages: []*sequencer.HeldMessage{SampleHeld(2)}})
			require.ErrorIs(t, err, sequencer.ErrVersionConflict)
			requireUnchanged(t, b, 0)
		})
	})

	t.Run("ConcurrentHoldsExactlyOneWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "race")
		v := hold(t, b, 0, 1, SampleHeld(2)).Version
		const writers = 8
		results := make([]sequencer.HoldResult, writers)
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(1),
					ExpectedVersion: v, Messages: []*sequencer.HeldMessage{SampleHeld(int64(10 + i))}})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "writers %d and %d both won", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, sequencer.ErrVersionConflict, "writer %d", i)
		}
		require.NotEqual(t, -1, winner, "one writer must win")
		requireUnchanged(t, b, results[winner].Version, 2, int64(10+winner))
	})

	t.Run("FirstCopyWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "dup")
		first := SampleHeld(5)
		v := hold(t, b, 0, 1, first).Version

		again := SampleHeld(5)
		again.Body, again.MessageID = []byte("a later copy"), "other-id"
		twice := SampleHeld(6)
		twiceLater := SampleHeld(6)
		twiceLater.Body = []byte("the second of one hold")
		res := hold(t, b, v, 1, again, twice, twiceLater)
		require.Equal(t, 1, res.Stored, "only 6 is new")
		require.Equal(t, sequencer.HeldStats{Messages: 2, Bytes: sequencer.HeldSize(first) + sequencer.HeldSize(twice)}, res.Stats)
		msgs := held(t, b)
		require.Equal(t, []int64{5, 6}, sequences(msgs))
		RequireHeldEqual(t, first, msgs[0])
		RequireHeldEqual(t, twice, msgs[1])

		// Holding only copies of held sequences, or nothing, still saves the state.
		for _, msgs := range [][]*sequencer.HeldMessage{{again}, nil} {
			before := res.Stats
			res = hold(t, b, res.Version, 1, msgs...)
			require.Zero(t, res.Stored)
			require.Equal(t, before, res.Stats)
			_, got, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
			require.NoError(t, err)
			require.Equal(t, res.Version, got)
		}
	})

	t.Run("RefusedHoldsStoreNothing", func(t *testing.T) {
		t.Parallel()
		unholdable := SampleHeld(8)
		unholdable.Properties["Custom"] = struct{ X int }{1}
		tests := []struct {
			name    string
			next    int64
			msgs    []*sequencer.HeldMessage
			wantIs  error
			wantMsg string
		}{
			{name: "below next", next: 4, msgs: []*sequencer.HeldMessage{SampleHeld(5), SampleHeld(3)}, wantMsg: "below the state's next 4"},
			{name: "property type not kept", next: 1, msgs: []*sequencer.HeldMessage{SampleHeld(7), unholdable},
				wantIs: sequencer.ErrNotHoldable, wantMsg: `"Custom"`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, "refused")
				v := hold(t, b, 0, 1, SampleHeld(9)).Version
				_, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(tt.next),
					ExpectedVersion: v, Messages: tt.msgs})
				require.ErrorContains(t, err, tt.wantMsg)
				if tt.wantIs != nil {
					require.ErrorIs(t, err, tt.wantIs)
				}
				requireUnchanged(t, b, v, 9)
			})
		}
	})

	t.Run("AdvanceRemovesExactlyThoseBelowNext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "advance")
		var msgs []*sequencer.HeldMessage
		for seq := int64(3); seq <= 7; seq++ {
			msgs = append(msgs, SampleHeld(seq))
		}
		v := hold(t, b, 0, 1, msgs...).Version

		// A save that fails its version check removes nothing.
		_, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: b.sess, State: stateWithNext(6), ExpectedVersion: v + 1000})
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		requireUnchanged(t, b, v, 3, 4, 5, 6, 7)

		v, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: b.sess, State: stateWithNext(5), ExpectedVersion: v})
		require.NoError(t, err)
		require.Equal(t, []int64{5, 6, 7}, sequences(held(t, b)), "3 and 4 went with the advance to 5")
		require.Equal(t, sequencer.HeldStats{Messages: 3, Bytes: 3 * sequencer.HeldSize(SampleHeld(5))}, stats(t, b))

		// A hold removes what its state moves past, too.
		res := hold(t, b, v, 7, SampleHeld(9))
		require.Equal(t, []int64{7, 9}, sequences(held(t, b)))
		require.Equal(t, 2, res.Stats.Messages, "the stats after the hold leave out what it removed")

		v, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: b.sess, State: stateWithNext(10), ExpectedVersion: res.Version})
		require.NoError(t, err)
		require.Empty(t, held(t, b))
		require.Equal(t, sequencer.HeldStats{}, stats(t, b))
		_, got, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
		require.NoError(t, err)
		require.Equal(t, v, got)
	})

	t.Run("ConcurrentAdvancesRemoveOnlyTheWinners", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "advance-race")
		var msgs []*sequencer.HeldMessage
		for seq := int64(2); seq <= 12; seq++ {
			msgs = append(msgs, SampleHeld(seq))
		}
		v := hold(t, b, 0, 1, msgs...).Version
		const writers = 8
		versions := make([]int64, writers)
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				// Each holder advances to a next of its own; a loser must remove nothing.
				versions[i], errs[i] = b.store.Save(b.ctx, sequencer.SaveParams{Session: b.sess, State: stateWithNext(int64(3 + i)), ExpectedVersion: v})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "writers %d and %d both won", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, sequencer.ErrVersionConflict, "writer %d", i)
		}
		require.NotEqual(t, -1, winner, "one writer must win")
		var want []int64
		for seq := int64(3 + winner); seq <= 12; seq++ {
			want = append(want, seq)
		}
		requireUnchanged(t, b, versions[winner], want...)
	})

	t.Run("DeleteRemovesAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "delete")
		v := hold(t, b, 0, 1, SampleHeld(2), SampleHeld(3)).Version

		err := b.store.Delete(b.ctx, sequencer.DeleteParams{Session: b.sess, ExpectedVersion: v + 1000})
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		requireUnchanged(t, b, v, 2, 3)

		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: b.sess, ExpectedVersion: v}))
		requireUnchanged(t, b, 0)
		require.Equal(t, sequencer.HeldStats{}, stats(t, b))

		// The session starts over: a sequence held before is held anew.
		fresh := SampleHeld(2)
		fresh.Body = []byte("after the delete")
		res := hold(t, b, 0, 1, fresh)
		require.Equal(t, 1, res.Stored)
		RequireHeldEqual(t, fresh, held(t, b)[0])
	})

	t.Run("CanceledContextHoldsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "canceled")
		v := hold(t, b, 0, 1, SampleHeld(2)).Version
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		_, err := b.store.Hold(ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(1), ExpectedVersion: v,
			Messages: []*sequencer.HeldMessage{SampleHeld(3)}})
		require.ErrorIs(t, err, context.Canceled)
		_, err = b.store.DeadLetterHeld(ctx, sequencer.DeadLetterHeldParams{Session: b.sess, State: stateWithNext(1), ExpectedVersion: v, Sequence: 2})
		require.ErrorIs(t, err, context.Canceled)
		requireUnchanged(t, b, v, 2)
	})

	t.Run("SessionsAreIsolated", func(t *testing.T) {
		t.Parallel()
		a, c := setup(t, "iso-a"), setup(t, "iso-b")
		c.store = a.store
		va := hold(t, a, 0, 1, SampleHeld(2), SampleHeld(3)).Version
		hold(t, c, 0, 1, SampleHeld(3))
		_, err := a.store.Save(a.ctx, sequencer.SaveParams{Session: a.sess, State: stateWithNext(5), ExpectedVersion: va})
		require.NoError(t, err)
		require.Empty(t, held(t, a))
		require.Equal(t, []int64{3}, sequences(held(t, c)), "another session's advance leaves it")
		require.Equal(t, 1, stats(t, c).Messages)
	})

	t.Run("LargeBodies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "large")
		big := SampleHeld(2)
		big.Body = randomBytes(4 << 20)
		var msgs []*sequencer.HeldMessage
		msgs = append(msgs, big)
		for seq := int64(3); seq < 23; seq++ {
			m := SampleHeld(seq)
			m.Body = randomBytes(256 << 10)
			msgs = append(msgs, m)
		}
		res := hold(t, b, 0, 1, msgs...)
		var want int64
		for _, m := range msgs {
			want += sequencer.HeldSize(m)
		}
		require.Equal(t, sequencer.HeldStats{Messages: 21, Bytes: want}, res.Stats)
		got := held(t, b)
		require.Len(t, got, 21)
		for i, m := range got {
			require.True(t, bytes.Equal(msgs[i].Body, m.Body), "body of %d", m.Sequence)
		}
	})

	t.Run("OrderFollowsTheSequenceWhateverTheHoldOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "order")
		seqs := make([]int64, 40)
		for i := range seqs {
			seqs[i] = int64(2 + i*3) // with gaps
		}
		shuffled := append([]int64(nil), seqs...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		var v int64
		for len(shuffled) > 0 {
			n := min(len(shuffled), 1+rand.IntN(5))
			var msgs []*sequencer.HeldMessage
			for _, seq := range shuffled[:n] {
				msgs = append(msgs, SampleHeld(seq))
			}
			shuffled = shuffled[n:]
			v = hold(t, b, v, 1, msgs...).Version
		}
		require.Equal(t, seqs, sequences(held(t, b)))
	})

	t.Run("RandomOperationsFollowTheModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "model")
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 0))
		t.Logf("seed %d", seed)
		// The model: the stored version and next, the held sequences with the step that held
		// each (in its body), the dead letters' sequences in order.
		var (
			version int64
			next    int64 = 1
			model         = map[int64]string{}
			dead    []int64
		)
		removeBelow := func(n int64) {
			for seq := range model {
				if seq < n {
					delete(model, seq)
				}
			}
		}
		expected := func() int64 {
			if rng.IntN(10) == 0 {
				return version + 1 + rng.Int64N(3) // stale or never issued
			}
			return version
		}
		for step := range 300 {
			exp := expected()
			ok := exp == version
			newNext := next + rng.Int64N(3)
			switch op := rng.IntN(20); {
			case op < 9: // hold
				var msgs []*sequencer.HeldMessage
				for range 1 + rng.IntN(4) {
					m := SampleHeld(newNext + rng.Int64N(12))
					m.Body = []byte(fmt.Sprintf("step %d", step))
					msgs = append(msgs, m)
				}
				res, err := b.store.Hold(b.ctx, sequencer.HoldParams{Session: b.sess, State: stateWithNext(newNext), ExpectedVersion: exp, Messages: msgs})
				if !ok {
					require.ErrorIs(t, err, sequencer.ErrVersionConflict, "step %d", step)
					break
				}
				require.NoError(t, err, "step %d", step)
				version, next = res.Version, newNext
				removeBelow(next)
				stored := 0
				for _, m := range msgs {
					if _, held := model[m.Sequence]; !held {
						model[m.Sequence] = string(m.Body)
						stored++
					}
				}
				require.Equal(t, stored, res.Stored, "step %d", step)
			case op < 16: // save
				v, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: b.sess, State: stateWithNext(newNext), ExpectedVersion: exp})
				if !ok {
					require.ErrorIs(t, err, sequencer.ErrVersionConflict, "step %d", step)
					break
				}
				require.NoError(t, err, "step %d", step)
				version, next = v, newNext
				removeBelow(next)
			case op < 19: // dead-letter a held sequence, or one not held
				seq := next + rng.Int64N(12)
				v, err := b.store.DeadLetterHeld(b.ctx, sequencer.DeadLetterHeldParams{Session: b.sess, State: stateWithNext(next),
					ExpectedVersion: exp, Sequence: seq, Reason: "r"})
				_, held := model[seq]
				switch {
				case !ok || version == 0:
					require.ErrorIs(t, err, sequencer.ErrVersionConflict, "step %d", step)
				case !held:
					require.ErrorIs(t, err, sequencer.ErrNotFound, "step %d", step)
				default:
					require.NoError(t, err, "step %d", step)
					version = v
					delete(model, seq)
					dead = append(dead, seq)
				}
			default: // delete
				err := b.store.Delete(b.ctx, sequencer.DeleteParams{Session: b.sess, ExpectedVersion: exp})
				if !ok && version != 0 {
					require.ErrorIs(t, err, sequencer.ErrVersionConflict, "step %d", step)
					break
				}
				require.NoError(t, err, "step %d", step)
				version, next = 0, 1
				clear(model)
			}

			got := held(t, b)
			require.Len(t, got, len(model), "step %d", step)
			var bytes int64
			for _, m := range got {
				require.Equal(t, model[m.Sequence], string(m.Body), "step %d: sequence %d keeps its first copy", step, m.Sequence)
				bytes += m.Size
			}
			require.Equal(t, sequencer.HeldStats{Messages: len(model), Bytes: bytes}, stats(t, b), "step %d", step)
			_, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
			require.NoError(t, err)
			require.Equal(t, version, v, "step %d", step)
		}
		dl, err := b.store.HeldDeadLetters(b.ctx, sequencer.HeldDeadLettersParams{SessionID: b.sess.ID(), OmitBody: true})
		require.NoError(t, err)
		var gotDead []int64
		for _, d := range dl {
			gotDead = append(gotDead, d.Sequence)
		}
		require.Equal(t, dead, gotDead)
	})

	t.Run("TotalsCountEverySession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "totals-a")
		require.Equal(t, sequencer.HeldTotals{}, totals(t, b), "an empty store")
		c := &bundle{store: b.store, ctx: b.ctx, sess: newSession(t, "totals-b-"+randomSuffix())}
		va := hold(t, b, 0, 1, SampleHeld(2), SampleHeld(3)).Version
		hold(t, c, 0, 1, SampleHeld(5))
		size := sequencer.HeldSize(SampleHeld(2))
		require.Equal(t, sequencer.HeldTotals{Held: sequencer.HeldStats{Messages: 3, Bytes: 3 * size}}, totals(t, b))
		_, err := b.store.DeadLetterHeld(b.ctx, sequencer.DeadLetterHeldParams{Session: b.sess, State: stateWithNext(4),
			ExpectedVersion: va, Sequence: 3, Reason: "r"})
		require.NoError(t, err)
		require.Equal(t, sequencer.HeldTotals{
			Held:        sequencer.HeldStats{Messages: 1, Bytes: size},
			DeadLetters: sequencer.HeldStats{Messages: 1, Bytes: size},
		}, totals(t, b), "2 went with the advance to 4, 3 is a dead letter")
	})

	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "dead")
		v := hold(t, b, 0, 3, SampleHeld(3), SampleHeld(4), SampleHeld(5)).Version
		at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
		parked := stateWithNext(3)
		parked.Parked = &sequencer.Parked{Sequence: 3, Reason: "handler: boom", At: at}
		dead := func(v int64, seq int64, st *sequencer.State) (int64, error) {
			return b.store.DeadLetterHeld(b.ctx, sequencer.DeadLetterHeldParams{Session: b.sess, State: st, ExpectedVersion: v,
				Sequence: seq, Reason: "MaxRetriesExceeded", Description: fmt.Sprintf("handler: boom at %d", seq), At: at})
		}
		list := func(p sequencer.HeldDeadLettersParams) []*sequencer.HeldDeadLetter {
			p.SessionID = b.sess.ID()
			got, err := b.store.HeldDeadLetters(b.ctx, p)
			require.NoError(t, err)
			return got
		}

		// Refused: a stale version, a sequence not held. Nothing moves.
		_, err := dead(v+1000, 3, parked)
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		_, err = dead(v, 9, parked)
		require.ErrorIs(t, err, sequencer.ErrNotFound)
		requireUnchanged(t, b, v, 3, 4, 5)
		require.Empty(t, list(sequencer.HeldDeadLettersParams{}))

		v, err = dead(v, 3, parked)
		require.NoError(t, err)
		st, got, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: b.sess})
		require.NoError(t, err)
		require.Equal(t, v, got)
		requireStateEqual(t, parked, st)
		require.Equal(t, []int64{4, 5}, sequences(held(t, b)))
		require.Equal(t, 2, stats(t, b).Messages, "a dead letter is no longer held")

		dl := list(sequencer.HeldDeadLettersParams{})
		require.Len(t, dl, 1)
		require.Equal(t, b.sess.ID(), dl[0].SessionID)
		require.Equal(t, "MaxRetriesExceeded", dl[0].Reason)
		require.Equal(t, "handler: boom at 3", dl[0].Description)
		require.True(t, at.Equal(dl[0].DeadAt), "DeadAt")
		RequireHeldEqual(t, SampleHeld(3), &dl[0].HeldMessage)

		// The poison policy skip: the state passes the dead letter, whose row must survive the
		// removal below Next.
		skipped := stateWithNext(5)
		v, err = dead(v, 4, skipped)
		require.NoError(t, err)
		require.Equal(t, []int64{5}, sequences(held(t, b)))
		dl = list(sequencer.HeldDeadLettersParams{})
		require.Len(t, dl, 2)
		require.Equal(t, []int64{3, 4}, []int64{dl[0].Sequence, dl[1].Sequence}, "in the order dead-lettered")
		require.Less(t, dl[0].ID, dl[1].ID)

		paged := list(sequencer.HeldDeadLettersParams{AfterID: dl[0].ID, Limit: 5, OmitBody: true})
		require.Len(t, paged, 1)
		require.Equal(t, dl[1].ID, paged[0].ID)
		require.Nil(t, paged[0].Body)
		require.Len(t, list(sequencer.HeldDeadLettersParams{Limit: 1}), 1)

		// The dead letters outlive the session's state; removing one is idempotent.
		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: b.sess, ExpectedVersion: v}))
		require.Len(t, list(sequencer.HeldDeadLettersParams{}), 2)
		for range 2 {
			require.NoError(t, b.store.RemoveHeldDeadLetter(b.ctx, sequencer.RemoveHeldDeadLetterParams{ID: dl[0].ID}))
		}
		rest := list(sequencer.HeldDeadLettersParams{})
		require.Len(t, rest, 1)
		require.Equal(t, dl[1].ID, rest[0].ID)

		// Every session's dead letters: this session's are among them.
		all, err := b.store.HeldDeadLetters(b.ctx, sequencer.HeldDeadLettersParams{})
		require.NoError(t, err)
		found := false
		for _, d := range all {
			found = found || d.ID == dl[1].ID
		}
		require.True(t, found)
	})
}

// SampleHeld returns a held message of the given sequence with every field set and properties
// of every kept type.
func SampleHeld(seq int64) *sequencer.HeldMessage {
	return &sequencer.HeldMessage{
		Sequence:       seq,
		MessageID:      fmt.Sprintf("msg-%d", seq),
		BrokerSequence: 1000 + seq,
		EnqueuedTime:   time.Date(2026, 11, 28, 9, 30, 0, 123456789, time.UTC),
		ContentType:    "application/json",
		Body:           []byte(fmt.Sprintf(`{"n":%d}`, seq)),
		HeldAt:         time.Date(2026, 11, 28, 9, 31, 0, 0, time.UTC),
		Properties: map[string]any{
			"Sequence": seq, "IsLast": false, "Note": "ünïcode ✓", "Nul": "a\x00b", "Latin1": "\xe9t\xe9",
			"I8": int8(-8), "I16": int16(-16), "I32": int32(-32), "Big": int64(math.MaxInt64), "Int": -7,
			"U8": uint8(8), "U16": uint16(16), "U32": uint32(32), "U64": uint64(math.MaxUint64), "Uint": uint(7),
			"F32": float32(1.5), "F64": 0.1, "Inf": math.Inf(-1),
			"At":    time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
			"Bytes": []byte{0, 1, 2, 255},
			"Nil":   nil,
		},
	}
}

// RequireHeldEqual compares held messages: every field the handler sees, EnqueuedTime and
// HeldAt (only when want sets it) to the microsecond, the size as HeldSize(want).
func RequireHeldEqual(t *testing.T, want, got *sequencer.HeldMessage) {
	t.Helper()
	require.NotNil(t, got)
	require.Equal(t, want.Sequence, got.Sequence, "Sequence")
	require.Equal(t, want.IsLast, got.IsLast, "IsLast")
	require.Equal(t, want.MessageID, got.MessageID, "MessageID")
	require.Equal(t, want.BrokerSequence, got.BrokerSequence, "BrokerSequence")
	require.Equal(t, want.ContentType, got.ContentType, "ContentType")
	require.True(t, bytes.Equal(want.Body, got.Body), "Body: want %d bytes, got %d", len(want.Body), len(got.Body))
	requireTimeEqual(t, want.EnqueuedTime.Truncate(time.Microsecond), got.EnqueuedTime, "EnqueuedTime (to the microsecond)")
	if !want.HeldAt.IsZero() {
		requireTimeEqual(t, want.HeldAt.Truncate(time.Microsecond), got.HeldAt, "HeldAt (to the microsecond)")
	}
	require.Equal(t, sequencer.HeldSize(want), got.Size, "Size")
	require.Len(t, got.Properties, len(want.Properties), "Properties")
	for k, w := range want.Properties {
		g, ok := got.Properties[k]
		require.True(t, ok, "property %q missing", k)
		if wt, isTime := w.(time.Time); isTime {
			gt, ok := g.(time.Time)
			require.True(t, ok, "property %q: %T", k, g)
			requireTimeEqual(t, wt, gt, "property "+k)
			continue
		}
		require.IsType(t, w, g, "property %q", k)
		require.Equal(t, w, g, "property %q", k)
	}
}

func sequences(msgs []*sequencer.HeldMessage) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Sequence)
	}
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}
