// Package servicebus keeps the sequencer's per-session state in the Service Bus session state
// itself, read and written through the locked session (no database needed).
//
// # Encoding
//
// The session state blob is a small envelope around the engine's compact encoding:
//
//	format   1 byte   0x01
//	version  uvarint  the store version (> 0)
//	state    rest     State.MarshalBinary()
//
// An empty blob means "no state": Delete sets the session state to nil. The whole blob must fit
// the entity's maximum message size (Config.MaxStateSize); a larger state fails with an error
// wrapping sequencer.ErrStateTooLarge and the session state stays as it was.
//
// # Optimistic concurrency
//
// The Service Bus session lock already makes one receiver the only writer of a session's state. The
// version guards against the engine acting on an outdated view within that holder, and across
// holders after a lock moved: Save and Delete read the blob, compare its version with the expected
// one and only then write, all under a per-session lock, so concurrent writers in one
// process are serialised and exactly one of several with the same expected version wins. A new
// state (expected version 0) starts at a random version, so a version from before a Delete cannot
// match a state created after it. The stored version is read
// on every Save and Delete (one GetState before each SetState) and never cached per session:
// a dropped connection releases the session lock at the broker, another worker may take the
// session and write its state, and the SDK would then silently re-lock the session for the
// first holder on a later call. The read catches a stale write only if nothing re-locks the
// session between the read and the write: Service Bus has no conditional write of session state,
// so the session must fail every call once its lock is lost, and the write itself must not be
// retried by the SDK (its retry recovers the link, and so the lock, seconds later). The
// adapter's sessions guarantee both (sbadapter, "Lock tenure"); another StateAccessor must too.
//
// servicebus imports sequencer and the standard library only; it never imports the Azure SDK: the
// adapter's sessions provide [StateAccessor].
package servicebus
