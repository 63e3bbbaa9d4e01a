// Package outbox is seqbus's transactional outbox: an application stores its messages in
// Postgres in the same transaction as its own writes, each session's messages numbered
// 1, 2, 3, … without gaps, and a Relay sends them to Service Bus in that order.
//
// # Enqueueing
//
// The tables and SQL functions come from migration 003_outbox (package migrations).
// Any language enqueues with one call inside its transaction:
//
//	SELECT seqbus_outbox_enqueue('orders', 'order-42', '\x7b7d'::bytea,
//	                             '{"Kind": "created"}'::jsonb, false, '00-…-…-01');
//	-- arguments: entity, session_id, body, properties (default '{}'),
//	--            is_last (default false), traceparent (default NULL); returns the sequence
//
// and Go with [Enqueue]:
//
//	seq, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{
//		Entity: "orders", SessionID: "order-42", Body: body, Traceparent: tp,
//	})
//
// The function allocates the session's next sequence by updating the session's counter
// row, so a rollback gives the number back, and concurrent transactions of one session
// queue on that row: the relay can never see sequence n+1 committed without n. On commit
// Postgres delivers NOTIFY seqbus_outbox (payload: the entity) to the relays; set
// seqbus.outbox_notify = 'off' to skip it (relays then find messages by polling).
//
// # What is refused
//
// Every refusal is a clear error, and nothing is stored or sent:
//
//   - A session id that publisher.ValidateSessionID refuses (empty, over 128
//     characters, a control character): ErrInvalidSessionID, SQLSTATE SQ001. The SQL
//     function seqbus_outbox_session_id_problem applies the same rule to other languages.
//   - An enqueue into an ended session: ErrSessionEnded, SQ002. A message with Last
//     (is_last) ends its session; the worker keeps a tombstone of an ended session for
//     its tombstone TTL (24h by default) and drops later messages of it as duplicates,
//     so the outbox refuses them instead of letting them vanish. The relay's purge
//     forgets the session RelayConfig.EndedRetention (default 7 days) after its last
//     message was sent; the id then starts again at 1, as a new session, which the
//     worker accepts once its tombstone has expired. Keep EndedRetention above the
//     worker's tombstone TTL.
//   - A message larger than Service Bus takes: ErrMessageTooLarge, SQ003. The estimate
//     (body, properties as JSON plus 16 bytes each, the session id four times, 1 KiB of
//     headers) bounds what the SDK's batch measures, against the setting
//     seqbus.outbox_max_message_bytes (default 262144, Standard tier; raise it for
//     Premium with ALTER DATABASE … SET). Properties over 64 KiB are refused as well.
//   - Properties that are not strings, numbers or booleans, a NULL body:
//     ErrInvalidMessage, SQ004. A traceparent that is not W3C's: ErrInvalidTraceparent,
//     SQ005. An entity that is not a queue or topic name: ErrInvalidEntity, SQ006.
//
// Service Bus compares entity names and session ids case-insensitively, so the outbox
// stores entities lower-cased and keys sessions by their lower-cased id: "Order-42" and
// "order-42" share one sequence, as they share one session at the broker. Each message
// keeps the casing it was enqueued with, and a batch never mixes two casings.
//
// # The relay
//
// [NewRelay] and [Relay.Run] send the committed messages. A relay looks at the sessions
// of the oldest pending messages and takes them in random order (so that relays scanning
// together rarely reach for the same session). For each session it takes, in one
// transaction: a transaction-level advisory lock on the session, without waiting
// (pg_try_advisory_xact_lock; a session another relay holds is skipped for now); then,
// in a statement of its own so that it sees what the previous holder committed, the
// session's first BatchSize pending messages by sequence; then it sends them with
// SendMessageBatch (as few batches as fit) and deletes them (a last message is kept,
// without its body, for the purge) before it commits. The lock is on the session, not
// on rows, so no relay can send a session's later messages while another still holds
// earlier ones: each session goes out in order, and different sessions go out in
// parallel, across relays and Concurrency. The lock is not the counter row, so a relay
// never blocks an application's enqueue, even while the broker hangs.
//
// Each message carries SessionId, the sequence (application property "Sequence" by
// default), "IsLast" = true on the last, Diagnostic-Id = the traceparent given at
// enqueue, and MessageId = "<session>/<sequence>" (publisher.MessageID), so duplicate
// detection on the entity absorbs a message sent twice; the worker also drops it by
// sequence.
//
// # Crashes
//
// A relay killed before its send leaves the rows, and the lock goes with its
// connection. A relay killed after the broker accepted a batch but before its commit
// leaves those rows pending, and the next relay sends that batch again: a killed relay
// sends again at most one batch for each session it was sending (Concurrency of them).
// Duplicate detection on the entity (requiresDuplicateDetection, recommended) and the
// worker, which drops a sequence it has handled, absorb the copies. A relay that hangs
// mid-send loses its lock when the server ends its transaction
// (idle_in_transaction_session_timeout, set to SendTimeout + 30s for the claim). A relay
// told to stop (ctx ends) records what the broker already accepted before it returns.
//
// # Failures
//
// A failed send pauses its session, like a Pub/Sub ordering key after a failed publish:
// the session's later messages wait, the error and the attempt count go to
// seqbus_outbox_paused (where an operator sees them), and every relay leaves the session
// alone until MinBackoff × 2^(attempts-1), capped at MaxBackoff, with jitter, has
// passed. Other sessions go on. The first successful send ends the pause. A relay that
// cannot reach the broker thus keeps every row and resumes when the broker is back. A
// message the broker can never take (larger than the entity allows, though under the
// outbox's limit, say) keeps its session paused, retried every MaxBackoff, with the
// reason in seqbus_outbox_paused.last_error, until an operator acts: nothing is skipped,
// since a skipped sequence would stall the session at the worker anyway. Database
// errors are logged and retried with the same backoff.
//
// # Wake-ups
//
// The relay LISTENs on seqbus_outbox on a connection of its own and looks for work on
// each notification, after each batch, when a pause is due, and every PollInterval as a
// safety net (notifications are lost while the listening connection is down, and never
// arrive through a pooler in transaction mode, such as PgBouncer's).
//
// # Counter
//
// [Counter] is a publisher.Counter on the same counter table, for applications that
// publish directly: numbers survive restarts and are shared by all processes. It cannot
// make the send atomic with the application's write; the outbox can.
//
// # Imports
//
// outbox imports pgx, azservicebus, publisher (for the session-id rule, MessageID and
// the batch sender) and the standard library. It must not import migrations (the
// application or its tests apply the schema), the sequencer, the emulator or any other
// seqbus package.
package outbox
