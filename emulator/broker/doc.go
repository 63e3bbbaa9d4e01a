// Package broker holds the Service Bus semantics of the seqbus emulator, in memory and
// without any AMQP framing or network: queues, topics, subscriptions and their rules,
// messages with per-entity sequence numbers, peek-lock and receive-and-delete, lock
// tokens and their expiry, deferral, dead-lettering (the $DeadLetterQueue subqueue),
// scheduled messages, message time-to-live, sessions with exclusive locks and session
// state, and the loader for the Microsoft emulator's Config.json.
//
// Messages are go-amqp's public *amqp.Message, kept with their AMQP types. The broker
// never hands out its stored message: every delivery and peek is a copy carrying the
// message annotations the azservicebus SDK reads (x-opt-sequence-number,
// x-opt-enqueued-time, x-opt-locked-until, x-opt-message-state, ...).
//
// # Time
//
// All time comes from the injected clock.Clock, so tests drive lock expiry, TTL and
// schedules with clock.Fake instead of sleeping.
//
// # Locking
//
// One mutex (Broker.mu) guards every entity, message and session of a broker. Clock
// callbacks take it too. While holding it the broker calls nothing outside the package
// except the clock (Now, AfterFunc, Timer.Stop) and the Filter/Action hooks of rules,
// which must not call back into the broker. Callers may therefore hold their own locks
// while calling the broker (lock order: caller's locks, then Broker.mu), but must not
// take those locks inside a rule hook. Channels the broker closes (Entity.Available,
// SessionLock.Lost) are closed under Broker.mu; receive from them without holding it.
//
// # Semantics chosen where Service Bus leaves room
//
//   - Delivery count: Header.DeliveryCount on a delivery is the number of earlier
//     deliveries that ended without settlement (the SDK shows it + 1). Abandon, lock
//     expiry and the expiry of a session lock with messages still locked count; Release
//     (the AMQP released outcome) and a session closed by its receiver (detach, connection
//     closed) with messages still locked do not, as in Service Bus. At MaxDeliveryCount the
//     message is dead-lettered with reason MaxDeliveryCountExceeded.
//   - Message locks taken under a session lock do not expire on their own: they follow
//     the session lock (x-opt-locked-until is the session's), and when it ends they all
//     return to the session.
//   - Dead-lettered messages keep their sequence number and enqueued time; the dead-letter
//     queue has no TTL and no MaxDeliveryCount.
//   - An abandoned deferred message stays deferred. A locked message whose TTL runs out
//     expires when its lock ends.
//   - A topic numbers its own sends (the numbers Schedule returns and CancelScheduled
//     takes); each subscription numbers the copies it receives, starting at 1.
//   - A message sent without a message-id gets one, a random GUID as 32 hex digits:
//     Service Bus gives every message an id, and the JavaScript SDK tracks its lock
//     renewals by it.
//   - AcceptSession with no session id takes the unlocked session whose first available
//     message is oldest, from a heap kept as sessions are locked, released and fed, so
//     its cost does not grow with the number of waiting sessions.
//   - Zero-valued EntityProperties get the service's defaults (lock 1 min, 10 deliveries,
//     no TTL); Config.json files get the Config.json schema's defaults instead.
//
// # Rules, forwarding and duplicate detection
//
// Subscription rules are evaluated with sqlrule (SQL filters and actions with
// their parameters, correlation filters comparing typed values). As Service Bus
// documents it, all matching rules without an action yield one copy, and every
// matching rule with an action yields a copy of its own, changed by the action and
// carrying the application property RuleName. A message whose rule filter or action
// fails to evaluate goes to the subscription's dead-letter queue with reason
// FilterEvaluationException (or nowhere, with DropOnFilterEvaluationExceptions).
//
// Auto-forwarding is synchronous: a message admitted to an entity with ForwardTo moves
// on within the same call, so TransferMessageCount is always 0. Targets must exist when
// the source is created or updated. As in Service Bus, a failed transfer puts the
// message in the transfer dead-letter queue ("<entity>/$Transfer/$DeadLetterQueue") of
// the entity where the chain stops: after MaxForwardHops transfers
// (MaxTransferHopCountExceeded, which also ends forwarding loops), or when the target
// was deleted or refuses messages (ForwardingFailed). A forwarded message without a
// session id that reaches a session entity is dead-lettered there with "Session ID is
// null". Forwarding happens on arrival, when a scheduled message is due, and when a
// lock ends without settlement; setting ForwardTo moves the available backlog.
//
// Duplicate detection keeps the MessageIds a queue or topic accepted, with the time
// from the injected clock, and silently drops repeats within the window, also within
// one batch and for forwarded messages.
//
// # Imports
//
// The package imports the standard library, go-amqp (public API only), google/uuid,
// clock, contract (durations) and sqlrule (which must never import the broker). It must
// never import the AMQP engine, the $management/$cbs nodes, the admin API, or anything
// of seqbus outside those two.
package broker
