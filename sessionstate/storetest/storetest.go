package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// NewStoreFunc returns the store under test. It may return the same store to every subtest: each
// subtest uses session ids of its own.
type NewStoreFunc func(t *testing.T) sequencer.StateStore

// NewSessionFunc returns a locked session with the given id. The suite calls it once per id and
// subtest and shares that value among goroutines.
type NewSessionFunc func(t *testing.T, id string) sequencer.Session

// Run exercises a StateStore implementation against the sequencer.StateStore contract. Subtests
// run in parallel.
func Run(t *testing.T, newStore NewStoreFunc, newSession NewSessionFunc) {
	t.Helper()

	type bundle struct {
		store sequencer.StateStore
		ctx   context.Context
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return &bundle{store: newStore(t), ctx: ctx}
	}
	session := func(t *testing.T, name string) sequencer.Session {
		t.Helper()
		return newSession(t, name+"-"+randomSuffix())
	}

	t.Run("LoadMissingReturnsNewStateAndVersionZero", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: session(t, "missing")})
		require.NoError(t, err)
		require.Zero(t, v)
		requireStateEqual(t, sequencer.NewState(), st)
		st.Deferred[7] = 70 // a usable, writable state
	})

	t.Run("SaveLoadRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "roundtrip")
		want := SampleState()

		v1, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: want, ExpectedVersion: 0})
		require.NoError(t, err)
		require.NotZero(t, v1)

		got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Equal(t, v1, v)
		requireStateEqual(t, want, got)

		// The loaded state is the caller's own: changing it changes nothing stored.
		got.Next = 999
		got.Deferred[999] = 1
		again, _, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		requireStateEqual(t, want, again)

		// A second save advances the version and makes the old one stale.
		next := SampleState()
		next.Next = 10
		delete(next.Deferred, 10)
		v2, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: next, ExpectedVersion: v1})
		require.NoError(t, err)
		require.NotEqual(t, v1, v2)
		got, v, err = b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Equal(t, v2, v)
		requireStateEqual(t, next, got)
	})

	t.Run("StaleVersionConflictsAndStoresNothing", func(t *testing.T) {
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
				b := setup(t)
				s := session(t, "stale")
				v1, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(2)})
				require.NoError(t, err)
				v2, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(3), ExpectedVersion: v1})
				require.NoError(t, err)

				_, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(50), ExpectedVersion: tt.expected(v1, v2)})
				require.ErrorIs(t, err, sequencer.ErrVersionConflict)

				got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
				require.NoError(t, err)
				require.Equal(t, v2, v)
				require.Equal(t, int64(3), got.Next)
			})
		}
	})

	t.Run("SaveWithVersionButNothingStoredConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "phantom")
		_, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(5), ExpectedVersion: 42})
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		_, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Zero(t, v)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "delete")
		v, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: SampleState()})
		require.NoError(t, err)

		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: s, ExpectedVersion: v}))
		st, got, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Zero(t, got)
		requireStateEqual(t, sequencer.NewState(), st)

		// Deleting again, or deleting what never existed, is not an error.
		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: s, ExpectedVersion: v}))
		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: session(t, "never"), ExpectedVersion: 0}))

		// The session starts over from version 0.
		_, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(2), ExpectedVersion: 0})
		require.NoError(t, err)
	})

	t.Run("DeleteWithStaleVersionConflictsAndKeepsState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "delete-stale")
		v1, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(2)})
		require.NoError(t, err)
		v2, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(3), ExpectedVersion: v1})
		require.NoError(t, err)

		for _, stale := range []int64{0, v1} {
			err = b.store.Delete(b.ctx, sequencer.DeleteParams{Session: s, ExpectedVersion: stale})
			require.ErrorIs(t, err, sequencer.ErrVersionConflict, "delete with version %d", stale)
		}
		got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Equal(t, v2, v)
		require.Equal(t, int64(3), got.Next)
	})

	t.Run("VersionFromBeforeDeleteDoesNotMatchRecreatedState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "aba")
		old, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(2)})
		require.NoError(t, err)
		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: s, ExpectedVersion: old}))
		_, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(1)})
		require.NoError(t, err)

		_, err = b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(9), ExpectedVersion: old})
		require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	})

	t.Run("ConcurrentSavesExactlyOneWins", func(t *testing.T) {
		t.Parallel()
		for _, fromExisting := range []bool{false, true} {
			name := "first save"
			if fromExisting {
				name = "update"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				s := session(t, "race")
				var expected int64
				if fromExisting {
					v, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: stateWithNext(2)})
					require.NoError(t, err)
					expected = v
				}

				const writers = 8
				versions := make([]int64, writers)
				errs := make([]error, writers)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range writers {
					wg.Go(func() {
						<-start
						versions[i], errs[i] = b.store.Save(b.ctx, sequencer.SaveParams{
							Session: s, State: stateWithNext(int64(100 + i)), ExpectedVersion: expected,
						})
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

				got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
				require.NoError(t, err)
				require.Equal(t, versions[winner], v)
				require.Equal(t, int64(100+winner), got.Next, "the stored state is the winner's")
			})
		}
	})

	t.Run("LargeState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "large")
		want := LargeState(5000)
		v, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: s, State: want})
		require.NoError(t, err)
		got, gotV, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Equal(t, v, gotV)
		requireStateEqual(t, want, got)
	})

	t.Run("SessionsAreIsolated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, c := session(t, "iso-a"), session(t, "iso-b")
		va, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: a, State: stateWithNext(11)})
		require.NoError(t, err)
		vc, err := b.store.Save(b.ctx, sequencer.SaveParams{Session: c, State: stateWithNext(22)})
		require.NoError(t, err, "a first save of one session is independent of another's")

		got, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: a})
		require.NoError(t, err)
		require.Equal(t, va, v)
		require.Equal(t, int64(11), got.Next)

		require.NoError(t, b.store.Delete(b.ctx, sequencer.DeleteParams{Session: a, ExpectedVersion: va}))
		got, v, err = b.store.Load(b.ctx, sequencer.LoadParams{Session: c})
		require.NoError(t, err)
		require.Equal(t, vc, v)
		require.Equal(t, int64(22), got.Next, "deleting one session leaves the other")
	})

	t.Run("CanceledContextStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := session(t, "canceled")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		_, err := b.store.Save(ctx, sequencer.SaveParams{Session: s, State: stateWithNext(5)})
		require.Error(t, err)
		require.True(t, errors.Is(err, context.Canceled), "error %v should wrap context.Canceled", err)
		_, v, err := b.store.Load(b.ctx, sequencer.LoadParams{Session: s})
		require.NoError(t, err)
		require.Zero(t, v)
	})
}

// SampleState returns a state with every field set, with times in UTC.
func SampleState() *sequencer.State {
	at := time.Date(2026, 11, 22, 8, 30, 15, 123456789, time.UTC)
	return &sequencer.State{
		Next:      7,
		Last:      12,
		Deferred:  map[int64]int64{9: 1009, 10: 1004, 12: 1020},
		Parked:    &sequencer.Parked{Sequence: 6, BrokerSequence: 1006, Reason: "handler: boom ✗", At: at.Add(-time.Minute)},
		EndedAt:   time.Time{},
		GapSince:  at.Add(-time.Second),
		Counters:  sequencer.Counters{Handled: 6, Deferred: 3, Duplicates: 2, Invalid: 1, DeadLettered: 1, Retries: 4, Skipped: 0},
		UpdatedAt: at,
	}
}

// LargeState returns a state with n deferred messages waiting behind a gap at Next.
func LargeState(n int) *sequencer.State {
	st := sequencer.NewState()
	st.Next = 1_000
	for i := range int64(n) {
		st.Deferred[st.Next+1+i] = 5_000_000 + i*3
	}
	st.GapSince = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	st.UpdatedAt = st.GapSince.Add(time.Minute)
	return st
}

func stateWithNext(next int64) *sequencer.State {
	st := sequencer.NewState()
	st.Next = next
	return st
}

// requireStateEqual compares states field by field, times with time.Equal.
func requireStateEqual(t *testing.T, want, got *sequencer.State) {
	t.Helper()
	require.NotNil(t, got)
	require.Equal(t, want.Next, got.Next, "Next")
	require.Equal(t, want.Last, got.Last, "Last")
	require.True(t, maps.Equal(want.Deferred, got.Deferred), "Deferred: want %d entries, got %d", len(want.Deferred), len(got.Deferred))
	require.Equal(t, want.Counters, got.Counters, "Counters")
	requireTimeEqual(t, want.EndedAt, got.EndedAt, "EndedAt")
	requireTimeEqual(t, want.GapSince, got.GapSince, "GapSince")
	requireTimeEqual(t, want.UpdatedAt, got.UpdatedAt, "UpdatedAt")
	if want.Blocked == nil {
		require.Nil(t, got.Blocked, "Blocked")
	} else {
		require.NotNil(t, got.Blocked, "Blocked")
		require.Equal(t, want.Blocked.Sequence, got.Blocked.Sequence, "Blocked.Sequence")
		require.Equal(t, want.Blocked.Reason, got.Blocked.Reason, "Blocked.Reason")
		require.Equal(t, want.Blocked.Times, got.Blocked.Times, "Blocked.Times")
		requireTimeEqual(t, want.Blocked.Since, got.Blocked.Since, "Blocked.Since")
	}
	if want.Retrying == nil {
		require.Nil(t, got.Retrying, "Retrying")
	} else {
		require.NotNil(t, got.Retrying, "Retrying")
		require.Equal(t, *want.Retrying, *got.Retrying, "Retrying")
	}
	if want.Parked == nil {
		require.Nil(t, got.Parked, "Parked")
		return
	}
	require.NotNil(t, got.Parked, "Parked")
	require.Equal(t, want.Parked.Sequence, got.Parked.Sequence, "Parked.Sequence")
	require.Equal(t, want.Parked.BrokerSequence, got.Parked.BrokerSequence, "Parked.BrokerSequence")
	require.Equal(t, want.Parked.Reason, got.Parked.Reason, "Parked.Reason")
	requireTimeEqual(t, want.Parked.At, got.Parked.At, "Parked.At")
}

func requireTimeEqual(t *testing.T, want, got time.Time, field string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s: want %v, got %v", field, want, got)
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
