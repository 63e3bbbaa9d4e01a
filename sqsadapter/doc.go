// Package sqsadapter runs seqbus over Amazon SQS FIFO queues: a message group plays the part of
// a Service Bus session. [Source] is a sequencer.SessionSource, its sessions are
// sequencer.Sessions; SQS has no deferral and no peek, so they are neither DeferringSession nor
// HoldingSession, and [Source.Capabilities] says so: a sequencer.Runner then holds early
// messages in the state store (EarlyStore).
//
// # Groups as sessions
//
// SQS returns messages of several groups per ReceiveMessage and cannot be asked for one group.
// One receive loop per Source demultiplexes by MessageGroupId: messages of a group with a session
// open in this process go to that session; other groups are offered to AcceptNext, all of a
// group's messages of a batch together. SQS serves no one a group that has a message in flight:
// that is the session's exclusivity, and it lasts only while a message of the group is in flight.
//
// The loop receives only for AcceptNext calls waiting with nothing offered (free slots): a group
// received for a process with no slot free would wait while nobody else may have it. A group
// offered and not accepted within Config.Linger is released (visibility 0, all its messages, in
// order) rather than left to lapse. Every receive counts towards the messages'
// ApproximateReceiveCount and thus the queue's maxReceiveCount, so give the redrive policy room
// (see docs/sqs.md).
//
// A session is one receive long: Receive returns what was received for it, and an empty slice at
// once when nothing was (SQS serves nothing more of the group while a message of it is in flight,
// and then to whoever receives first), so the engine ends the session as idle and its slot takes
// the next group. The completion that would leave nothing of the group in flight is kept and its
// message deleted at Close, after the engine's last save: the group is nobody else's until the
// session ends. Capabilities reports no SessionLock.
//
// Config.Deletes says when the other completions are deleted: each at once (DeleteEach), or all
// of the session's at Close with one DeleteMessageBatch (DeleteAtClose), which makes a session
// two calls (its receive and its deletes) but brings back every message it handled should it not
// reach Close (Capabilities.CompletionsAtClose; the engine's replay window must cover them).
//
// The group's lock is the visibility of its held messages: Config.Visibility from the receive,
// extended by RenewLock (ChangeMessageVisibilityBatch); LockedUntil is the earliest expiry (a
// group with nothing held reports its accept or last renewal plus Visibility). A message whose
// visibility lapsed may be delivered to anyone; settling it then fails with
// sequencer.ErrLockLost.
//
// # Mapping
//
//   - Session id: MessageGroupId. MessageID: MessageId. Body: the body. DeliveryCount:
//     ApproximateReceiveCount. EnqueuedTime: SentTimestamp. Raw: a *Received (receipt handle,
//     sequence number, the SDK's message).
//   - BrokerSequence: the SQS SequenceNumber (a decimal of up to 128 bits) modulo 2^63 (see
//     [BrokerSequence]). Distinct numbers stay distinct and keep their order within a group,
//     except across a multiple of 2^63.
//   - Complete: DeleteMessage (of the last message in flight, or with DeleteAtClose of every
//     message, at Close: see above). Abandon: visibility 0 for the message and for the group's
//     messages received but not yet returned by Receive (so that the group comes again in order
//     from the abandoned message). Close: the deletes of the kept completions (DeleteMessage,
//     or DeleteMessageBatch per 10), visibility 0 for everything else held of the group.
//   - DeadLetter: SendMessage of a copy to the dead-letter queue of the queue's RedrivePolicy
//     (same group, deduplication id "dl-" and the message id, the message's attributes plus
//     DeadLetterReason and DeadLetterErrorDescription), then DeleteMessage. A crash between the
//     two leaves the message in the queue and its copy in the dead-letter queue; the copy sent
//     again when it is dead-lettered anew within 5 minutes is dropped by SQS's deduplication,
//     a later one is a duplicate there. When the message already has 9 or 10 attributes, the
//     description, then the reason, are left out (SQS takes 10) and a warning is logged.
//   - Errors: an expired or invalid receipt handle wraps sequencer.ErrLockLost; throttling
//     (after the SDK's retries) wraps sequencer.ErrSettlementRefused for Complete, Abandon and
//     DeadLetter and ErrTransient for other calls; a missing queue wraps sequencer.ErrNotFound.
//
// # Attributes
//
// Application properties travel as SQS message attributes ([EncodeAttributes],
// [DecodeAttributes]): strings as String, bools as String.bool, integers as Number (back as
// int64), floats as Number.float (back as float64), []byte as Binary and time.Time as
// String.time (RFC 3339 with nanoseconds, UTC). The sequence property of the message contract
// is thus a Number and comes back as the int64 contract.Parse reads. SQS takes at most 10
// attributes per message and refuses empty String and Binary values; such properties are an
// error, not dropped. A received attribute that does not decode is kept as its raw string, so
// the engine sees the broken contract and dead-letters the message with the reason.
//
// # Dead letters for the operator
//
// [DeadLetters] reads and replays the redrive dead-letter queue for the operator commands
// (operator.DeadLetterQueue): it receives (SQS has no peek), releases with visibility 0, sends
// copies to the queue and deletes the originals.
//
// # Requirements
//
// New checks that the queue is a FIFO queue and has a RedrivePolicy whose dead-letter queue it
// can find (GetQueueUrl): without one, poison messages have nowhere to go, and New refuses.
package sqsadapter
