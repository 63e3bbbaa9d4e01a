// Package admintransport lets the azservicebus admin client talk to the seqbus emulator.
//
// The admin client always speaks https to the Endpoint host of its connection string
// and ignores UseDevelopmentEmulator. When a connection string says
// UseDevelopmentEmulator=true, the Transport built by New sends every request over plain
// HTTP to the Endpoint's host and port (5672 when the Endpoint has no port: the emulator
// answers HTTP on its AMQP port), or to Options.Addr. The rewrite happens after the
// client has signed the request, so the SAS token still names the https URL, which the
// emulator accepts. Without the flag the Transport passes requests through unchanged.
//
//	client, err := admintransport.NewAdminClient(connStr, nil)
//
// is admin.NewClientFromConnectionString with that Transport plugged in (only in
// emulator mode; otherwise the client is left as the SDK builds it).
//
// It is client-side wiring: every seqbus tool that builds an admin client from a
// connection string goes through it (topology/sbadmin today, the worker's operator
// commands next), and it works the same against Azure.
//
// # Imports
//
// The package imports the standard library and the Azure SDK (azcore, azservicebus/admin).
// It must never import the emulator or any other seqbus package, so that tools can use it
// against real Service Bus too.
package admintransport
