// Command worker runs the seqbus worker: it receives Service Bus session messages, restores their
// application order and hands them to a handler.
//
//	worker [run]                    run the worker (configured by SEQBUS_* variables)
//	worker migrate up|down|status   manage the Postgres state store schema (SEQBUS_DATABASE_URL)
//	worker sessions list|show|resume|skip   operator commands on the entity's sessions
//	worker dlq list|replay          operator commands on the entity's dead-letter queue
//
// Logs are JSON on stderr; the log handler writes handled messages to stdout. The first SIGINT or
// SIGTERM stops gracefully (each session finishes its message in hand) within
// SEQBUS_SHUTDOWN_TIMEOUT; a second signal cancels the work in hand.
//
// # Configuration
//
//	SEQBUS_CONNECTION_STRING        Service Bus connection string (secrets are redacted in logs)
//	SEQBUS_NAMESPACE                or: myns.servicebus.windows.net with Entra ID (DefaultAzureCredential)
//	SEQBUS_QUEUE                    a session-enabled queue, or:
//	SEQBUS_TOPIC, SEQBUS_SUBSCRIPTION   a session-enabled subscription
//	SEQBUS_STATE_STORE              servicebus (default, session state) or postgres
//	SEQBUS_DATABASE_URL             Postgres URL (required with postgres; password redacted in logs)
//	SEQBUS_MIGRATE_ON_START         apply migrations at start (postgres only; default false)
//	SEQBUS_MAX_CONCURRENT_SESSIONS  sessions processed at once (default 8)
//	SEQBUS_SESSION_IDLE_TIMEOUT     release a session after this long without messages (default 5s)
//	SEQBUS_SEQUENCE_PROPERTY        application property with the sequence (default Sequence)
//	SEQBUS_LAST_PROPERTY            application property marking the last message (default IsLast)
//	SEQBUS_POISON_POLICY            park (default), skip or block
//	SEQBUS_MAX_HANDLER_ATTEMPTS     handler calls before the poison policy applies (default 5)
//	SEQBUS_SAVE_EACH_MESSAGE        save the state after every message instead of once per run of
//	                                in-order messages in hand (default false; see README)
//	SEQBUS_SWEEP_INTERVAL           how often stranded sessions are looked for, and with postgres
//	                                expired tombstones (older than 24h) purged (default 30s)
//	SEQBUS_HANDLER                  log (default), noop, http, or journal (postgres store only:
//	                                inserts each message into seqbus_journal in the same
//	                                transaction as the state advance, exactly-once effects)
//	SEQBUS_HANDLER_URL              target of the http handler
//	SEQBUS_HANDLER_TIMEOUT          bound on one handler call (default 30s)
//	SEQBUS_LOG_LEVEL                debug, info (default), warn, error
//	SEQBUS_SHUTDOWN_TIMEOUT         graceful stop bound (default 30s)
//
// Test hook (ignored unless set): SEQBUS_TEST_CRASH_BEFORE_COMMIT=n makes the process exit
// abruptly (code 137, no cleanup) after the handler ran for the n-th message, before the state
// advance commits.
//
// An invalid setting stops the worker at start with a message naming the variable.
//
// # Operator commands
//
// The operator commands read the worker's variables (the same validation; the entity, the state
// store, the connection and the message contract are what they use) and print a table, or JSON
// with --json; -h after a command lists its flags:
//
//	sessions list [--parked] [--gap] [--stranded] [--ended] [--limit N]
//	sessions show ID [--wait D] [--max-messages N]
//	sessions resume ID | --all-parked [--wait D]
//	sessions skip ID [--to N] [--wait D]
//	dlq list [--session ID] [--reason R] [--limit N]
//	dlq replay --session ID | --all [--reason R] [--target ENTITY] [--dry-run] [--wait D]
//
// resume and skip lock the session by id, change its state through the store's version check and
// release it; while a worker holds the session they wait up to --wait (default 30s) and say so on
// stderr. replay sends each session's dead letters back in sequence order and completes each one
// only after its copy was sent (a subscription's need --target). The operator package
// documents the details. Exit codes: 2 for a command line a command cannot run (a bad flag, a
// malformed session id, --blocked, which the state cannot answer yet), 1 for an operation that
// was refused or failed. Changes are logged as JSON lines on stderr.
//
// Test hook (ignored unless set): SEQBUS_TEST_REPLAY_CRASH_AFTER=n makes `dlq replay` exit
// abruptly (code 137) once it has sent n copies, before it completes their dead letters.
package main
