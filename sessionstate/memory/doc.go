// Package memory is an in-process sequencer.StateStore for tests and local development.
//
// States are stored in their encoded form (State.MarshalBinary), so a caller never shares memory
// with the store and the codec is exercised as with the durable stores. Versions come from one
// counter per Store, so a version is never reused, not even after a Delete: a writer holding a
// version from before a Delete cannot overwrite a state created after it.
//
// memory imports only sequencer, sessionstate (the Lister contract) and the standard library.
package memory
