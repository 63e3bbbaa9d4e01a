// Package soak is the long-run benchmark behind cmd/soak: many short sessions (100,000 × 3
// messages by default) through several worker processes on the in-process emulator, with
// either state store. It reports the throughput of each tenth of the run (does the worker slow
// down as sessions accumulate?), the broker calls per message including the sweeper's, each
// replica's peak RSS, and what the replicas cost the broker per sweep interval once idle.
//
// RunIdle measures the idle cost alone: for each number of ended sessions (seeded through the
// worker's own engine and state store, see seed.go), each worker binary it is given on a fresh
// emulator, per sweep interval, in link attaches and $management requests as the emulator sees
// them and in the worker's own counters, against the same worker with no session ever handled.
//
// The replicas are built worker binaries running the log handler; their stdout is the record
// of what was handled, checked for order within each session.
package soak
