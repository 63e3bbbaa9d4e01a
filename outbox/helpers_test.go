package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/outbox"
)

// newPool returns a pool on a migrated schema of the test's own.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, &pgtest.Options{MaxConns: maxConns, Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// enqueue enqueues one message in a transaction of its own.
func enqueue(ctx context.Context, t testing.TB, pool *pgxpool.Pool, p outbox.EnqueueParams) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		seq, err = outbox.Enqueue(ctx, tx, p)
		return err
	}))
	return seq
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// stored counts what the outbox holds: messages and counter rows.
func stored(t testing.TB, pool *pgxpool.Pool) (messages, counters int64) {
	t.Helper()
	return count(t, pool, "SELECT count(*) FROM seqbus_outbox"), count(t, pool, "SELECT count(*) FROM seqbus_outbox_counter")
}

// newPoolUnmigrated returns a pool on an empty schema of the test's own.
func newPoolUnmigrated(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, &pgtest.Options{MaxConns: 2})
}

// enqueueErr enqueues one message in a transaction of its own and returns the error.
func enqueueErr(t testing.TB, pool *pgxpool.Pool, p outbox.EnqueueParams) error {
	t.Helper()
	ctx := context.Background()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, p)
		return err
	})
}
