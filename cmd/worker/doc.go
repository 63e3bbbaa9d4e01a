// Command worker runs the seqbus worker: it receives Service Bus session messages, restores their
// application order and hands them to a handler.
//
//	worker [run]                    run the worker (configured by SEQBUS_* variables)
//	worker relay                    publish the Postgres outbox to Service Bus in session order
//	worker scaler                   serve the scaling signal (GET /scale, /metrics, /healthz)
//	                                with the worker's settings, consuming nothing
//	worker doctor [--json]          check the namespace, the entity and the state store with the
//	                                worker's settings, with a live round trip of every broker call
//	                                the worker makes (docs/doctor.md); exit 0 all pass, 1 a check
//	                                failed, 2 a bad argument
//	worker migrate up|down|status   manage the Postgres schema (SEQBUS_DATABASE_URL): migrations
//	                                001 to 006; up and down take [--target-version N]
//	                                [--max-steps N] [--dry-run] (prints the SQL, changes nothing)
//	worker sessions list|show|resume|skip|retry-now   operator commands on the entity's sessions
//	worker dlq list|replay          operator commands on the entity's dead-letter queue
//
// Logs are JSON on stderr; the log handler writes handled messages to stdout. The first SIGINT or
// SIGTERM stops gracefully (each session finishes its message in hand) within
// SEQBUS_SHUTDOWN_TIMEOUT: the process exits 0 once everything stopped, 1 when the timeout passed
// and the work still in hand was canceled. A second signal cancels the work in hand (exit 0).
//
// # Configuration
//
//	SEQBUS_CONNECTION_STRING        Service Bus connection string (secrets are redacted in logs)
//	SEQBUS_NAMESPACE                or: myns.servicebus.windows.net with Entra ID (DefaultAzureCredential)
//	SEQBUS_QUEUE                    a session-enabled queue, or:
//	SEQBUS_TOPIC, SEQBUS_SUBSCRIPTION   a session-enabled subscription
//	SEQBUS_ORDERING                 session (default: restore each session's order) or none (an
//	                                entity without sessions: handled as they come, no state)
//	SEQBUS_STATE_STORE              servicebus (default, session state) or postgres
//	SEQBUS_DATABASE_URL             Postgres URL (required with postgres; password redacted in logs)
//	SEQBUS_MIGRATE_ON_START         apply migrations at start (postgres only; default false: the
//	                                worker refuses a schema that lacks a migration)
//	SEQBUS_MAX_CONCURRENT_SESSIONS  sessions processed at once (default 8)
//	SEQBUS_SESSION_CONNECTIONS      connections sessions are locked on, in turn (default 1; the
//	                                SDK negotiates an accept's claims one at a time per connection)
//	SEQBUS_SESSION_IDLE_TIMEOUT     release a session after this long without messages (default 5s)
//	SEQBUS_SEQUENCE_PROPERTY        application property with the sequence (default Sequence)
//	SEQBUS_LAST_PROPERTY            application property marking the last message (default IsLast)
//	SEQBUS_MAX_HANDLER_ATTEMPTS     handler calls before the poison policy applies (default 5)
//	SEQBUS_RETRY_BASE               wait after the first failed call (default 1s), doubling…
//	SEQBUS_RETRY_MAX                …up to this (default 30s)
//	SEQBUS_RETRY_RELEASE_AFTER      0 (default): every retry waits in place, holding the session;
//	                                N: after N in-place attempts each wait is spent with the
//	                                session released, the next attempt's time in its state (below
//	                                SEQBUS_MAX_HANDLER_ATTEMPTS; not with the poison policy block)
//	SEQBUS_POISON_POLICY            park (default), skip or block
//	SEQBUS_GAP_TIMEOUT              how long a missing sequence is waited for while later ones
//	                                wait (default 0: forever, reported by metrics and warnings)
//	SEQBUS_GAP_POLICY               after the gap timeout: wait (default), skip or park
//	SEQBUS_UNSEQUENCED              a message without the sequence: deadletter (default) or
//	                                passthrough (handled at once, outside the session's order)
//	SEQBUS_EARLY_MESSAGES           where an early message waits beyond the reorder window: defer
//	                                (default: deferred at the broker; store is not in this build)
//	SEQBUS_DEFER_ON_PARTITIONED     start with defer on a partitioned entity, which the worker
//	                                otherwise refuses when it can read the entity (default false)
//	SEQBUS_REORDER_WINDOW           early messages held in memory per session (default 256; 0: off)
//	SEQBUS_REORDER_WINDOW_BYTES     bound on their bodies (default 8MiB)
//	SEQBUS_DRAIN_BATCH              deferred messages fetched per receive-deferred (default 32)
//	SEQBUS_PREFETCH                 messages asked for per receive (default 32)
//	SEQBUS_RECEIVE_WAIT             how long a receive waits for more messages after the first
//	                                (default 20ms, the SDK's own)
//	SEQBUS_TOMBSTONE_TTL            keep an ended session's state this long (default 24h; 0: delete)
//	SEQBUS_STATE_MAX_BYTES          the entity's max message size, bounding session state (default 256KiB)
//	SEQBUS_LOCK_RENEW_INTERVAL      session lock renewal (default 0: half the remaining lock time)
//	SEQBUS_SAVE_EACH_MESSAGE        save the exact position before each message is completed
//	                                instead of once per run of in-order messages in hand; with
//	                                pipelined runs the saves run in the background (default false;
//	                                see README)
//	SEQBUS_PIPELINE_RUNS            complete a run's messages in the background, 16 at a time, and
//	                                receive the next batch while one is handled, with either store;
//	                                after a crash up to 17 are handed over again, in order
//	                                (default true; false: each completion awaited; see README)
//	SEQBUS_SWEEP_INTERVAL           how often stranded sessions are woken, session gauges refreshed,
//	                                old gaps warned about and expired tombstones cleared, by the
//	                                one replica that holds the entity's sweeper lease (default 30s)
//	SEQBUS_SCALE_INTERVAL           how often the scaling signal (GET /scale, seqbus_replicas_wanted)
//	                                is evaluated, by worker scaler and by the replica that holds
//	                                the sweeper lease (default 10s)
//	SEQBUS_SCALE_MAX_REPLICAS       bound on the replicas the scaling signal asks for (default 100)
//	SEQBUS_HANDLER                  log (default), noop, http, or journal (postgres store only:
//	                                inserts each message into seqbus_journal in the same
//	                                transaction as the state advance, exactly-once effects)
//	SEQBUS_HANDLER_URL              target of the http handler
//	SEQBUS_HANDLER_TIMEOUT          bound on one handler call (default 30s)
//	SEQBUS_HTTP_ADDR                /metrics, /healthz, /readyz, /scale (default :9464; off: none)
//	SEQBUS_READY_CHECK_INTERVAL     how often readiness is checked (default 5s)
//	SEQBUS_LOG_LEVEL                debug, info (default), warn, error
//	SEQBUS_SHUTDOWN_TIMEOUT         graceful stop bound (default 30s)
//
// Tracing (OpenTelemetry) follows the standard OTEL_* variables and is off unless
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) is set.
//
// worker relay reads SEQBUS_CONNECTION_STRING or SEQBUS_NAMESPACE, SEQBUS_DATABASE_URL,
// SEQBUS_MIGRATE_ON_START, SEQBUS_SEQUENCE_PROPERTY, SEQBUS_LAST_PROPERTY, SEQBUS_HTTP_ADDR,
// SEQBUS_READY_CHECK_INTERVAL, SEQBUS_LOG_LEVEL, SEQBUS_SHUTDOWN_TIMEOUT and:
//
//	SEQBUS_RELAY_ENTITIES           queues and topics to relay, comma-separated (default all)
//	SEQBUS_RELAY_BATCH_SIZE         messages of one session claimed and sent at once (default 100)
//	SEQBUS_RELAY_CONCURRENCY        sessions sent at once (default 4)
//	SEQBUS_RELAY_POLL_INTERVAL      polling behind LISTEN/NOTIFY (default 5s)
//	SEQBUS_RELAY_MIN_BACKOFF        pause of a session after a failed send (default 1s), doubling…
//	SEQBUS_RELAY_MAX_BACKOFF        …up to this (default 1m)
//	SEQBUS_RELAY_SEND_TIMEOUT       bound on one session's send (default 30s)
//	SEQBUS_RELAY_ENDED_RETENTION    how long an ended session refuses new messages (default 168h;
//	                                0: forever)
//	SEQBUS_RELAY_PURGE_INTERVAL     how often ended sessions past their retention are purged (1m)
//
// Test hook (ignored unless set): SEQBUS_TEST_CRASH_BEFORE_COMMIT=n makes the process exit
// abruptly (code 137, no cleanup) after the handler ran for the n-th message, before the state
// advance commits.
//
// Every variable is the envconfig tag of a field of worker.Config (worker.RelayConfig for the
// relay), except the handler, the log level and the test hooks, which are the binary's own. A
// variable left unset takes the default above; one that is set means what it says: 0 is zero,
// the "off" of the settings that say so above, and refused where it means nothing. An invalid
// setting stops the worker at start with a message naming the variable.
//
// # Operator commands
//
// The operator commands read the worker's variables (the same validation; the entity, the state
// store, the connection and the message contract are what they use) and print a table, or JSON
// with --json; -h after a command lists its flags:
//
//	sessions list [--parked] [--gap] [--stranded] [--blocked] [--retrying] [--ended] [--limit N] [--after ID]
//	sessions show ID [--wait D] [--max-messages N]
//	sessions resume ID | --all-parked [--wait D]
//	sessions skip ID [--to N] [--wait D]
//	sessions retry-now ID [--wait D]
//	dlq list [--session ID] [--reason R] [--limit N]
//	dlq replay --session ID | --all [--reason R] [--target ENTITY] [--dry-run] [--wait D]
//
// resume, skip and retry-now lock the session by id, change its state through the store's version check and
// release it; while a worker holds the session they wait up to --wait (default 30s) and say so on
// stderr. replay sends each session's dead letters back in sequence order and completes each one
// only after its copy was sent (a subscription's need --target). The operator package
// documents the details. Exit codes: 2 for a command line a command cannot run (a bad flag, a
// malformed session id), 1 for an operation that was refused or failed. Changes are logged as JSON lines on stderr.
//
// Test hook (ignored unless set): SEQBUS_TEST_REPLAY_CRASH_AFTER=n makes `dlq replay` exit
// abruptly (code 137) once it has sent n copies, before it completes their dead letters.
package main
