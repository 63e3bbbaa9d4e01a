// Package sbadmin implements topology.Admin over the azservicebus admin client, for
// real Service Bus namespaces and for the seqbus emulator's management API.
//
// Connect builds the client from a connection string (through
// admintransport, so that a connection string with UseDevelopmentEmulator=true
// reaches the emulator over plain HTTP) or from a namespace name with
// azidentity.DefaultAzureCredential. New wraps a client.
//
// Updates read the entity first and change only the properties the topology sets, so
// properties the file does not manage (authorization rules, partitioning, …) are kept.
//
// # Imports
//
// The package imports topology, admintransport, the Azure SDK (azcore,
// azidentity, azservicebus/admin) and the standard library. It must never import the
// emulator itself, the sequencer or the worker.
package sbadmin
