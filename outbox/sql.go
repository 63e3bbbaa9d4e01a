package outbox

// The outbox's SQL, parameterised. Tables and functions (migration 003_outbox) are resolved
// through the connection's search_path.
const (
	sqlEnqueue = `SELECT seqbus_outbox_enqueue($1, $2, $3, $4::jsonb, $5, $6)`

	sqlNextSequence = `SELECT seqbus_outbox_next_sequence($1, $2, $3)`

	sqlEndSession = `UPDATE seqbus_outbox_counter SET ended_at = now(), updated_at = now()
WHERE entity = lower($1) AND session_key = lower($2) AND ended_at IS NULL`

	sqlCheckSchema = `SELECT to_regclass('seqbus_outbox') IS NOT NULL AND to_regclass('seqbus_outbox_paused') IS NOT NULL`

	// sqlScan lists the oldest pending messages of sessions that are neither excluded
	// ($2, $3: entities and session keys this relay is sending or skipping) nor paused,
	// restricted to the entities $1 (all when empty). The caller keeps the first row of
	// each session.
	sqlScan = `SELECT o.entity, o.session_key FROM seqbus_outbox o
WHERE o.sent_at IS NULL
  AND (cardinality($1::text[]) = 0 OR o.entity = ANY ($1::text[]))
  AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS x (entity, session_key)
                  WHERE x.entity = o.entity AND x.session_key = o.session_key)
  AND NOT EXISTS (SELECT 1 FROM seqbus_outbox_paused p
                  WHERE p.entity = o.entity AND p.session_key = o.session_key AND p.next_attempt_at > now())
ORDER BY o.id
LIMIT $4`

	// sqlPausedSummary counts paused sessions and says in how many seconds the first one is
	// due (NULL when none is paused).
	sqlPausedSummary = `SELECT count(*), extract(epoch FROM min(next_attempt_at) - now())::float8
FROM seqbus_outbox_paused
WHERE cardinality($1::text[]) = 0 OR entity = ANY ($1::text[])`

	// sqlClaim takes the session's lock for the transaction, without waiting, and bounds how
	// long the transaction may sit idle (during the send) before the server ends it. The lock
	// is a two-key advisory lock (class lockClass, the hash of schema, entity and session key).
	sqlClaim = `SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2 || '/' || $3)),
       set_config('idle_in_transaction_session_timeout', $4, true)`

	// sqlPending reads the first pending messages of a session that is not paused; it runs after
	// sqlClaim, in a statement of its own, so that its snapshot sees everything the previous
	// holder of the lock committed.
	sqlPending = `SELECT sequence, session_id, body, properties::text, is_last, coalesce(traceparent, '')
FROM seqbus_outbox
WHERE entity = $1 AND session_key = $2 AND sent_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM seqbus_outbox_paused p
                  WHERE p.entity = $1 AND p.session_key = $2 AND p.next_attempt_at > now())
ORDER BY sequence
LIMIT $3`

	// sqlMarkSent deletes the session's messages up to sequence $3 once they are sent, keeps
	// a sent last message (without body) for the purge, and ends a pause.
	sqlMarkSent = `WITH deleted AS (
    DELETE FROM seqbus_outbox
    WHERE entity = $1 AND session_key = $2 AND sequence <= $3 AND sent_at IS NULL AND NOT is_last
    RETURNING 1
), ended AS (
    UPDATE seqbus_outbox SET sent_at = now(), body = '\x'::bytea, properties = '{}'
    WHERE entity = $1 AND session_key = $2 AND sequence <= $3 AND sent_at IS NULL AND is_last
    RETURNING 1
), unpaused AS (
    DELETE FROM seqbus_outbox_paused WHERE entity = $1 AND session_key = $2
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM ended)`

	sqlPauseAttempts = `SELECT coalesce((SELECT attempts FROM seqbus_outbox_paused WHERE entity = $1 AND session_key = $2), 0)`

	// sqlPause records a failed send: the session waits $5 microseconds from now (the clock,
	// not the start of the transaction, which began before the send).
	sqlPause = `INSERT INTO seqbus_outbox_paused AS p
    (entity, session_key, session_id, attempts, next_attempt_at, last_error)
VALUES ($1, $2, $3, $4, clock_timestamp() + $5 * interval '1 microsecond', $6)
ON CONFLICT (entity, session_key) DO UPDATE
    SET attempts = EXCLUDED.attempts, next_attempt_at = EXCLUDED.next_attempt_at,
        last_error = EXCLUDED.last_error, session_id = EXCLUDED.session_id`

	// sqlPurge forgets, in one statement (so every part sees the same snapshot), the sent last
	// messages older than the cutoff, the counters of sessions that ended before it and have
	// no message left that is pending or newer, and pauses of sessions with nothing pending.
	// $1 is the retention in microseconds.
	sqlPurge = `WITH cutoff AS (
    SELECT now() - $1 * interval '1 microsecond' AS at
), messages AS (
    DELETE FROM seqbus_outbox o USING cutoff
    WHERE o.sent_at IS NOT NULL AND o.sent_at < cutoff.at
    RETURNING 1
), counters AS (
    DELETE FROM seqbus_outbox_counter c USING cutoff
    WHERE c.ended_at IS NOT NULL AND c.ended_at < cutoff.at
      AND NOT EXISTS (SELECT 1 FROM seqbus_outbox o
                      WHERE o.entity = c.entity AND o.session_key = c.session_key
                        AND (o.sent_at IS NULL OR o.sent_at >= cutoff.at))
    RETURNING 1
), paused AS (
    DELETE FROM seqbus_outbox_paused p
    WHERE NOT EXISTS (SELECT 1 FROM seqbus_outbox o
                      WHERE o.entity = p.entity AND o.session_key = p.session_key AND o.sent_at IS NULL)
    RETURNING 1
)
SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM counters), (SELECT count(*) FROM paused)`
)
