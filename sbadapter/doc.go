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
// [StrandedFilter] keeps those whose stored state has a due deferred message, reading each state
// under a brief lock. In Postgres mode the store's stranded query fits [SessionListerFunc] as is.
//
// This package may import the sequencer contract, the azservicebus SDK and go-amqp (for error
// conditions); it must never import the engine's internals, the state stores, Postgres or the
// emulator (tests excepted).
package sbadapter
