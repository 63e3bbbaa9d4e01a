// Package sequencertest holds test doubles for package sequencer: a faithful in-memory fake
// broker (Broker, Client, Session) with session locks that expire on a clock.Clock, deferral by
// broker sequence number, delivery counts with a max delivery count, a dead-letter queue, session
// state and the accept-next rule (a session holding only deferred messages is not offered); an
// in-memory StateStore (Store) that stores the binary encoding; fault injection for both through
// a Process whose hook sees every call before and after it takes effect and can fail it or crash
// the whole process; a HeldStore view of that store (Holding) for early messages held in the
// store; and RunSessionConformance, the suite every provider (this fake, the Service Bus adapter
// against the emulator, the SQS FIFO adapter against the local SQS) must pass, what a provider may
// lack gated on the capabilities it declares.
//
// It is for tests only: production code must never import it. It imports package sequencer,
// the leaf package clock, the standard library and testify (for the conformance suite),
// nothing else of seqbus.
package sequencertest
