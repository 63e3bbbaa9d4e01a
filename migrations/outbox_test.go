package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
)

// outboxObjects lists the tables and functions of migration 003 in the pool's schema.
func outboxObjects(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT relname::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname LIKE 'seqbus_outbox%'
UNION ALL
SELECT proname::text || '()' FROM pg_proc WHERE pronamespace = current_schema()::regnamespace AND proname LIKE 'seqbus_outbox%'
ORDER BY 1`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestOutbox_UpAndDown: 003 creates the outbox's tables and functions and its down
// migration removes every one of them, so it can be applied again.
func TestOutbox_UpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	m := migrations.New(pool, nil)

	_, err := m.Up(ctx, migrations.UpOptions{TargetVersion: 3})
	require.NoError(t, err)
	require.Equal(t, []string{
		"seqbus_outbox", "seqbus_outbox_counter", "seqbus_outbox_counter_ended_idx", "seqbus_outbox_counter_pkey",
		"seqbus_outbox_enqueue()", "seqbus_outbox_id_seq", "seqbus_outbox_next_sequence()", "seqbus_outbox_paused",
		"seqbus_outbox_paused_pkey", "seqbus_outbox_pending_idx", "seqbus_outbox_pkey", "seqbus_outbox_sent_idx",
		"seqbus_outbox_session_id_problem()",
	}, outboxObjects(t, pool))
	var seq int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT seqbus_outbox_enqueue('orders', 's', '\x00')`).Scan(&seq))
	require.Equal(t, int64(1), seq)

	_, err = m.Down(ctx, migrations.DownOptions{TargetVersion: 2})
	require.NoError(t, err)
	require.Empty(t, outboxObjects(t, pool))
	require.True(t, tableExists(t, pool, "seqbus_journal"), "002 stays")

	_, err = m.Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, outboxObjects(t, pool))
}
