// Package emulatortest starts the in-process Service Bus emulator for a test
// or benchmark, the way nats-server's test.RunServer does for NATS: one call,
// Start(t, opts), opens the emulator on free loopback ports, sends its log to
// t.Log, declares the entities the test names in Go, connects an
// azservicebus.Client with fast retries and closes everything with
// t.Cleanup, client first.
//
//	srv := emulatortest.Start(t, &emulatortest.Options{
//		Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}},
//	})
//	sender, err := srv.Client.NewSender("orders", nil)
//
// The log level is Info in tests and Warn in benchmarks;
// SEQBUS_EMULATOR_TEST_LOG=debug (or any level name) changes it. Server.NewAdminClient and Server.AdminClientOptions reach the
// emulator's management API (ATOM, served on the AMQP port) with the admin
// client, through admintransport.
//
// The package is for tests. Only test code may import it; the emulator's own
// non-test code must not, since it imports the emulator.
package emulatortest
