package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
)

func TestNewPool_IsolatedSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	poolA, schemaA := pgtest.NewPoolWithSchema(t, nil)
	poolB, schemaB := pgtest.NewPoolWithSchema(t, nil)
	require.NotEqual(t, schemaA, schemaB)

	_, err := poolA.Exec(ctx, "CREATE TABLE t (v int)")
	require.NoError(t, err)
	_, err = poolA.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	// The same table name is free in the other schema.
	_, err = poolB.Exec(ctx, "CREATE TABLE t (v int)")
	require.NoError(t, err)
	var n int
	require.NoError(t, poolB.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	require.Zero(t, n)

	var current string
	require.NoError(t, poolA.QueryRow(ctx, "SELECT current_schema()").Scan(&current))
	require.Equal(t, schemaA, current)
}

func TestNewPool_SchemaDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var schema string
	t.Run("inner", func(t *testing.T) {
		_, schema = pgtest.NewPoolWithSchema(t, nil)
	})

	other := pgtest.NewPool(t, nil)
	var exists bool
	require.NoError(t, other.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)", schema).Scan(&exists))
	require.False(t, exists, "schema %s should be dropped when its test ends", schema)
}

func TestDSN_FromEnv(t *testing.T) {
	t.Setenv(pgtest.EnvDSN, "postgres://u@h:1/db")
	require.Equal(t, "postgres://u@h:1/db", pgtest.DSN())
	t.Setenv(pgtest.EnvDSN, "")
	require.Equal(t, pgtest.DefaultDSN, pgtest.DSN())
}

func TestNewPool_SetupRunsOnTheNewSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, &pgtest.Options{Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := p.Exec(ctx, "CREATE TABLE ready (v int)")
		return err
	}})
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM ready").Scan(&n))
}
