package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/migrations"
)

// databaseOfItsOwn clears the SEQBUS_ variables and points SEQBUS_DATABASE_URL at a schema of
// the test's own, whose pool it returns.
func databaseOfItsOwn(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, schema := pgtest.NewPoolWithSchema(t, nil)
	clearEnv(t)
	t.Setenv("SEQBUS_DATABASE_URL", pgtest.SchemaDSN(schema))
	return pool
}

// TestPostgresMigrateAndRun drives `worker migrate` and a worker with the Postgres store on a
// schema of its own.
func TestPostgresMigrateAndRun(t *testing.T) {
	pool := databaseOfItsOwn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	migrate := func(action string) string {
		t.Helper()
		c, out, errOut := newTestCLI()
		require.Equal(t, 0, c.run(ctx, []string{"migrate", action}), errOut.String())
		return out.String()
	}
	all, err := migrations.Load(migrations.FS())
	require.NoError(t, err)
	require.Contains(t, migrate("status"), "false")
	up := migrate("up")
	for _, m := range all {
		require.Contains(t, up, "UP "+m.String())
	}
	require.Contains(t, migrate("up"), "nothing to do")
	st := migrate("status")
	require.Contains(t, st, "001")
	require.Contains(t, st, "true")
	for _, m := range slices.Backward(all) {
		require.Contains(t, migrate("down"), "DOWN "+m.String(), "down rolls back one step")
	}

	// The worker migrates on start and keeps its state in Postgres.
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	client := srv.Client
	sender, err := client.NewSender("orders", nil)
	require.NoError(t, err)
	for _, n := range []int64{2, 3, 1} {
		sid := "pg-1"
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, Body: fmt.Appendf(nil, "%d", n),
			ApplicationProperties: map[string]any{"Sequence": n},
		}, nil))
	}
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_STATE_STORE", "postgres")
	t.Setenv("SEQBUS_MIGRATE_ON_START", "true")
	t.Setenv("SEQBUS_SWEEP_INTERVAL", "50ms")

	var stdout, stderr testio.SyncBuffer
	c := newCLI(&stdout, &stderr)
	sigs := make(chan os.Signal, 2)
	c.signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	exit := make(chan int, 1)
	go func() { exit <- c.run(ctx, nil) }()
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= 3 }, 20*time.Second, 20*time.Millisecond,
		"stderr: %s", stderr.String())

	// The sweeps purge tombstones older than the engine's TombstoneTTL (24h) and keep the others.
	for id, endedAgo := range map[string]time.Duration{"ended-long-ago": 25 * time.Hour, "ended-recently": time.Hour} {
		_, err := pool.Exec(ctx, `INSERT INTO seqbus_session_state (entity, session_id, version, state, next_seq, last_seq, ended_at)
			VALUES ('orders', $1, nextval('seqbus_session_state_version_seq'), '\x00', 6, 5, now() - $2::interval)`, id, endedAgo.String())
		require.NoError(t, err)
	}
	sessionsLeft := func() []string {
		rows, err := pool.Query(ctx, `SELECT session_id FROM seqbus_session_state WHERE session_id LIKE 'ended-%' ORDER BY 1`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	require.Eventually(t, func() bool { return len(sessionsLeft()) == 1 }, 10*time.Second, 20*time.Millisecond, "stderr: %s", stderr.String())
	require.Equal(t, []string{"ended-recently"}, sessionsLeft())

	sigs <- syscall.SIGTERM
	require.Equal(t, 0, <-exit, stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for i, l := range lines {
		require.Contains(t, l, fmt.Sprintf(`"sequence":%d`, i+1))
	}
	require.Contains(t, stderr.String(), "worker: migrated")
	require.NotContains(t, stderr.String(), emulator.DefaultKey)
}
