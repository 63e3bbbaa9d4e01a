package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{})
	return err
}

// newPool returns a pool on a fresh, migrated schema.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, &pgtest.Options{MaxConns: 12, Setup: migrate})
}

func newStore(t testing.TB, pool *pgxpool.Pool, entity string) *postgres.Store {
	t.Helper()
	s, err := postgres.New(pool, &postgres.Config{Entity: entity})
	require.NoError(t, err)
	return s
}

func session(id string) sequencer.Session { return storetest.NewSession(id) }

func TestConformance(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	storetest.Run(t,
		func(t *testing.T) sequencer.StateStore { return newStore(t, pool, "orders") },
		func(_ *testing.T, id string) sequencer.Session { return session(id) },
	)
}

func TestListerConformance(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var n atomic.Int64
	storetest.RunLister(t, func(t *testing.T) storetest.ListerFixture {
		store := newStore(t, pool, fmt.Sprintf("entity-%d", n.Add(1))) // an empty entity each
		return storetest.ListerFixture{
			Store: store, Lister: store,
			Session: func(_ *testing.T, id string) sequencer.Session { return session(id) },
		}
	})
}

func TestConformance_Transactional(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	storetest.Run(t,
		func(t *testing.T) sequencer.StateStore { return newStore(t, pool, "orders").Transactional() },
		func(_ *testing.T, id string) sequencer.Session { return session(id) },
	)
}

func TestHeldConformance(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var n atomic.Int64
	storetest.RunHeld(t,
		func(t *testing.T) sequencer.HeldStore { return newStore(t, pool, fmt.Sprintf("entity-%d", n.Add(1))) },
		func(_ *testing.T, id string) sequencer.Session { return session(id) },
	)
}

func TestHeldConformance_Transactional(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var n atomic.Int64
	storetest.RunHeld(t,
		func(t *testing.T) sequencer.HeldStore {
			return newStore(t, pool, fmt.Sprintf("entity-%d", n.Add(1))).Transactional()
		},
		func(_ *testing.T, id string) sequencer.Session { return session(id) },
	)
}

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	_, err := postgres.New(nil, &postgres.Config{Entity: "x"})
	require.ErrorContains(t, err, "pool is nil")
	pool := pgtest.NewPool(t, nil)
	_, err = postgres.New(pool, nil)
	require.ErrorContains(t, err, "Config.Entity is required")
}

func TestSave_MirrorsSweeperColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := newStore(t, pool, "orders")

	ended := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		state       func() *sequencer.State
		wantParked  bool
		wantDue     bool
		wantEndedAt *time.Time
	}{
		{name: "fresh", state: sequencer.NewState},
		{name: "gap, nothing due", state: func() *sequencer.State {
			st := sequencer.NewState()
			st.Deferred[3] = 300
			return st
		}},
		{name: "due deferred", wantDue: true, state: func() *sequencer.State {
			st := sequencer.NewState()
			st.Deferred[1] = 100
			return st
		}},
		{name: "parked", wantParked: true, state: storetest.SampleState},
		{name: "parked, message still deferred", wantParked: true, wantDue: true, state: func() *sequencer.State {
			st := storetest.SampleState()
			st.Deferred[st.Parked.Sequence] = st.Parked.BrokerSequence
			return st
		}},
		{name: "ended", wantEndedAt: &ended, state: func() *sequencer.State {
			st := sequencer.NewState()
			st.Next, st.Last, st.EndedAt = 6, 5, ended
			return st
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := tt.state()
			_, err := store.Save(ctx, sequencer.SaveParams{Session: session(tt.name), State: st})
			require.NoError(t, err)

			var (
				next, last  int64
				parked, due bool
				endedAt     *time.Time
			)
			require.NoError(t, pool.QueryRow(ctx, `SELECT next_seq, last_seq, parked, due_deferred, ended_at
				FROM seqbus_session_state WHERE entity = 'orders' AND session_id = $1`, tt.name).
				Scan(&next, &last, &parked, &due, &endedAt))
			require.Equal(t, st.Next, next)
			require.Equal(t, st.Last, last)
			require.Equal(t, tt.wantParked, parked)
			require.Equal(t, tt.wantDue, due)
			if tt.wantEndedAt == nil {
				require.Nil(t, endedAt)
			} else {
				require.NotNil(t, endedAt)
				require.True(t, tt.wantEndedAt.Equal(*endedAt))
			}
		})
	}
}

func TestListStranded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	orders, other := newStore(t, pool, "orders"), newStore(t, pool, "other")

	save := func(store *postgres.Store, id string, edit func(*sequencer.State)) int64 {
		st := sequencer.NewState()
		edit(st)
		v, err := store.Save(ctx, sequencer.SaveParams{Session: session(id), State: st})
		require.NoError(t, err)
		return v
	}
	due := func(st *sequencer.State) { st.Next = 4; st.Deferred[4] = 40; st.Deferred[5] = 50 }
	save(orders, "due", due)
	parkedV := save(orders, "parked", func(st *sequencer.State) { st.Parked = &sequencer.Parked{Sequence: 1, Reason: "x"} })
	save(orders, "parked-deferred", func(st *sequencer.State) {
		st.Next, st.Deferred[4] = 4, 40
		st.Parked = &sequencer.Parked{Sequence: 4, BrokerSequence: 40, Reason: "x"}
	})
	save(orders, "gap", func(st *sequencer.State) { st.Deferred[3] = 30 })
	save(orders, "ended", func(st *sequencer.State) { st.Next, st.Last, st.EndedAt = 4, 3, time.Now() })
	// A tombstone whose index still lists a handled message deferred at the broker (its
	// completion refused as busy): one run settles it.
	save(orders, "ended-stale", func(st *sequencer.State) { st.Next, st.Last, st.EndedAt, st.Deferred[2] = 4, 3, time.Now(), 20 })
	save(orders, "idle", func(*sequencer.State) {})
	save(other, "other-due", due)

	ids, err := orders.ListStranded(ctx, "orders", 10)
	require.NoError(t, err)
	// A parked session waits for an operator: listed only while its parked message is still
	// deferred (the next run dead-letters it), not for being parked. Least recently updated
	// first.
	require.Equal(t, []string{"due", "parked-deferred", "ended-stale"}, ids)

	ids, err = orders.ListStranded(ctx, "other", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"other-due"}, ids)

	ids, err = orders.ListStranded(ctx, "orders", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, ids)

	// Unparking with the parked message due puts the session on the list.
	_, err = orders.Save(ctx, sequencer.SaveParams{Session: session("parked"), State: func() *sequencer.State {
		st := sequencer.NewState()
		st.Deferred[1] = 10
		return st
	}(), ExpectedVersion: parkedV})
	require.NoError(t, err)
	ids, err = orders.ListStranded(ctx, "orders", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"due", "parked-deferred", "ended-stale", "parked"}, ids)

	_, err = orders.ListStranded(ctx, "orders", 0)
	require.ErrorContains(t, err, "limit must be positive")
}

// TestSave_HeapOnlyUpdates checks that a save which changes no indexed column is a heap-only
// (HOT) update, which writes no index entry (migration 008), and that one which does (the
// tombstone sets ended_at) is not. One connection runs the saves and reads the statistics, which
// Postgres reports asynchronously.
func TestSave_HeapOnlyUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, &pgtest.Options{MaxConns: 1, Setup: migrate})
	store := newStore(t, pool, "orders")
	st := sequencer.NewState()
	v, err := store.Save(ctx, sequencer.SaveParams{Session: session("s1"), State: st})
	require.NoError(t, err)
	const saves = 20
	for i := range saves {
		st.Next = int64(i + 2)
		st.InFlight = map[int64]int64{st.Next: int64(100 + i), st.Next + 1: int64(101 + i)}
		v, err = store.Save(ctx, sequencer.SaveParams{Session: session("s1"), State: st, ExpectedVersion: v})
		require.NoError(t, err)
	}
	st.InFlight, st.Last, st.EndedAt = nil, st.Next, time.Now()
	_, err = store.Save(ctx, sequencer.SaveParams{Session: session("s1"), State: st, ExpectedVersion: v})
	require.NoError(t, err)

	var updates, hot int64
	require.Eventually(t, func() bool {
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relid = 'seqbus_session_state'::regclass`).Scan(&updates, &hot))
		return updates == saves+1
	}, 10*time.Second, 50*time.Millisecond, "updates counted: %d", updates)
	require.Equal(t, int64(saves), hot, "every save but the tombstone's is a heap-only update")
}

func TestPurgeTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	orders, other := newStore(t, pool, "orders"), newStore(t, pool, "other")
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	tomb := func(store *postgres.Store, id string, endedAt time.Time) {
		st := sequencer.NewState()
		st.Next, st.Last, st.EndedAt = 4, 3, endedAt
		_, err := store.Save(ctx, sequencer.SaveParams{Session: session(id), State: st})
		require.NoError(t, err)
	}
	tomb(orders, "old", now.Add(-2*time.Hour))
	tomb(orders, "recent", now.Add(-time.Minute))
	// Its index still lists a handled message deferred at the broker: kept until a run settles it.
	stale := sequencer.NewState()
	stale.Next, stale.Last, stale.EndedAt, stale.Deferred[2] = 4, 3, now.Add(-2*time.Hour), 20
	_, err := orders.Save(ctx, sequencer.SaveParams{Session: session("old-stale"), State: stale})
	require.NoError(t, err)
	tomb(other, "other-old", now.Add(-2*time.Hour))
	_, err = orders.Save(ctx, sequencer.SaveParams{Session: session("live"), State: sequencer.NewState()})
	require.NoError(t, err)

	n, err := orders.PurgeTombstones(ctx, "orders", now.Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	_, v, err := orders.Load(ctx, sequencer.LoadParams{Session: session("old")})
	require.NoError(t, err)
	require.Zero(t, v, "the expired tombstone is gone")
	for _, id := range []string{"recent", "live", "old-stale"} {
		_, v, err = orders.Load(ctx, sequencer.LoadParams{Session: session(id)})
		require.NoError(t, err)
		require.NotZero(t, v, "%s is kept", id)
	}
	_, v, err = other.Load(ctx, sequencer.LoadParams{Session: session("other-old")})
	require.NoError(t, err)
	require.NotZero(t, v, "other entities are not touched")
}

func TestErrors_MissingTableNamesMigrations(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, nil) // not migrated
	store := newStore(t, pool, "orders")
	_, _, err := store.Load(context.Background(), sequencer.LoadParams{Session: session("s")})
	var pgErr *postgres.Error
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42P01", pgErr.SQLState)
	require.ErrorContains(t, err, `load session "s"`)
	require.ErrorContains(t, err, "are the migrations applied?")
}

func TestErrors_DeadlineKeepsContextError(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	store := newStore(t, pool, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Hold the row lock in another transaction so the update waits until the deadline.
	v, err := store.Save(context.Background(), sequencer.SaveParams{Session: session("s"), State: sequencer.NewState()})
	require.NoError(t, err)
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), "SELECT 1 FROM seqbus_session_state WHERE session_id = 's' FOR UPDATE")
	require.NoError(t, err)

	_, err = store.Save(ctx, sequencer.SaveParams{Session: session("s"), State: sequencer.NewState(), ExpectedVersion: v})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, sequencer.ErrVersionConflict)
}

func TestTxFromContext_OutsideSaveWith(t *testing.T) {
	t.Parallel()
	_, ok := postgres.TxFromContext(context.Background())
	require.False(t, ok)
}
