// Package workerconfig reads and validates the seqbus worker's configuration from SEQBUS_*
// environment variables (through envconfig) and redacts its secrets for logging.
//
// [Load] parses the environment; [Config.Validate] checks a Config built any way (tests build it
// directly) and names the offending variable in every error.
//
// This package must never import the Service Bus SDK, Postgres drivers or the sequencer engine:
// it only describes settings.
package workerconfig
