package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqbus/seqbus/publisher"
)

// CounterConfig configures a Counter.
type CounterConfig struct {
	// Entity is the queue or topic whose sessions the counter numbers (required). Sessions
	// of the same entity share numbers with the outbox: a session numbered both by a
	// Counter and through Enqueue gets one gapless sequence.
	Entity string
}

// Counter is a publisher.Counter (and publisher.LastCounter) on the outbox's counter
// table, for applications that publish directly instead of through the outbox: numbers
// survive restarts and are shared by every process, so no number is handed out twice.
//
// On a pool, each call is a transaction of its own. On a pgx.Tx (NewCounter(tx, ...),
// one Counter per transaction), numbers are allocated in the caller's transaction and a
// rollback gives them back; send the message after the commit, keeping its Sequence
// property for retries. What direct publishing cannot do is make the send and the
// number one atomic step: a process that dies between allocating a number and sending
// it leaves a gap, at which the worker waits. Enqueue through the outbox closes that
// gap.
type Counter struct {
	db     DB
	entity string
}

var _ publisher.LastCounter = (*Counter)(nil)

// NewCounter returns a Counter running its statements on db.
func NewCounter(db DB, cfg *CounterConfig) (*Counter, error) {
	if db == nil {
		return nil, errors.New("outbox: NewCounter: db is nil")
	}
	if cfg == nil || cfg.Entity == "" {
		return nil, errors.New("outbox: NewCounter: CounterConfig.Entity is required")
	}
	if err := checkEntity(cfg.Entity); err != nil {
		return nil, fmt.Errorf("outbox: NewCounter: CounterConfig.Entity: %w", err)
	}
	return &Counter{db: db, entity: cfg.Entity}, nil
}

// Next implements publisher.Counter.
func (c *Counter) Next(ctx context.Context, sessionID string) (int64, error) {
	return NextSequence(ctx, c.db, NextSequenceParams{Entity: c.entity, SessionID: sessionID})
}

// NextLast implements publisher.LastCounter: it allocates the session's last sequence
// and ends the session.
func (c *Counter) NextLast(ctx context.Context, sessionID string) (int64, error) {
	return NextSequence(ctx, c.db, NextSequenceParams{Entity: c.entity, SessionID: sessionID, Last: true})
}

// End implements publisher.Counter: the session takes no more numbers (ErrSessionEnded)
// until the relay's purge forgets it. Ending a session the counter never numbered, or
// one already ended, does nothing.
func (c *Counter) End(ctx context.Context, sessionID string) error {
	if _, err := c.db.Exec(ctx, sqlEndSession, c.entity, sessionID); err != nil {
		return interpretError(fmt.Sprintf("end session %q of entity %q", sessionID, c.entity), err)
	}
	return nil
}
