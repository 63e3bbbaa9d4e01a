// Package sessionstate is the home of the sequencer's StateStore implementations, one per
// subpackage:
//
//   - memory: an in-process map, for tests and local development.
//   - postgres: one row per (entity, session) with optimistic concurrency, a sweeper query, tombstone
//     purge and a transactional mode (sequencer.AtomicStore) for exactly-once handler effects.
//   - servicebus: the Service Bus session state itself, read and written through the locked session.
//
// storetest holds the one conformance suite that every store runs.
//
// This package holds no code. Stores import sequencer (for the contract) and their own driver;
// nothing under sequencer/ may import them.
package sessionstate
