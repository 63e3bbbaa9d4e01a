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
// again after the last message (TestStaleHolderCannotOverwriteTombstoneAfterRelock).
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
// Because a Session never regains a lost lock, it keeps the state version the Service Bus state
// store last read or wrote through it (KnownStateVersion, NoteStateVersion; see
// sessionstate/servicebus.VersionKeeper), and the store writes without reading the version
// first: one broker round trip per save instead of two.
//
// # Throttling
//
// A throttled namespace (the Standard tier's credits) refuses operations with server-busy while
// its balance is spent, until its next period (about a second). A [Limiter], one per [Source]
// and shared by its sessions (one per replica in the worker), paces the sessions' calls:
// unlimited until the first server-busy answer, then AIMD on the credits per second (a cut to
// 90 % of the credits it measured used, at most once a second and only after an admitted call;
// a slow continuous rise, a fast one after 2 s without a refusal; a short jittered hold of
// every call after each refusal), so that replicas converge on their shares without talking to
// each other, the last replica with work takes up the credits the others left, and refusals
// stay rare. A receive owes the limiter one credit per message delivered.
//
// A refused settlement cannot be retried at the worker's pace, or at all, through the SDK
// (azservicebus v1.11.0, go-amqp v1.7.0): the SDK settles through links.Retry with RetryOptions{}
// whatever the client's options (messageSettler.go:39-45), so a refused disposition waits the
// default first retry delay of 4 s ± 20 % (internal/utils/retrier.go:100-116); go-amqp takes a
// rejected disposition as settled (receiver.go:795-809 calls Message.onSettlement, message.go:
// 315-316), so the retry sends nothing and reports success (receiver.go:324-326). The message
// stays locked with the session until it is closed and is then where it was: an active message
// is delivered again (the engine drops it as a duplicate), a deferred one stays deferred. The
// adapter reports such a settlement (one that took 3 s or more and succeeded) as
// sequencer.ErrSettlementRefused, which makes the engine keep the message's index entries for
// its next run, and tells the limiter, so that the next ones are paced; and once a refusal was
// seen since a settlement started, a settlement still unanswered after 500 ms is presumed refused
// and reported so at once, instead of stalling its session (and with it the session's pipeline)
// for the SDK's 4 s. A refusal is seen by the limiter
// (a call of the source's own refused) or in the SDK's log, which reports each refused
// settlement the moment it happens: the adapter installs a listener on azcore's log (one per
// process, when the package is initialised, because it cannot be set safely once a client runs;
// [LogSDKRetries] shows what it sees) for that, which is how a replica whose calls are only
// settlements learns of it at all. The log does not say which client or namespace a refusal
// came from, so a process that talks to a throttled namespace and to another one presumes the
// other's slow settlements refused too. Avoiding the refusal is the only remedy for the message
// itself.
//
// This package may import the sequencer contract, the azservicebus SDK and go-amqp (for error
// conditions); it must never import the engine's internals, the state stores, Postgres or the
// emulator (tests excepted).
package sbadapter
