// Command emulator runs the seqbus Service Bus emulator: an AMQP 1.0 endpoint
// the azservicebus SDK connects to with UseDevelopmentEmulator=true, plus an
// HTTP endpoint serving GET /health.
//
// Usage:
//
//	emulator [-config FILE] [-amqp-addr HOST:PORT] [-http-addr HOST:PORT] [-key-name NAME] [-key KEY]
//	         [-max-message-size BYTES] [-log-level debug|info|warn|error]
//
// The key name and key default to SEQBUS_EMULATOR_KEY_NAME and
// SEQBUS_EMULATOR_KEY, then to RootManageSharedAccessKey / SAS_KEY_VALUE. Once
// ready, the connection string is printed on stdout; logs go to stderr. The
// AMQP port also serves HTTP (GET /health and the management API), as does
// -http-addr. SIGINT or SIGTERM stops the emulator.
package main
