package postgres

// The store's SQL, parameterised. Tables are resolved through the connection's search_path.
const (
	sqlLoad = `SELECT version, state FROM seqbus_session_state WHERE entity = $1 AND session_id = $2`

	// sqlInsertState is a first save (expected version 0); $1..$11.
	sqlInsertState = `INSERT INTO seqbus_session_state
    (entity, session_id, version, state, next_seq, last_seq, parked, due_deferred, ended_at, gap_since, blocked, retry_at, updated_at)
VALUES ($1, $2, nextval('seqbus_session_state_version_seq'), $3, $4, $5, $6, $7, $8, $9, $10, $11, now())
ON CONFLICT (entity, session_id) DO NOTHING
RETURNING version, next_seq`

	// sqlUpdateState is a later save with the version check; $1..$12.
	sqlUpdateState = `UPDATE seqbus_session_state SET
    version = nextval('seqbus_session_state_version_seq'),
    state = $4, next_seq = $5, last_seq = $6, parked = $7, due_deferred = $8, ended_at = $9,
    gap_since = $10, blocked = $11, retry_at = $12, updated_at = now()
WHERE entity = $1 AND session_id = $2 AND version = $3
RETURNING version, next_seq`

	// heldGone removes, in the statement that saves the state (st), the session's held messages
	// below the saved next_seq (migration 009). It joins st, so it removes nothing when the
	// version check fails: the advance and the removal are one step.
	heldGone = `gone AS (
    DELETE FROM seqbus_held_message h USING st
    WHERE h.entity = $1 AND h.session_id = $2 AND h.sequence < st.next_seq
)`

	// sqlInsert and sqlUpdate save the state and remove the held messages it moves past. A
	// session without state holds nothing, so a first save has nothing to remove.
	sqlInsert = sqlInsertState
	sqlUpdate = `WITH st AS (` + sqlUpdateState + `), ` + heldGone + `
SELECT version, next_seq FROM st`

	// sqlDelete deletes on a matching version and reports, from the snapshot before the delete,
	// whether it did and which version was stored (NULL: no row).
	// The session's held messages go with it (migration 009), in the same statement; its dead
	// letters stay.
	sqlDelete = `WITH deleted AS (
    DELETE FROM seqbus_session_state WHERE entity = $1 AND session_id = $2 AND version = $3 RETURNING 1
), gone AS (
    DELETE FROM seqbus_held_message h USING deleted WHERE h.entity = $1 AND h.session_id = $2
)
SELECT EXISTS (SELECT 1 FROM deleted),
       (SELECT version FROM seqbus_session_state WHERE entity = $1 AND session_id = $2)`

	// sqlListStranded: due_deferred holds State.NeedsWake (a parked session waits for an operator, so
	// parked alone does not qualify), for a tombstone too (its index still lists a handled message
	// deferred at the broker). The predicate implies the partial index's (due_deferred OR parked)
	// (migration 007), so the index serves it; the index is keyed by entity alone (migration 008,
	// so that saves can be HOT updates), and the few rows it finds are sorted.
	sqlListStranded = `SELECT session_id FROM seqbus_session_state
WHERE entity = $1 AND due_deferred
ORDER BY updated_at, session_id
LIMIT $2`

	// sqlList lists sessions after a cursor, ordered by id. $3 includes ended sessions (a stranded
	// one matches $7 anyway, as sessionstate.Filter.Match has it); $4 says whether any of the
	// filters $5 (parked), $6 (gap), $7 (stranded: due_deferred holds State.NeedsWake), $9
	// (blocked), $10 (retrying: retry_at holds State.Retrying.At) applies.
	sqlList = `SELECT session_id, version, state FROM seqbus_session_state
WHERE entity = $1 AND session_id > $2
  AND ($3 OR ended_at IS NULL OR ($7 AND due_deferred))
  AND (NOT $4 OR ($5 AND parked) OR ($6 AND gap_since IS NOT NULL) OR ($7 AND due_deferred) OR ($9 AND blocked)
       OR ($10 AND retry_at IS NOT NULL))
ORDER BY session_id
LIMIT $8`

	// sqlPurgeTombstones keeps a tombstone that still indexes a deferred message to settle
	// (due_deferred); a SkippedPoison marker has no column and is not seen. Held messages of a
	// purged session go with it, as with Delete (an ended session holds none: they lie below
	// its next_seq), so a session id that starts over never finds another's.
	sqlPurgeTombstones = `WITH purged AS (
    DELETE FROM seqbus_session_state
    WHERE entity = $1 AND ended_at IS NOT NULL AND ended_at < $2 AND NOT due_deferred
    RETURNING session_id
), gone AS (
    DELETE FROM seqbus_held_message h USING purged p WHERE h.entity = $1 AND h.session_id = p.session_id
)
SELECT count(*) FROM purged`

	// sqlJournalInsert records one handled message for the journal handler (seqbus_journal,
	// migration 002). A second row for the same sequence violates the primary key: the journal
	// never hides a repeated effect.
	sqlJournalInsert = `INSERT INTO seqbus_journal (entity, session_id, sequence, message_id, body, handled_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())`
)
