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
//   - None sends without a session id (unordered processing).
//
// A session id longer than 128 characters is refused (ErrSessionIDTooLong).
//
// # Sequence numbers
//
// The Counter (default: in memory, per Publisher) hands out 1, 2, 3, … per session id
// and forgets a session once its last message is published. Publish keeps a Sequence
// property the message already has, so a failed send is retried by publishing the same
// *azservicebus.Message again, without leaving a gap the worker would wait for. A
// session id must not be reused after its last message: the worker treats late copies
// of an ended session as duplicates.
//
// # Imports
//
// The package imports azservicebus and the standard library only. It must never import
// the emulator, the sequencer or any other seqbus package.
package publisher
