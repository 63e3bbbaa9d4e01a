// Package emulator runs an in-process Azure Service Bus emulator that the real
// azservicebus SDK talks to over AMQP 1.0 (with UseDevelopmentEmulator=true in
// the connection string): queues, topics and subscriptions, peek-lock and
// receive-and-delete, settlement, deferral, dead-lettering, scheduling,
// sessions with session state, the $cbs token node and the $management node.
//
// Start(ctx, Config) opens the listeners (free loopback ports by default) and
// returns a *Server whose ConnectionString the SDK accepts. The AMQP port also
// answers HTTP (GET /health and the management API of emulator/atom, which
// the admin client reaches through admintransport), telling the two
// apart by the first bytes of a connection; Config.HTTPAddr serves the same
// handler on a port of its own.
//
// # Fault hooks
//
// DropConnections (TCP close: the SDK reconnects), DetachEntityLinks
// (amqp:link:detach-forced: the SDK re-creates its links),
// FailNextManagementCalls (503: the SDK retries),
// DropConnectionOnNextManagementCalls (the connection dies mid-call: the SDK
// reconnects and repeats the call), ExpireMessageLock and ExpireSessionLock
// let tests exercise recovery paths without waiting.
//
// # SDK behaviour worth knowing (azservicebus v1.11.0)
//
//   - After its session lock is lost, a SessionReceiver retries a settlement
//     with the default backoff (about 45 s) before returning CodeLockLost; it
//     never reports false success against this emulator.
//   - After a connection loss, messages received before it cannot be settled
//     (the retries end in CodeConnectionLost); their locks expire and they are
//     redelivered with DeliveryCount+1. A link-level detach, in contrast,
//     falls back to $management settlement, which succeeds.
//   - Message locks survive the link and connection that received them, as on
//     Service Bus; session locks are released when their link goes away.
//   - When a link is detached just after a settlement went out, go-amqp may
//     report the settlement as failed although the emulator applied it; the
//     SDK then settles again through $management and returns CodeLockLost for
//     a message that is gone. Treat CodeLockLost on Complete as "maybe done".
//   - go-amqp abandons a session whose begin its context stopped before the
//     frame was written, and later ends it on a channel the emulator never
//     saw; the emulator ignores such an end (closing the connection, as it
//     once did, failed every other session of the client).
//
// # Layering
//
// emulator/amqpwire (codec), emulator/broker (semantics),
// emulator/internal/engine (connections, links, nodes) and emulator/atom
// (management API) sit below this package. It must never import anything of seqbus outside
// emulator/ except the leaf packages clock, contract (durations) and sqlrule (the rule
// language), which import nothing of seqbus.
package emulator
