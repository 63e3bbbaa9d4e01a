// Package sbadapter connects the sequencer to Azure Service Bus through the azservicebus SDK.
//
// [Source] implements sequencer.SessionSource for a session-enabled queue or topic subscription,
// and the sessions it hands out implement sequencer.Session plus GetState/SetState for the Service
// Bus session-state store. Received SDK messages become *sequencer.Message with the SDK message in
// Raw, so settlement goes back through the same receiver.
//
// Every SDK error passes through one table-driven function ([MapError] / [Classify]) that turns
// azservicebus codes and AMQP conditions into the sequencer's sentinel errors (ErrNoSession,
// ErrSessionLocked, ErrLockLost, ErrNotFound) and a recovery [Class]. The sequencer never sees an
// SDK type.
//
// Service Bus does not offer a session whose only messages are deferred to accept-next. The
// worker's sweeper (package worker) finds such sessions from their stored state: in Service Bus
// mode through a sessionstate.Watch over [Source.ListSessionsWithStateAfter] (the SDK's
// list-sessions pager with SessionStateUpdatedAfter, available since azservicebus v1.11), reading
// the state of each session that changed under a brief lock.
//
// # Lock tenure
//
// Everything the engine decides rests on holding the session lock without a break from the
// state load to each save and settlement. The SDK does not make that visible: a session link
// that goes down (a dropped connection, a forced detach) releases the lock at the broker, and
// the SDK's retry loop then recovers the link, which locks the same session again for the same
// SessionReceiver, silently, inside whatever call was retrying. With the SDK's default retries
// that happens seconds later (4 s and more of backoff), long enough for another worker to take
// the session, run it to its end and release it; the first worker's call then succeeds on the
// re-taken lock with a view that is no longer true. A state write in that position replaced an
// ended session's tombstone with a state from before, and a late copy of sequence 1 was handled
// again after the last message (issue 10; TestStaleHolderCannotOverwriteTombstoneAfterRelock).
//
// So a session's tenure ends at its first sign of trouble, and nothing retries across it:
//
//   - Sessions need a client with the SDK's retries off ([ClientOptions], [NewClient],
//     [NewClientFromConnectionString]): each SDK call makes one attempt, so none sleeps and then
//     re-locks. The one recovery the SDK still does inside a call, an immediate re-attach after
//     a link it was using was detached by the broker, leaves no time for another worker to take
//     the session and let it go: if another worker took it, the re-attach fails.
//   - The first call that shows the lock gone (lock lost, a link, session or connection
//     failure, a receive that returns nothing before its ctx ends, a settlement that outlives
//     Config.SettleTimeout) marks the [Session] lost; every later call on it fails with
//     sequencer.ErrLockLost without reaching the SDK, whose next call would lock the session
//     again on a new link. The engine then stops; the stored state decides what the next holder
//     does, and the Service Bus state store's version check refuses a write over a newer state.
//   - The one refusal retried on the same link is server-busy (throttling): nothing was done
//     and the link is intact (Config.BusyRetry).
//
// New sessions are accepted on a fresh connection: the SDK replaces a dead connection when a
// claim negotiation (part of every accept) fails on it.
//
// This package may import the sequencer contract, the azservicebus SDK and go-amqp (for error
// conditions); it must never import the engine's internals, the state stores, Postgres or the
// emulator (tests excepted).
package sbadapter
