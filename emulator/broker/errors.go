package broker

import "errors"

// Sentinel errors. The link layer maps them to Service Bus AMQP conditions; the
// recommended condition is given with each. Errors returned by the broker wrap them
// with context, so test with errors.Is.
var (
	// ErrNotFound: the entity, rule or address does not exist (amqp:not-found, 404).
	ErrNotFound = errors.New("not found")
	// ErrEntityExists: an entity or rule with that name exists (409).
	ErrEntityExists = errors.New("entity already exists")
	// ErrLockLost: the message lock expired, was already settled, or the token is
	// unknown (com.microsoft:message-lock-lost, 410).
	ErrLockLost = errors.New("message lock lost")
	// ErrSessionLockLost: the session lock expired or was released
	// (com.microsoft:session-lock-lost, 410).
	ErrSessionLockLost = errors.New("session lock lost")
	// ErrSessionCannotBeLocked: another holder has the session
	// (com.microsoft:session-cannot-be-locked).
	ErrSessionCannotBeLocked = errors.New("session cannot be locked")
	// ErrTimeout: no session became available before the deadline (com.microsoft:timeout).
	ErrTimeout = errors.New("operation timed out")
	// ErrMessageTooLarge: the encoded message exceeds the maximum message size
	// (amqp:link:message-size-exceeded).
	ErrMessageTooLarge = errors.New("message too large")
	// ErrNotAllowed: the operation does not fit the entity, e.g. a message without a
	// session id sent to a session queue, or a session receiver on a non-session queue
	// (amqp:not-allowed).
	ErrNotAllowed = errors.New("operation not allowed")
	// ErrMessageNotFound: no deferred message with that sequence number
	// (com.microsoft:message-not-found, 404).
	ErrMessageNotFound = errors.New("message not found")
	// ErrEntityDisabled: the entity's status forbids the operation
	// (com.microsoft:entity-disabled).
	ErrEntityDisabled = errors.New("entity disabled")
	// ErrInvalidConfig: a Config.json document or entity property is invalid.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrClosed: the broker was closed.
	ErrClosed = errors.New("broker closed")
)
