package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Error is a database failure of the store. The driver error survives as text only.
type Error struct {
	// Op is what the store was doing, such as `save session "s-1"`.
	Op string
	// SQLState is the Postgres error code when the server reported one (for example 42P01).
	SQLState string
	// Msg is the driver's error message.
	Msg string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("postgres state store: %s: %s", e.Op, e.Msg)
	if e.SQLState == "42P01" {
		msg += " (are the migrations applied?)"
	}
	return msg
}

// interpretError maps a pgx error to the store's errors.
func interpretError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("postgres state store: %s: %w", op, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("postgres state store: %s: %w", op, context.DeadlineExceeded)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &Error{Op: op, SQLState: pgErr.Code, Msg: pgErr.Message}
	}
	return &Error{Op: op, Msg: err.Error()}
}
