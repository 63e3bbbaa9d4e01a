// Package operator is the Go API behind the worker's operator commands (`worker sessions …`,
// `worker dlq …`): it lists, inspects, resumes and skips the sessions of one entity, and lists
// and replays its dead letters, in application order.
//
// [New] takes the same pieces a worker runs on: the entity, a Service Bus client, a session
// source that locks sessions by id, and the state store with its Lister. An operation takes ctx
// first and a params struct and returns a typed result that the CLI prints as a table or JSON.
//
// # Sessions
//
//   - [Operator.List]: the sessions by what their state says (parked, waiting on a gap,
//     stranded), read through the store's sessionstate.Lister: a query with Postgres, a brief
//     lock of each session with Service Bus session state (a session a worker holds is listed
//     as busy).
//   - [Operator.Show]: one session's whole state, its messages at the broker (a peek of the
//     session: active, deferred, scheduled) and its dead letters; with a store that holds early
//     messages (sequencer.HeldStore: Postgres), what it holds for the session and the dead
//     letters of those (ShowResult.Held).
//   - [Operator.Resume]: a parked session continues from where it stopped: it waits for the
//     parked sequence again (State.Unpark(false)), which the replay of its dead letter brings.
//   - [Operator.Skip]: the parked sequence, the missing sequences of a gap, or everything below a
//     given sequence is given up and the session continues after it; what was skipped is
//     returned and logged.
//   - [Operator.RetryNow]: a session released until the next attempt of a failing message
//     (State.Retrying, SEQBUS_RETRY_RELEASE_AFTER; listed with ListParams.Retrying) has that
//     attempt made due now (State.RetryNow); the workers' sweeper wakes it at its next sweep.
//
// # Safety: the session lock and the version check
//
// A change never races a worker. Resume, Skip and RetryNow first lock the session by id (Accept, the
// lock a worker would need to run it), then load its state, change it and save it through the
// store with the version check (reloading on a conflict), then release the lock. While a worker
// holds the session the operation waits for it, up to its Wait bound, and says so on
// Config.Progress; after that it fails with [ErrSessionBusy] and changes nothing. A change is
// refused while the state still records work a worker finishes by itself ([ErrUnsettled]: a
// parked message that a crash left undead-lettered; a run cut short): it is tried again, like a
// held session, until the Wait bound.
//
// A bulk resume (ResumeParams.AllParked) waits the same way for every candidate, side by side,
// under one deadline: the sessions listed as parked and, with Service Bus session state, every
// session a worker holds, whose state is unknown until it is released. A parked session is held
// for a moment whenever the broker offers it, for example when its replayed copy arrives right
// after `dlq replay`; skipping it would leave it parked for good. A candidate found not parked
// once locked is passed over (ResumeResult.PassedOver); one still held at the deadline is a
// failure (ResumeResult.Failed), and the CLI exits 1.
//
// A resumed or skipped session needs no new traffic: when its next message is deferred at the
// broker, the state says so (State.NeedsWake), the workers' sweeper finds it within one sweep
// interval and a worker runs it as soon as one of its accept-next waits ends (the runner serves
// a queued wake then: at most sequencer.RunnerConfig.AcceptTimeout, 10s by default, later); when
// the message is not at the broker yet (a dead letter not replayed), the broker offers the
// session to accept-next once it arrives.
//
// # Dead letters
//
// [Operator.DLQList] peeks the dead-letter queue (nothing is locked). [Operator.DLQReplay]
// sends a session's dead letters (or every session's, session by session) back to the entity in
// ascending application sequence, each completed only after its copy was sent: a crash half way
// loses nothing, and running the replay again only sends copies that duplicate detection or the
// worker drop. A copy keeps SessionId, body and properties, gets a deterministic new MessageId
// ([ReplayMessageID]: the original id would be dropped by duplicate detection within its window,
// silently) and the property [PropertyReplayedFromDLQ]. A subscription's dead letters need an
// explicit target: Service Bus cannot send to one subscription, and a copy sent to the topic
// reaches every subscription whose rules match it.
//
// A store that holds early messages (sequencer.HeldStore) keeps the dead letters of the held
// messages that turned poison itself: the broker no longer has them. DLQList lists them next to
// the queue's (DLQListResult.Held), and DLQReplay replays them with the same selection, merged
// into each session's ascending order; the stored dead letter is removed after its copy was
// sent, so the same crash argument holds.
//
// On SQS FIFO (Config.DeadLetters, sqsadapter.DeadLetters) the dead-letter queue has no peek:
// DLQList receives every dead letter it is offered and releases them all (a FIFO queue holds
// back a group's next messages while its first are in flight: DLQListResult.Unread counts them),
// and DLQReplay goes in rounds of receive, send, delete, until a round offers nothing selected,
// then waits up to DLQReplayParams.Wait for dead letters in flight elsewhere (a replay that
// crashed holds them until their visibility timeout lapses). One Operator reads that queue once at
// a time (a listing, a dead letter, a replay wait for their turn): a read alongside another
// would find the dead letters in flight and miss them. Show says that a group's messages cannot
// be listed.
//
// The dead-letter queue is not a session queue, so a replay peeks it first to plan, then
// receives it in order, holding the other sessions' messages in front of those it replays until
// the end (then abandoned, which counts a delivery on them).
//
// # Parked and blocked sessions
//
// A session is parked by the poison policy park (its message was dead-lettered: ParkedInfo has
// the broker sequence) or by the gap policy park (its next sequence never arrived: OnGap, no dead
// letter). The poison policy block leaves a blocked mark (BlockedInfo: the message, the last
// error, since when and how often) while the broker delivers the message again; the mark stays
// after the broker dead-letters it at its max delivery count, and clears when the message is
// handled. Resume clears either mark, Skip gives up the sequence (or, parked on a gap, every
// missing one up to the lowest deferred sequence).
//
// operator imports the sequencer contract, sessionstate, sbadapter's types, publisher (the
// session id rule) and the azservicebus SDK; cmd/worker builds its dependencies from the SEQBUS_*
// settings. It never touches a table or a session state but through a store's API.
package operator
