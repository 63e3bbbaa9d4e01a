package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/demo"
)

// TestJournalCrashBeforeCommit runs the journal handler (postgres store in transactional mode) in a
// worker that exits abruptly inside the transaction of its n-th message, after the handler wrote
// its journal row and before the commit. A second worker finishes the sessions: the journal holds
// every sequence exactly once, in handling order, and every session's state is complete.
func TestJournalCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates, crashAt = 3, 30, 2, 25
	f := newFixture(t)
	f.publish(t, demo.Plan(sessions, messages, duplicates, 41))
	ids := sessionIDs(sessions)
	pool, pgEnv := postgresEnv(t)
	env := f.baseEnv(append(pgEnv, "SEQBUS_HANDLER=journal", "SEQBUS_MAX_CONCURRENT_SESSIONS=3")...)

	a := startWorker(t, "worker-a", append(env, "SEQBUS_TEST_CRASH_BEFORE_COMMIT="+strconv.Itoa(crashAt)))
	require.Equal(t, 137, a.wait(t, waitLong), "worker-a exits abruptly at the test hook; stderr: %s", tail(a.stderr.String(), 2000))
	require.NotContains(t, a.stderr.String(), `"msg":"worker: stopped"`, "no graceful shutdown ran")
	committed := journalRows(t, pool)
	require.Less(t, committed, crashAt, "the crashed message's journal row was rolled back with its state")
	require.Positive(t, committed, "worker-a committed the messages before the crash")

	b := startWorker(t, "worker-b", env)
	ctx := context.Background()
	waitFor(t, waitLong, func() bool {
		return b.exited() || (journalRows(t, pool) == sessions*messages && endedSessions(t, pool) == sessions)
	}, func() string {
		return fmt.Sprintf("journal has %d of %d rows, %d of %d sessions ended", journalRows(t, pool), sessions*messages,
			endedSessions(t, pool), sessions)
	})
	f.requireDrained(t)
	b.stop(t)
	require.Empty(t, b.stdout.String(), "the journal handler writes nothing to stdout")

	for _, id := range ids {
		rows, err := pool.Query(ctx, `SELECT entity, sequence, message_id, body FROM seqbus_journal
WHERE session_id = $1 ORDER BY handled_at, sequence`, id)
		require.NoError(t, err)
		type entry struct {
			Entity    string
			Sequence  int64
			MessageID string
			Body      []byte
		}
		entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
		require.NoError(t, err)
		var seqs []int64
		for _, e := range entries {
			seqs = append(seqs, e.Sequence)
			require.Equal(t, queueName, e.Entity)
			require.Equal(t, fmt.Sprintf("%s/%d", id, e.Sequence), e.MessageID)
			require.JSONEq(t, fmt.Sprintf(`{"order":%q,"step":%d}`, id, e.Sequence), string(e.Body))
		}
		require.Equal(t, oneToN(1, messages), seqs, "session %s: each sequence journaled once, in handling order", id)

		var next, last int64
		var ended bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT next_seq, last_seq, ended_at IS NOT NULL FROM seqbus_session_state
WHERE entity = $1 AND session_id = $2`, queueName, id).Scan(&next, &last, &ended))
		require.Equal(t, []any{int64(messages + 1), int64(messages), true}, []any{next, last, ended},
			"session %s state: next, last, ended", id)
	}
}

// journalSequences returns a session's journaled sequences in the order they were handled.
func journalSequences(t *testing.T, pool *pgxpool.Pool, sessionID string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT sequence FROM seqbus_journal WHERE session_id = $1 ORDER BY handled_at", sessionID)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return seqs
}

func journalRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM seqbus_journal").Scan(&n))
	return n
}

func endedSessions(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM seqbus_session_state WHERE ended_at IS NOT NULL").Scan(&n))
	return n
}
