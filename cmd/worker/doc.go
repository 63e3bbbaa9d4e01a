// Command worker runs the seqbus worker: it receives Service Bus session messages, restores their
// application order and hands them to a handler.
//
//	worker [run]                    run the worker (configured by SEQBUS_* variables)
//	worker relay                    publish the Postgres outbox to Service Bus (or SQS FIFO) in session order
//	worker scaler                   serve the scaling signal (GET /scale, /metrics, /healthz)
//	                                with the worker's settings, consuming nothing
//	worker console                  serve the web console of the entity's sessions and dead
//	                                letters (SEQBUS_CONSOLE_*; see docs/console.md)
//	worker migrate up|down|status   manage the Postgres schema (SEQBUS_DATABASE_URL): the
//	                                embedded migrations, which status lists; up and down take
//	                                [--target-version N] [--max-steps N] [--dry-run] (prints the
//	                                SQL, changes nothing)
//	worker doctor [--json]          check the namespace and the entity (or the SQS queue) and the
//	                                state store with the worker's settings, with a live round trip
//	                                of every broker call the worker makes (docs/doctor.md); exit 0
//	                                all pass, 1 a check failed, 2 a bad argument
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
// Every process reads its settings from SEQBUS_* environment variables, each the envconfig tag of
// a field of worker.Config (worker.RelayConfig for the relay) or one of the binary's own (the
// handler, the log level, the test hooks). docs/configuration.md lists every variable with its
// default, what it accepts and what it means; it is generated from those structs (go generate
// ./cmd/worker) and a test keeps it equal to them. A variable left unset takes its default; one
// that is set means what it says (0 is zero, the "off" of the settings that have one, refused
// where it means nothing). An invalid setting stops the process at start with a message naming
// the variable. Tracing (OpenTelemetry) follows the standard OTEL_* variables and is off unless
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) is set.
//
// # Console
//
// worker console serves the web console of the entity's sessions and dead letters on
// SEQBUS_CONSOLE_ADDR, with the worker's variables (as the operator commands read them) and its
// own SEQBUS_CONSOLE_* ones, at least one way to authenticate among them: a Service Bus entity's,
// or with SEQBUS_PROVIDER=sqs an SQS FIFO queue's message groups and its redrive dead-letter
// queue. It also evaluates the scaling signal for the overview and serves the scaler's endpoints
// on SEQBUS_HTTP_ADDR. docs/console.md describes it.
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
