package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
)

// TestHeldMessage_UpAndDown: 009 creates the tables of held messages and their dead letters; its
// down migration refuses while either holds a row (the messages exist nowhere else), and drops
// both once they are empty.
func TestHeldMessage_UpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	m := migrations.New(pool, nil)

	_, err := m.Up(ctx, migrations.UpOptions{TargetVersion: 9})
	require.NoError(t, err)
	require.True(t, tableExists(t, pool, "seqbus_held_message"))
	require.True(t, tableExists(t, pool, "seqbus_held_dead_letter"))

	tests := []struct {
		name   string
		insert string
		clear  string
	}{
		{name: "a held message",
			insert: `INSERT INTO seqbus_held_message (entity, session_id, sequence, enqueued_at, body, size) VALUES ('q', 's', 2, now(), '\x01', 1)`,
			clear:  `DELETE FROM seqbus_held_message`},
		{name: "a dead letter",
			insert: `INSERT INTO seqbus_held_dead_letter (entity, session_id, sequence, enqueued_at, body, size, held_at, reason) VALUES ('q', 's', 2, now(), '\x01', 1, now(), 'r')`,
			clear:  `DELETE FROM seqbus_held_dead_letter`},
	}
	for _, tt := range tests {
		_, err := pool.Exec(ctx, tt.insert)
		require.NoError(t, err, tt.name)
		_, err = m.Down(ctx, migrations.DownOptions{})
		require.ErrorContains(t, err, "applying 009_held_message [DOWN]", tt.name)
		require.ErrorContains(t, err, "exist nowhere else", tt.name)
		require.True(t, tableExists(t, pool, "seqbus_held_message"), "%s: nothing dropped", tt.name)
		require.True(t, tableExists(t, pool, "seqbus_held_dead_letter"), "%s: nothing dropped", tt.name)
		_, err = pool.Exec(ctx, tt.clear)
		require.NoError(t, err, tt.name)
	}

	res, err := m.Down(ctx, migrations.DownOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{9}, versions(res))
	require.False(t, tableExists(t, pool, "seqbus_held_message"))
	require.False(t, tableExists(t, pool, "seqbus_held_dead_letter"))
	require.True(t, tableExists(t, pool, "seqbus_session_state"), "008 and below stay")

	_, err = m.Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	require.True(t, tableExists(t, pool, "seqbus_held_message"), "applied again")
}
