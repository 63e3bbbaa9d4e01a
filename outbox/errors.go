package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqbus/seqbus/publisher"
)

// The errors of Enqueue, NextSequence and Counter match these with errors.Is. Enqueue
// checks what it can before it calls the database (entity, session id, properties,
// traceparent), so those errors leave the caller's transaction usable; ErrSessionEnded
// and ErrMessageTooLarge come from the database and, as every database error, abort the
// transaction.
var (
	// ErrInvalidSessionID is publisher.ErrInvalidSessionID: the one session-id rule,
	// publisher.ValidateSessionID (SQLSTATE SQ001 from SQL).
	ErrInvalidSessionID = publisher.ErrInvalidSessionID
	// ErrSessionEnded: the session's last message was enqueued; it takes no more until
	// the relay's purge forgets it (SQ002).
	ErrSessionEnded = errors.New("session ended")
	// ErrMessageTooLarge: the message would exceed the Service Bus size limit (SQ003).
	ErrMessageTooLarge = errors.New("message too large")
	// ErrInvalidMessage: a body or application properties Service Bus cannot carry (SQ004).
	ErrInvalidMessage = errors.New("invalid message")
	// ErrInvalidTraceparent: not a W3C traceparent (SQ005).
	ErrInvalidTraceparent = errors.New("invalid traceparent")
	// ErrInvalidEntity: not a queue or topic name (SQ006).
	ErrInvalidEntity = errors.New("invalid entity")
)

// sqlStates maps the SQLSTATEs raised by migration 003's functions to the errors above.
var sqlStates = map[string]error{
	"SQ001": ErrInvalidSessionID,
	"SQ002": ErrSessionEnded,
	"SQ003": ErrMessageTooLarge,
	"SQ004": ErrInvalidMessage,
	"SQ005": ErrInvalidTraceparent,
	"SQ006": ErrInvalidEntity,
}

// Error is a database failure of the outbox. The driver error survives as text only.
// It matches (errors.Is) the sentinel of its SQLSTATE, if it has one.
type Error struct {
	// Op is what the outbox was doing, such as `enqueue session "s-1" of entity "orders"`.
	Op string
	// SQLState is the Postgres error code when the server reported one.
	SQLState string
	// Msg is the server's or driver's message.
	Msg string

	kind error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("outbox: %s: %s", e.Op, e.Msg)
	if e.SQLState == "42P01" || e.SQLState == "42883" {
		msg += " (is migration 003_outbox applied?)"
	}
	return msg
}

// Unwrap returns the sentinel error of the SQLSTATE, or nil.
func (e *Error) Unwrap() error { return e.kind }

// interpretError maps a pgx error to the outbox's errors.
func interpretError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("outbox: %s: %w", op, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("outbox: %s: %w", op, context.DeadlineExceeded)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message
		if pgErr.Hint != "" {
			msg += " (" + pgErr.Hint + ")"
		}
		return &Error{Op: op, SQLState: pgErr.Code, Msg: msg, kind: sqlStates[pgErr.Code]}
	}
	return &Error{Op: op, Msg: err.Error()}
}
