package soak

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// TestSeedServiceBus: each seeded session holds the tombstone the engine leaves (every message
// handled, ended, a version), read back through the worker's store; the lease session holds a
// snapshot a Watch takes up, whose next sweep lists from after the seeding.
func TestSeedServiceBus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue(queue, broker.EntityProperties{RequiresSession: true, LockDuration: time.Minute}))
	e, err := b.Lookup(queue)
	require.NoError(t, err)

	before := time.Now()
	require.NoError(t, seedServiceBus(ctx, e, 25, 3, true))

	store := sbstate.New(nil)
	var lastEnded time.Time
	for i := range 25 {
		lock, err := e.AcceptNamedSession(SessionID(i), "test")
		require.NoError(t, err)
		st, ver, err := store.Load(ctx, sequencer.LoadParams{Session: emulatorState{Session: idSession{id: SessionID(i)}, lock: lock}})
		lock.Release()
		require.NoError(t, err)
		require.NotZero(t, ver, "session %d has a stored state", i)
		require.Equal(t, int64(4), st.Next, "session %d: three messages handled", i)
		require.Equal(t, int64(3), st.Last)
		require.Equal(t, uint64(3), st.Counters.Handled)
		require.False(t, st.EndedAt.Before(before), "session %d ended while seeded", i)
		require.Empty(t, st.Deferred)
		if st.UpdatedAt.After(lastEnded) {
			lastEnded = st.UpdatedAt
		}
	}

	ids, err := e.ListSessions(time.Time{}, 0, 0)
	require.NoError(t, err)
	require.Len(t, ids, 26, "the 25 sessions and the lease session")
	lock, err := e.AcceptNamedSession(sessionstate.LeaseSessionID, "test")
	require.NoError(t, err)
	snap, err := lock.State()
	lock.Release()
	require.NoError(t, err)

	var listedAfter time.Time
	w := sessionstate.NewWatch(sessionstate.WatchConfig{
		ChangedIDs: func(_ context.Context, after time.Time) ([]string, error) {
			listedAfter = after
			return nil, nil
		},
		Source: nopSource{}, Store: store,
	})
	require.NoError(t, w.Restore(snap))
	_, stats, err := w.Sweep(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, stats.Read, "nothing to read again")
	require.Zero(t, stats.Rescanning, "no rescan")
	require.True(t, listedAfter.After(lastEnded), "lists from after the sessions' last change (%s), margin included: %s", lastEnded, listedAfter)
	require.True(t, listedAfter.Before(time.Now()))
}

// idSession is a session that has only an id: the store asks nothing else of it.
type idSession struct {
	sequencer.Session
	id string
}

func (s idSession) ID() string { return s.id }

type nopSource struct{ sequencer.SessionSource }

// TestSeedPostgres: each seeded session holds the tombstone row the engine leaves.
func TestSeedPostgres(t *testing.T) {
	t.Parallel()
	pgtest.RequireServer(t)
	ctx := context.Background()
	url, drop, err := postgresSchema(ctx, pgtest.DSN())
	require.NoError(t, err)
	t.Cleanup(drop)
	require.NoError(t, seedPostgres(ctx, url, 25, 3))

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := postgres.New(pool, &postgres.Config{Entity: queue})
	require.NoError(t, err)
	for i := range 25 {
		st, ver, err := store.Load(ctx, sequencer.LoadParams{Session: idSession{id: SessionID(i)}})
		require.NoError(t, err)
		require.NotZero(t, ver, "session %d has a stored state", i)
		require.Equal(t, int64(4), st.Next)
		require.False(t, st.EndedAt.IsZero(), "session %d ended", i)
	}
}
