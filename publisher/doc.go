// Package publisher is the sending side of seqbus: it gives each message the session id
// of a Strategy, numbers the messages of a session (application property "Sequence",
// 1, 2, 3, …) and marks the last one ("IsLast"), then sends it with azservicebus.
//
// # Which side builds the session id
//
// The strategies mirror the session keys of a topology file (package topology):
//
//   - Composite (SessionName_TransactionId_InstanceId), Entity
//     (owner/repo/entity_type/entity_id), Repository (owner/repo/repository) and
//     Fallback (the first alternative whose properties are present) can be expressed as
//     SQL rule actions. With a sequenced block, the forwarding subscription sets
//     sys.SessionId and the publisher only has to set the application properties; the
//     id the publisher sets is the same string (values formatted as the SQL + operator
//     formats them: True/False, 1.5, 1E+20), so publishing straight to a session-enabled
//     entity gives the same sessions.
//   - Func covers what a SQL action cannot express, so the publisher must set the
//     SessionId itself: values taken from the body, normalisation (lower-casing,
//     trimming), mappings (pull_request_review → pull_request) beyond a fixed list of
//     rules, hashing or truncating keys that may exceed 128 characters.
//   - None sends without a session id (unordered processing), to entities that do not
//     require sessions.
//
// # Session ids
//
// ValidateSessionID is the one rule for session ids in seqbus: not empty, at most 128
// characters, no control characters. A Publisher refuses a message whose session id
// breaks it (ErrInvalidSessionID; ErrEmptySessionID for a strategy that computes an
// empty id), before numbering or sending anything; only a Publisher whose Strategy is
// None sends without a session. The outbox (package outbox) applies the same rule, in
// Go and in its SQL functions.
//
// # Sequence numbers
//
// The Counter hands out 1, 2, 3, … per session id. The default, MemoryCounter, lives in
// the process: it is for tests and a single publishing process, since a restarted
// publisher or a second instance would hand out numbers again. outbox.Counter keeps the
// numbers in Postgres, shared by every process and surviving restarts; a Counter that
// is also a LastCounter ends the session with its last number. Publish keeps a Sequence
// property the message already has, so a failed send is retried by publishing the same
// *azservicebus.Message again, without leaving a gap the worker would wait for; it also
// sets MessageId to MessageID(session, sequence) unless the message has one, so
// duplicate detection on the entity absorbs a send that succeeded although it reported
// an error. A session id must not be reused after its last message: the worker treats
// late copies of an ended session as duplicates.
//
// What direct publishing cannot give is atomicity with the application's own writes: a
// process that dies between numbering a message and sending it leaves a gap, and a
// message can go out for a change that then rolls back. The transactional outbox
// (package outbox) closes both.
//
// # Batches
//
// PublishBatch numbers a list of messages, groups them per session and sends each
// session's messages in order in as few SendMessageBatch calls as fit (SendInBatches),
// as Pub/Sub's ordering-key publisher batches per key. A session whose send fails stops
// there, so its later messages cannot overtake the failed one; other sessions go on, and
// the *BatchError lists what to send again. A Sender that is a MessagesSender (the SQS
// FIFO sender of package sqsadapter) packs the batches itself.
//
// # Imports
//
// The package imports azservicebus and the standard library only. It must never import
// the emulator, the sequencer or any other seqbus package.
package publisher
