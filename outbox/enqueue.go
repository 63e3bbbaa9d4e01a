package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqbus/seqbus/publisher"
)

// NotifyChannel is the channel seqbus_outbox_enqueue notifies when its transaction
// commits; the payload is the entity (lower-cased).
const NotifyChannel = "seqbus_outbox"

// DB is what the outbox runs statements on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EnqueueParams is one message for Enqueue.
type EnqueueParams struct {
	// Entity is the queue or topic the relay sends the message to (Service Bus compares
	// names case-insensitively; the outbox stores them lower-cased).
	Entity string
	// SessionID is the message's session; it must pass publisher.ValidateSessionID.
	// Sessions are compared case-insensitively, as Service Bus does: "A" and "a" share
	// one sequence.
	SessionID string
	// Body is the message body (nil sends an empty body).
	Body []byte
	// Properties are application properties: strings, bools, integers that fit an int64,
	// and finite floats. They travel as JSON, so a float without a fraction arrives as
	// an int64. The relay sets the sequence and last properties and Diagnostic-Id itself,
	// replacing keys of those names.
	Properties map[string]any
	// Last marks the message as the last of its session: the session then refuses
	// further messages (ErrSessionEnded) until the relay's purge forgets it.
	Last bool
	// Traceparent is the W3C trace context of the enqueuing transaction
	// ("00-<trace id>-<parent id>-<flags>"), sent as the Diagnostic-Id property. Optional.
	Traceparent string
}

// Enqueue stores a message in the outbox inside the caller's transaction and returns
// the sequence it allocated: the session's next, without gaps, because the session's
// counter row is updated in the same transaction (a rollback gives the number back).
// The relay sends the message once tx commits. It is seqbus_outbox_enqueue called from
// Go.
//
// Two transactions that enqueue into the same session are serialised on the session's
// counter row until the first ends; a transaction that enqueues into several sessions
// should take them in a fixed order (sorted, say), as with any row locks, so that two
// such transactions cannot deadlock.
func Enqueue(ctx context.Context, tx pgx.Tx, p EnqueueParams) (int64, error) {
	op := fmt.Sprintf("enqueue session %q of entity %q", p.SessionID, p.Entity)
	if tx == nil {
		return 0, fmt.Errorf("outbox: %s: nil transaction", op)
	}
	if err := checkEntity(p.Entity); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	if err := publisher.ValidateSessionID(p.SessionID); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	props, err := encodeProperties(p.Properties)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	var trace *string
	if p.Traceparent != "" {
		if err := checkTraceparent(p.Traceparent); err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
		trace = &p.Traceparent
	}
	body := p.Body
	if body == nil {
		body = []byte{}
	}
	var seq int64
	if err := tx.QueryRow(ctx, sqlEnqueue, p.Entity, p.SessionID, body, props, p.Last, trace).Scan(&seq); err != nil {
		return 0, interpretError(op, err)
	}
	return seq, nil
}

// NextSequenceParams names the session NextSequence numbers.
type NextSequenceParams struct {
	Entity    string
	SessionID string
	// Last allocates the session's last sequence and ends the session.
	Last bool
}

// NextSequence allocates the next sequence of a session from the outbox's counter
// without storing a message, for applications that publish directly (publisher.Publisher
// with a Counter). On a pgx.Tx the number is the caller's until commit: a rollback gives
// it back. It is seqbus_outbox_next_sequence called from Go.
func NextSequence(ctx context.Context, db DB, p NextSequenceParams) (int64, error) {
	op := fmt.Sprintf("next sequence of session %q of entity %q", p.SessionID, p.Entity)
	if err := checkEntity(p.Entity); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	if err := publisher.ValidateSessionID(p.SessionID); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	var seq int64
	if err := db.QueryRow(ctx, sqlNextSequence, p.Entity, p.SessionID, p.Last).Scan(&seq); err != nil {
		return 0, interpretError(op, err)
	}
	return seq, nil
}

// MaxEntityLength is the longest queue or topic name Service Bus accepts.
const MaxEntityLength = 260

var entityName = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// checkEntity is the entity rule of seqbus_outbox_next_sequence.
func checkEntity(e string) error {
	if !entityName.MatchString(e) || utf8.RuneCountInString(e) > MaxEntityLength {
		return fmt.Errorf("%w %q: a queue or topic name is 1 to %d letters, digits, '.', '-', '_' or '/'",
			ErrInvalidEntity, e, MaxEntityLength)
	}
	return nil
}

var traceparentForm = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// checkTraceparent is the traceparent rule of seqbus_outbox_enqueue.
func checkTraceparent(tp string) error {
	if !traceparentForm.MatchString(tp) || tp[:2] == "ff" ||
		tp[3:35] == "00000000000000000000000000000000" || tp[36:52] == "0000000000000000" {
		return fmt.Errorf("%w %q: want 00-<32 hex digits trace id>-<16 hex digits parent id>-<2 hex digits flags>, ids not all zero",
			ErrInvalidTraceparent, tp)
	}
	return nil
}

// encodeProperties checks application properties and encodes them as a JSON object.
func encodeProperties(props map[string]any) (string, error) {
	if len(props) == 0 {
		return "{}", nil
	}
	for k, v := range props {
		if err := checkProperty(v); err != nil {
			return "", fmt.Errorf("%w: property %q: %w", ErrInvalidMessage, k, err)
		}
	}
	b, err := json.Marshal(props)
	if err != nil {
		return "", fmt.Errorf("%w: properties: %w", ErrInvalidMessage, err)
	}
	return string(b), nil
}

func checkProperty(v any) error {
	switch x := v.(type) {
	case string, bool, int, int8, int16, int32, int64, uint8, uint16, uint32:
		return nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return errors.New("does not fit an int64")
		}
		return nil
	case uint64:
		if x > math.MaxInt64 {
			return errors.New("does not fit an int64")
		}
		return nil
	case float32:
		return finite(float64(x))
	case float64:
		return finite(x)
	case nil:
		return errors.New("is nil")
	}
	return fmt.Errorf("a %T cannot travel through the outbox (strings, bools, integers and floats can)", v)
}

func finite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v is not a finite number", f)
	}
	return nil
}

// decodeProperties reads stored properties back: numbers become int64 when they are
// integers that fit, float64 otherwise.
func decodeProperties(text string) (map[string]any, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("stored properties: %w", err)
	}
	props := make(map[string]any, len(raw)+3)
	for k, r := range raw {
		var v any
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("stored property %q: %w", k, err)
		}
		switch x := v.(type) {
		case string, bool:
			props[k] = x
		case json.Number:
			if i, err := x.Int64(); err == nil {
				props[k] = i
			} else if f, err := x.Float64(); err == nil {
				props[k] = f
			} else {
				return nil, fmt.Errorf("stored property %q: %s is not a number Service Bus can carry", k, x)
			}
		default:
			return nil, fmt.Errorf("stored property %q is a %T; application properties are strings, numbers and booleans", k, v)
		}
	}
	return props, nil
}
