// Command worker runs the seqbus worker: it receives Service Bus session messages, restores their
// application order and hands them to a handler.
//
//	worker [run]                    run the worker (configured by SEQBUS_* variables)
//	worker relay                    publish the Postgres outbox to Service Bus in session order
//	worker scaler                   serve the scaling signal (GET /scale, /metrics, /healthz)
//	                                with the worker's settings, consuming nothing
//	worker migrate up|down|status   manage the Postgres schema (SEQBUS_DATABASE_URL): migrations
//	                                001 to 008; up and down take [--target-version N]
//	                                [--max-steps N] [--dry-run] (prints the SQL, changes nothing)
//	worker doctor [--json]          check the namespace and the entity with the worker's settings:
//	                                exit 0 when every check passed, 1 when one failed, 2 on a
//	                                command line it cannot run
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
// Every SEQBUS_* variable is the envconfig tag of a field of worker.Config (worker.RelayConfig
// for the relay), except SEQBUS_HANDLER, SEQBUS_HANDLER_URL, SEQBUS_LOG_LEVEL and the test
// hooks, which are the binary's own. docs/configuration.md lists each one with its default and
// meaning. The essentials:
//
//	SEQBUS_CONNECTION_STRING        Service Bus connection string (secrets are redacted in logs)
//	SEQBUS_NAMESPACE                or: myns.servicebus.windows.net with Entra ID (DefaultAzureCredential)
//	SEQBUS_QUEUE                    a session-enabled queue, or:
//	SEQBUS_TOPIC, SEQBUS_SUBSCRIPTION   a session-enabled subscription
//	SEQBUS_STATE_STORE              servicebus (default, session state) or postgres
//	SEQBUS_DATABASE_URL             Postgres URL (required with postgres; password redacted in logs)
//	SEQBUS_HANDLER                  log (default), noop, http, or journal (postgres store only:
//	                                inserts each message into seqbus_journal in the same
//	                                transaction as the state advance, exactly-once effects)
//	SEQBUS_HANDLER_URL              target of the http handler
//	SEQBUS_LOG_LEVEL                debug, info (default), warn, error
//
// A variable left unset takes its default; one that is set means what it says: 0 is zero, the
// "off" of the settings that have one, and refused where it means nothing. An invalid setting
// stops the worker at start with a message naming the variable.
//
// Tracing (OpenTelemetry) follows the standard OTEL_* variables and is off unless
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) is set.
//
// Test hook (ignored unless set): SEQBUS_TEST_CRASH_BEFORE_COMMIT=n makes the process exit
// abruptly (code 137, no cleanup) after the handler ran for the n-th message, before the state
// advance commits.
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
