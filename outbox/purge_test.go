package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/outbox"
)

// TestPurge: an ended session is forgotten only once its last message was sent longer
// ago than the retention; its id then starts again at 1. Pending messages, recent
// sends and sessions that never end are kept.
func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)
	e := func(session string, last bool) int64 {
		return enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: session, Last: last})
	}
	// sent marks a session's messages sent as the relay does, and dates its end and its
	// last send back by ago.
	sent := func(session string, ago time.Duration) {
		_, err := pool.Exec(ctx, `DELETE FROM seqbus_outbox WHERE session_key = $1 AND NOT is_last`, session)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE seqbus_outbox SET sent_at = now() - $2 * interval '1 second' WHERE session_key = $1 AND is_last`,
			session, ago.Seconds())
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE seqbus_outbox_counter SET ended_at = now() - $2 * interval '1 second'
WHERE session_key = $1 AND ended_at IS NOT NULL`, session, ago.Seconds())
		require.NoError(t, err)
	}
	e("old", false)
	e("old", true)
	sent("old", 2*time.Hour)
	e("recent", true)
	sent("recent", time.Minute)
	e("pending", false)
	e("pending", true) // ended, not sent yet
	e("open", false)
	sent("open", 0)
	c, err := outbox.NewCounter(pool, &outbox.CounterConfig{Entity: "orders"})
	require.NoError(t, err)
	_, err = c.Next(ctx, "direct")
	require.NoError(t, err)
	require.NoError(t, c.End(ctx, "direct"))
	_, err = pool.Exec(ctx, `UPDATE seqbus_outbox_counter SET ended_at = now() - interval '2 hours' WHERE session_key IN ('direct', 'pending')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO seqbus_outbox_paused (entity, session_key, session_id, attempts, next_attempt_at, last_error)
VALUES ('orders', 'gone', 'gone', 3, now(), 'x'), ('orders', 'pending', 'pending', 1, now(), 'y')`)
	require.NoError(t, err)

	res, err := outbox.Purge(ctx, pool, outbox.PurgeParams{Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, outbox.PurgeResult{Messages: 1, Sessions: 2, Pauses: 1}, res)
	require.Equal(t, int64(1), e("old", false), "a purged session starts again at 1")
	require.Equal(t, int64(1), e("direct", false))
	for _, s := range []string{"recent", "pending"} {
		err := enqueueErr(t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: s})
		require.ErrorIs(t, err, outbox.ErrSessionEnded, s)
	}
	require.Equal(t, int64(2), e("open", false), "a session that never ended keeps its counter")
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM seqbus_outbox_paused`), "the pause of a session with messages stays")

	res, err = outbox.Purge(ctx, pool, outbox.PurgeParams{Retention: time.Hour})
	require.NoError(t, err)
	require.Zero(t, res, "nothing more")
	_, err = outbox.Purge(ctx, pool, outbox.PurgeParams{Retention: -time.Second})
	require.ErrorContains(t, err, "negative retention")
}
