// Command emulator runs the seqbus Service Bus emulator: an AMQP 1.0 endpoint
// the azservicebus SDK connects to with UseDevelopmentEmulator=true, plus an
// HTTP endpoint serving GET /health.
//
// Usage:
//
//	emulator [-config FILE] [-amqp-addr HOST:PORT] [-http-addr HOST:PORT] [-key-name NAME] [-key KEY]
//	         [-max-message-size BYTES] [-log-level debug|info|warn|error]
//	         [-latency DURATION] [-latency-jitter DURATION] [-credits-per-second N] [-transient-error-rate RATE]
//	         [-session-id-required partitioned|always]
//	         [-sqs-addr HOST:PORT [-sqs-region REGION]]
//
// The key name and key default to SEQBUS_EMULATOR_KEY_NAME and
// SEQBUS_EMULATOR_KEY, then to RootManageSharedAccessKey / SAS_KEY_VALUE. Once
// ready, the connection string is printed on stdout; logs go to stderr. The
// AMQP port also serves HTTP (GET /health and the management API), as does
// -http-addr. SIGINT or SIGTERM stops the emulator.
//
// The pressure flags make it behave like a loaded namespace (emulator.Pressure):
// -latency and -latency-jitter delay every answer, -credits-per-second
// throttles as the Standard tier does (1000 is the service's figure; throttled
// operations are refused with com.microsoft:server-busy and the service's
// retry-after hint), -transient-error-rate refuses that share of operations
// with a transient error. Their defaults come from SEQBUS_EMULATOR_LATENCY,
// SEQBUS_EMULATOR_LATENCY_JITTER, SEQBUS_EMULATOR_CREDITS_PER_SECOND and
// SEQBUS_EMULATOR_TRANSIENT_ERROR_RATE; a value that does not parse stops the
// emulator with exit code 2.
//
// -session-id-required says which session entities refuse the $management
// operations on a session's messages (receive-by-sequence-number,
// update-disposition, peek-message) whose request carries no session-id:
// partitioned, the default, refuses them on entities with partitioning enabled,
// as Service Bus does; always refuses them on every session entity. Its default
// comes from SEQBUS_EMULATOR_SESSION_ID_REQUIRED; a Config.json's
// "SessionIdRequired" can make it stricter.
//
// -sqs-addr also serves a local SQS on that address (emulator/sqs: FIFO queues
// over the SQS JSON protocol, created through the SQS API, credentials not
// checked); its endpoint is logged as "emulator: sqs ready" with sqs_url, e.g.
//
//	aws --endpoint-url http://127.0.0.1:9324 sqs create-queue --queue-name orders.fifo --attributes FifoQueue=true
//
// -sqs-region (default us-east-1) is the region in its queue ARNs.
package main
