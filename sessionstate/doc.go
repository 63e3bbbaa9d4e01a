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
// This package itself holds [Lister], how sweepers and operator commands list an entity's
// sessions by what their state says, and [ScanLister], the Lister of stores that keep the state
// in the session itself (each session is locked briefly to read it). The postgres and memory
// stores list with a query of their own; storetest.RunLister checks every Lister the same way.
// [Watch] is the sweeper's view for such stores: it reads only the sessions whose state changed
// since its last look, keeps those that need a sweeper, and clears expired tombstones;
// [LeaseSessionID] is the session whose lock makes one replica the sweeper; [Report] is what a
// replica writes into its own reserved session ([ReportSessionID]) so that the Watch need not
// read the sessions it saved.
//
// Stores import sequencer (for the contract) and their own driver; nothing under sequencer/ may
// import them.
package sessionstate
