package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// TestSaveWith_RemovesHeldMessagesWithTheAdvance: in transactional mode the handler's effects,
// the state's advance and the removal of the held messages it moves past commit together, or
// none of them.
func TestSaveWith_RemovesHeldMessagesWithTheAdvance(t *testing.T) {
	t.Parallel()
	handlerErr := errors.New("handler failed")
	tests := []struct {
		name       string
		handlerErr error
		wantHeld   []int64
		wantEffect int
	}{
		{name: "committed", wantHeld: []int64{6, 7}, wantEffect: 1},
		{name: "handler failed", handlerErr: handlerErr, wantHeld: []int64{5, 6, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupAtomic(t)
			st := sequencer.NewState()
			st.Next = 5
			res, err := b.store.Hold(ctx, sequencer.HoldParams{Session: b.sess, State: st, ExpectedVersion: b.version,
				Messages: []*sequencer.HeldMessage{storetest.SampleHeld(5), storetest.SampleHeld(6), storetest.SampleHeld(7)}})
			require.NoError(t, err)

			_, err = b.store.SaveWith(ctx, sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: res.Version},
				func(ctx context.Context) error {
					if err := writeEffect(ctx, 5); err != nil {
						return err
					}
					return tt.handlerErr
				})
			require.ErrorIs(t, err, tt.handlerErr)
			held, err := b.store.Held(ctx, sequencer.HeldParams{Session: b.sess})
			require.NoError(t, err)
			var seqs []int64
			for _, m := range held {
				seqs = append(seqs, m.Sequence)
			}
			require.Equal(t, tt.wantHeld, seqs)
			require.Equal(t, tt.wantEffect, b.effects(t))
		})
	}
}

// TestHold_EntitiesAreIsolated: two stores on one database, for two entities, keep the held
// messages of same-named sessions apart.
func TestHold_EntitiesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	a, c := newStore(t, pool, "orders"), newStore(t, pool, "invoices")
	s := session("shared-id")
	va, err := a.Hold(ctx, sequencer.HoldParams{Session: s, State: sequencer.NewState(),
		Messages: []*sequencer.HeldMessage{storetest.SampleHeld(2)}})
	require.NoError(t, err)
	_, err = c.Hold(ctx, sequencer.HoldParams{Session: s, State: sequencer.NewState(),
		Messages: []*sequencer.HeldMessage{storetest.SampleHeld(2), storetest.SampleHeld(3)}})
	require.NoError(t, err)

	require.NoError(t, a.Delete(ctx, sequencer.DeleteParams{Session: s, ExpectedVersion: va.Version}))
	st, err := c.HeldStats(ctx, sequencer.HeldStatsParams{Session: s})
	require.NoError(t, err)
	require.Equal(t, 2, st.Messages, "the other entity's session keeps its messages")
	st, err = a.HeldStats(ctx, sequencer.HeldStatsParams{Session: s})
	require.NoError(t, err)
	require.Zero(t, st.Messages)
}

// TestPurgeTombstones_RemovesHeldMessages: a purged tombstone takes the held messages of its
// session with it, so a session id that starts over finds none of them.
func TestPurgeTombstones_RemovesHeldMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := newStore(t, pool, "orders")
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"old", "live"} {
		st := sequencer.NewState()
		if id == "old" {
			st.Next, st.Last, st.EndedAt = 4, 3, now.Add(-2*time.Hour)
		}
		_, err := store.Hold(ctx, sequencer.HoldParams{Session: session(id), State: st,
			Messages: []*sequencer.HeldMessage{storetest.SampleHeld(9)}})
		require.NoError(t, err)
	}
	n, err := store.PurgeTombstones(ctx, "orders", now.Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for id, want := range map[string]int{"old": 0, "live": 1} {
		st, err := store.HeldStats(ctx, sequencer.HeldStatsParams{Session: session(id)})
		require.NoError(t, err)
		require.Equal(t, want, st.Messages, id)
	}
}
