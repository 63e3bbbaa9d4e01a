// Package postgres is a sequencer.StateStore in Postgres (pgx/v5): one row per (entity, session) in
// seqbus_session_state, created by the migrations package.
//
// # Versions
//
// Every write takes its version from the sequence seqbus_session_state_version_seq, so versions
// are never reused. A first save (expected version 0) inserts with ON CONFLICT DO NOTHING; later
// saves UPDATE ... WHERE version = expected. Zero rows affected means ErrVersionConflict.
//
// # Sweeper and tombstones
//
// Besides the encoded state, each row mirrors next_seq, last_seq, parked, due_deferred, ended_at,
// gap_since (migration 004), blocked (migration 005) and retry_at (migration 006: when a released
// retry's next attempt is due), indexed for [Store.ListStranded] (sessions a sweeper must
// accept because the broker will not offer them), [Store.List] (sessionstate.Lister: sessions by
// what their state says, for sweepers and operators) and [Store.PurgeTombstones] (ended sessions
// whose tombstone has expired).
//
// # Held messages
//
// The store is a sequencer.HeldStore: [Store.Hold] writes a session's early messages into
// seqbus_held_message (migration 009: keyed by entity, session and sequence; bytea body, jsonb
// properties as typed values, size, held_at) in one statement with the state and its version
// check; a sequence already held keeps its row. Every save removes the session's held messages
// below the saved next_seq in the same statement (a data-modifying WITH that joins the saved
// row, so a failed version check removes nothing), and Delete (and [Store.PurgeTombstones])
// removes all of them with the state. [Store.DeadLetterHeld] moves a held message into seqbus_held_dead_letter and saves the
// state in one transaction; the dead letters outlive the state, listed by
// [Store.HeldDeadLetters] and removed by [Store.RemoveHeldDeadLetter] once replayed.
//
// # Transactional mode
//
// [Store.Transactional] returns a [TxStore], a sequencer.AtomicStore: SaveWith begins a
// transaction, runs the handler with the transaction reachable through [TxFromContext], saves
// the state with the version check in the same transaction and commits. A handler that writes
// to the same database through that transaction gets exactly-once effects: on a handler error,
// a version conflict, a panic or a cancelled context nothing is committed.
//
// [TxStore.Journal] is such a handler, ready to use: it inserts each message into seqbus_journal
// (migration 002) through the transaction, so the journal holds every sequence exactly once.
//
// # Errors
//
// pgx errors are translated at this edge: conflicts become sequencer.ErrVersionConflict, context
// ends keep wrapping context.Canceled / context.DeadlineExceeded, anything else becomes an
// [*Error] holding the SQLSTATE and message as text, so no pgx type reaches the engine.
//
// postgres imports sequencer, sessionstate (the Lister contract), pgx and the standard library; it must not import migrations (the
// schema is applied by the application or its tests) nor any other seqbus package.
package postgres
