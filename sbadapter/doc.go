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
// [Sweeper] periodically lists sessions that accept-next will not offer (Service Bus does not offer
// a session whose only messages are deferred) and hands their ids to the runner, which accepts them
// by id. In Service Bus mode the candidates come from the SDK's list-sessions pager (available
// since azservicebus v1.11; [Source.ListSessionsWithState] lists the sessions that have state) and
// [StrandedFilter] keeps those whose stored state has a due deferred message (or a parked message
// still deferred after a crash), reading each state under a brief lock. In Postgres mode the store's stranded query fits [SessionListerFunc] as is.
//
// # Connection loss
//
// A session link that goes down takes the session lock with it, and the SDK silently re-locks
// the session on a new link at the next call. The adapter therefore reports
// sequencer.ErrLockLost for everything that shows the link went down on an accepted session: a
// receive that returns nothing before its ctx ends, a connection-lost error, and a settlement
// still unanswered after Config.SettleTimeout (the SDK retries a settlement on a dead link for
// about 45s). The engine then stops the session; the stored state decides what the next holder
// does, and the Service Bus store re-reads the stored version on every save so that a stale
// holder cannot overwrite it.
//
// This package may import the sequencer contract, the azservicebus SDK and go-amqp (for error
// conditions); it must never import the engine's internals, the state stores, Postgres or the
// emulator (tests excepted).
package sbadapter
