// Package soak is the long-run benchmark behind cmd/soak: many short sessions (100,000 × 3
// messages by default) through several worker processes on the in-process emulator, with
// either state store. It reports the throughput of each tenth of the run (does the worker slow
// down as sessions accumulate?), the broker calls per message including the sweeper's, each
// replica's peak RSS, and what the replicas cost the broker per sweep interval once idle.
//
// The replicas are built worker binaries running the log handler; their stdout is the record
// of what was handled, checked for order within each session.
package soak
