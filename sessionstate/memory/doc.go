// Package memory is an in-process sequencer.StateStore for tests and local development.
//
// States are stored in their encoded form (State.MarshalBinary), so a caller never shares memory
// with the store and the codec is exercised as with the durable stores. Versions come from one
// counter per Store, so a version is never reused, not even after a Delete: a writer holding a
// version from before a Delete cannot overwrite a state created after it.
//
// It is a sequencer.HeldStore too, with the semantics of the Postgres store: held messages are
// copied (their properties encoded with sequencer.MarshalProperties, their times kept to the
// microsecond), removed with the advance that passes them, and dead letters outlive the state.
//
// memory imports only sequencer, sessionstate (the Lister contract) and the standard library.
package memory
