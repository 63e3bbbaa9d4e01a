// Package handler holds the built-in message handlers of the seqbus worker and the middleware
// that wraps them.
//
// # Handlers
//
//   - log: writes one JSON object per handled message to an io.Writer (stdout in the worker).
//   - noop: accepts every message and does nothing (useful for load tests).
//   - http: POSTs each message body to a URL and fails on a non-2xx answer.
//   - journal: records each message in a table in the state store's transaction (exactly-once
//     effects). The store provides it through Options.Journal, because it must write through the
//     store's transaction; this package only registers the name.
//
// [New] builds a handler by name, as the worker's SEQBUS_HANDLER setting does.
//
// # Middleware
//
// [WithTimeout] bounds each call, [WithRecover] turns a panic into an error (logging the stack) so
// one bad message cannot stop the worker, and [Metrics] counts calls, failures and panics.
// [Chain] applies middleware in reading order.
//
// This package depends on the sequencer contract (sequencer.Handler, sequencer.Message) and the
// standard library only; it must never import Service Bus, Postgres or emulator packages.
package handler
