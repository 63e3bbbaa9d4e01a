// Package backoff holds seqbus's one shape for a wait that repeats: exponential growth from a
// base, a cap, and optional jitter. The handler retry of the sequencer, the adapter's
// server-busy retry, the outbox relay's paused sessions, the operator's waits for a busy session
// and the worker's background loops all compute their waits here, so one rule reads the same
// everywhere and a test can check it once.
//
// The wait itself is clock.Sleep: a timer on an injected clock, or the context's end.
//
// This package imports only the standard library and must never import anything of seqbus.
package backoff
