package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/postgres"
)

// atomicBundle is a transactional store with an effects table that handlers write to.
type atomicBundle struct {
	pool  *pgxpool.Pool
	store *postgres.TxStore
	sess  sequencer.Session
	// version is the stored version before the step under test (state Next = 5).
	version int64
}

func setupAtomic(t *testing.T) *atomicBundle {
	t.Helper()
	ctx := context.Background()
	pool := newPool(t)
	_, err := pool.Exec(ctx, "CREATE TABLE effects (session_id text NOT NULL, seq bigint NOT NULL)")
	require.NoError(t, err)
	b := &atomicBundle{pool: pool, store: newStore(t, pool, "orders").Transactional(), sess: session("s-1")}
	st := sequencer.NewState()
	st.Next = 5
	b.version, err = b.store.Save(ctx, sequencer.SaveParams{Session: b.sess, State: st})
	require.NoError(t, err)
	return b
}

// writeEffect is the handler's own write, through the store's transaction.
func writeEffect(ctx context.Context, seq int64) error {
	tx, ok := postgres.TxFromContext(ctx)
	if !ok {
		return errors.New("no transaction in context")
	}
	_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ('s-1', $1)", seq)
	return err
}

func (b *atomicBundle) effects(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM effects").Scan(&n))
	return n
}

func (b *atomicBundle) requireUnchanged(t *testing.T) {
	t.Helper()
	require.Zero(t, b.effects(t), "no handler effect committed")
	st, v, err := b.store.Load(context.Background(), sequencer.LoadParams{Session: b.sess})
	require.NoError(t, err)
	require.Equal(t, b.version, v, "state version unchanged")
	require.Equal(t, int64(5), st.Next, "state unchanged")
	require.Zero(t, b.pool.Stat().AcquiredConns(), "the transaction's connection went back to the pool")
}

func advanced() *sequencer.State {
	st := sequencer.NewState()
	st.Next = 6
	return st
}

func TestSaveWith_CommitsHandlerEffectsWithState(t *testing.T) {
	t.Parallel()
	b := setupAtomic(t)
	ctx := context.Background()

	v, err := b.store.SaveWith(ctx, sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version},
		func(ctx context.Context) error { return writeEffect(ctx, 5) })
	require.NoError(t, err)
	require.NotEqual(t, b.version, v)

	require.Equal(t, 1, b.effects(t))
	st, gotV, err := b.store.Load(ctx, sequencer.LoadParams{Session: b.sess})
	require.NoError(t, err)
	require.Equal(t, v, gotV)
	require.Equal(t, int64(6), st.Next)
}

func TestSaveWith_NothingCommittedOnFailure(t *testing.T) {
	t.Parallel()
	handlerErr := errors.New("handler failed")

	tests := []struct {
		name string
		// step runs SaveWith in its own way and checks the error it gets.
		step func(t *testing.T, b *atomicBundle)
	}{
		{name: "handler error", step: func(t *testing.T, b *atomicBundle) {
			_, err := b.store.SaveWith(context.Background(), sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version},
				func(ctx context.Context) error {
					require.NoError(t, writeEffect(ctx, 5))
					return handlerErr
				})
			require.ErrorIs(t, err, handlerErr)
		}},
		{name: "stale version", step: func(t *testing.T, b *atomicBundle) {
			_, err := b.store.SaveWith(context.Background(), sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version + 1},
				func(ctx context.Context) error { return writeEffect(ctx, 5) })
			require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		}},
		{name: "first save while a state exists", step: func(t *testing.T, b *atomicBundle) {
			_, err := b.store.SaveWith(context.Background(), sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: 0},
				func(ctx context.Context) error { return writeEffect(ctx, 5) })
			require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		}},
		{name: "panic between handler and commit", step: func(t *testing.T, b *atomicBundle) {
			require.PanicsWithValue(t, "crash", func() {
				_, _ = b.store.SaveWith(context.Background(), sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version},
					func(ctx context.Context) error {
						require.NoError(t, writeEffect(ctx, 5))
						panic("crash")
					})
			})
		}},
		{name: "context cancelled between handler and commit", step: func(t *testing.T, b *atomicBundle) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := b.store.SaveWith(ctx, sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version},
				func(ctx context.Context) error {
					require.NoError(t, writeEffect(ctx, 5))
					cancel()
					return nil
				})
			require.ErrorIs(t, err, context.Canceled)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupAtomic(t)
			tt.step(t, b)
			b.requireUnchanged(t)
		})
	}
}

func TestSaveWith_ConcurrentHoldersApplyEffectsOnce(t *testing.T) {
	t.Parallel()
	b := setupAtomic(t)
	const holders = 6
	errs := make(chan error, holders)
	start := make(chan struct{})
	for range holders {
		go func() {
			<-start
			_, err := b.store.SaveWith(context.Background(), sequencer.SaveParams{Session: b.sess, State: advanced(), ExpectedVersion: b.version},
				func(ctx context.Context) error { return writeEffect(ctx, 5) })
			errs <- err
		}()
	}
	close(start)
	wins := 0
	for range holders {
		if err := <-errs; err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, sequencer.ErrVersionConflict)
		}
	}
	require.Equal(t, 1, wins)
	require.Equal(t, 1, b.effects(t), "the effect of message 5 is committed exactly once")
}
