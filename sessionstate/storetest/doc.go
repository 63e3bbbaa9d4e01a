// Package storetest is the conformance suite for sequencer.StateStore: [Run] exercises one store
// implementation against the contract (missing state, round trip, optimistic concurrency, delete,
// concurrent writers, large states, isolation between sessions). Every store in sessionstate runs
// it from its own tests. [RunHeld] does the same for a sequencer.HeldStore (early messages held
// with the state, their removal with the advance, their dead letters), run by the memory and
// Postgres stores.
//
// It also provides [Session], a minimal sequencer.Session that carries an id and a Service Bus
// style session state (GetState/SetState), for stores that need nothing else from the session.
//
// storetest is for tests only; production code must never import it. It imports sequencer,
// testify and the standard library.
package storetest
