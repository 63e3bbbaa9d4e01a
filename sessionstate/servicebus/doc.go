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
// match a state created after it.
//
// Where the stored version comes from depends on the session. A session that may lose its lock
// and get it back without noticing (the SDK, with its retries on, re-locks a session whose lock
// went with a dropped connection on a later call, after another worker may have taken the
// session and written its state) is read before every Save and Delete (one GetState before each
// SetState). A [VersionKeeper] never regains a lock it lost: every call fails once one showed
// the lock gone. Through it the store reads the version only when it does not know it (at Load,
// or after a failed write) and otherwise takes the one it last read or wrote: while the session
// holds its lock nobody else writes the state, and once it lost it the write itself fails, so
// the read before each write would only repeat what the store knows, at the cost of a broker
// round trip per save. Either way a stale write is caught only if nothing re-locks the session
// before the write: Service Bus has no conditional write of session state, so the session must
// fail every call once its lock is lost, and the write itself must not be retried by the SDK
// (its retry recovers the link, and so the lock, seconds later). The adapter's sessions
// guarantee both and are VersionKeepers (sbadapter, "Lock tenure"); another StateAccessor must
// guarantee both too.
//
// servicebus imports sequencer and the standard library only; it never imports the Azure SDK: the
// adapter's sessions provide [StateAccessor].
package servicebus
