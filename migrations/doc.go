// Package migrations holds seqbus's database schema as numbered SQL files
// (NNN_name.up.sql / NNN_name.down.sql, embedded in the binary) and the runner that applies them.
//
// # Running
//
//	m := migrations.New(pool, nil)
//	res, err := m.Up(ctx, migrations.UpOptions{})
//
// Each migration and the row recording it in seqbus_migration commit in one transaction, so a
// failed migration leaves nothing behind. A whole Up or Down run holds a Postgres advisory lock
// (pg_advisory_lock on [DefaultLockKey]) on the connection it uses: replicas that start together
// queue behind each other and apply each migration exactly once. The tables live in the
// connection's search_path (the first schema in it).
//
// # Files
//
//   - 001_session_state: seqbus_session_state, the postgres state store's table.
//   - 002_journal: seqbus_journal, the journal handler's table (one row per handled message,
//     primary key (entity, session_id, sequence)).
//   - 003_outbox: the transactional outbox of package outbox: seqbus_outbox (pending
//     messages), seqbus_outbox_counter (each session's last sequence), seqbus_outbox_paused
//     (sessions whose last send failed), and the functions seqbus_outbox_enqueue,
//     seqbus_outbox_next_sequence and seqbus_outbox_session_id_problem, which applications in
//     any language call inside their transactions. The functions keep the search_path they were
//     created with, so they find their tables however they are called.
//   - 004_session_gap: seqbus_session_state.gap_since, the state's GapSince, indexed for the
//     sessions waiting on a missing sequence.
//   - 005_session_blocked: seqbus_session_state.blocked, the state's Blocked mark (the poison
//     policy block holds the session on a failing message), indexed for the blocked sessions.
//   - 006_session_retry: seqbus_session_state.retry_at, the time of a released retry's next
//     attempt (State.Retrying.At, SEQBUS_RETRY_RELEASE_AFTER), indexed for the sessions to wake.
//   - 007_session_stranded_ended: the index of stranded sessions covers tombstones too (one
//     whose index still lists a handled message deferred at the broker needs a run).
//   - 008_session_state_hot: the sweeper's index leaves updated_at out and the table keeps free
//     room in its pages, so that a save which changes no indexed column is a heap-only (HOT)
//     update instead of a new entry in every index.
//   - 009_held_message: seqbus_held_message, the early messages the postgres store holds for
//     its sessions (sequencer.HeldStore: written and removed in the statements that save the
//     session's state), and seqbus_held_dead_letter, those of them that turned poison, until an
//     operator replays them. Its down migration refuses while either table holds a row: those
//     messages exist nowhere else.
//
// Up applies every pending migration, or up to UpOptions.TargetVersion, at most MaxSteps; Down
// rolls back one migration unless told otherwise (DownOptions.TargetVersion, -1 for everything,
// MaxSteps); DryRun reports what would run and changes nothing. Status lists every known
// migration and whether it is applied. `worker migrate up|down|status` offers the same as
// --target-version, --max-steps and --dry-run (which prints the SQL).
//
// migrations imports pgx and the standard library only; it must never import other seqbus
// packages (the stores depend on the schema, not the other way round).
package migrations
