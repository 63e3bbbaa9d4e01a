package sequencer

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HeldMessage is an early message kept by a HeldStore: what the handler is given when its turn
// comes (Message), without what only the broker's copy has (the lock, the delivery count).
type HeldMessage struct {
	// Sequence is the application sequence; IsLast reports whether the message ends its
	// session's sequence.
	Sequence int64
	IsLast   bool
	// MessageID and BrokerSequence are the broker's, from the copy that was held.
	MessageID      string
	BrokerSequence int64
	// EnqueuedTime is when the broker accepted the message. A store keeps it, and HeldAt, to
	// the microsecond (truncated; a broker's times are milliseconds), in UTC.
	EnqueuedTime time.Time
	// Properties are the application properties. A store keeps the types listed at
	// MarshalProperties; Hold refuses a message with any other (ErrNotHoldable).
	Properties map[string]any
	// Body is the message payload; ContentType the publisher's content type, if any.
	Body        []byte
	ContentType string
	// HeldAt is when the message was first held (the store sets it when zero).
	HeldAt time.Time
	// Size is what the message counts against the limits, set by the store (see Size).
	Size int64
}

// NewHeldMessage returns the held copy of m, an early message the engine has parsed (m.Sequence
// and m.IsLast set), held at now.
func NewHeldMessage(m *Message, now time.Time) *HeldMessage {
	return &HeldMessage{
		Sequence: m.Sequence, IsLast: m.IsLast, MessageID: m.MessageID, BrokerSequence: m.BrokerSequence,
		EnqueuedTime: m.EnqueuedTime, Properties: m.Properties, Body: m.Body, ContentType: m.ContentType,
		HeldAt: now,
	}
}

// Message returns the message the handler is given for h, of session sessionID. Raw is h.
func (h *HeldMessage) Message(sessionID string) *Message {
	return &Message{
		MessageID: h.MessageID, SessionID: sessionID, BrokerSequence: h.BrokerSequence,
		EnqueuedTime: h.EnqueuedTime, Properties: h.Properties, Body: h.Body, ContentType: h.ContentType,
		Sequence: h.Sequence, IsLast: h.IsLast, Raw: h,
	}
}

// HeldSize is what a held message counts against the limits of what a session and a replica
// hold: its body, its message id and content type, and each property's name and value (a string
// or byte value by its length, any other value as 8 bytes). Every store counts it so.
func HeldSize(h *HeldMessage) int64 {
	n := int64(len(h.Body) + len(h.MessageID) + len(h.ContentType))
	for k, v := range h.Properties {
		n += int64(len(k))
		switch v := v.(type) {
		case string:
			n += int64(len(v))
		case []byte:
			n += int64(len(v))
		default:
			n += 8
		}
	}
	return n
}

// HoldParams are the arguments of HeldStore.Hold.
type HoldParams struct {
	Session Session
	// State is saved with the messages, with the version check of StateStore.Save.
	State           *State
	ExpectedVersion int64
	// Messages are the early messages to hold: each sequence at least State.Next. A sequence
	// already held, or given twice, keeps its first copy.
	Messages []*HeldMessage
}

// HoldResult is what Hold stored.
type HoldResult struct {
	// Version is the new version of the state.
	Version int64
	// Stored counts the messages stored by this hold (a sequence already held is not).
	Stored int
	// Stats are the session's held messages after the hold.
	Stats HeldStats
}

// HeldParams are the arguments of HeldStore.Held.
type HeldParams struct {
	Session Session
	// From is the lowest sequence returned (0: every held message).
	From int64
	// Limit bounds the messages returned (0: all).
	Limit int
	// OmitBody leaves Body nil (a listing); Size still counts it.
	OmitBody bool
}

// HeldStatsParams are the arguments of HeldStore.HeldStats.
type HeldStatsParams struct {
	Session Session
}

// HeldTotalsParams are the arguments of HeldStore.HeldTotals (for future expansion).
type HeldTotalsParams struct{}

// HeldTotals are what a store holds for its entity, every session together: the gauges of held
// messages and bytes.
type HeldTotals struct {
	// Held are the messages held; DeadLetters those that turned poison, kept until replayed.
	Held        HeldStats
	DeadLetters HeldStats
}

// HeldStats are the messages a session holds in the store.
type HeldStats struct {
	// Messages counts them; Bytes adds up their sizes (HeldSize).
	Messages int
	Bytes    int64
}

// DeadLetterHeldParams are the arguments of HeldStore.DeadLetterHeld.
type DeadLetterHeldParams struct {
	Session Session
	// State is saved with the version check, as by StateStore.Save: it records the message as
	// dead-lettered (parked on it, or passed).
	State           *State
	ExpectedVersion int64
	// Sequence names the held message to dead-letter.
	Sequence int64
	// Reason and Description say why, as for Session.DeadLetter.
	Reason      string
	Description string
	// At is when the message was dead-lettered (the store sets it when zero).
	At time.Time
}

// HeldDeadLetter is a held message that turned poison, kept among the store's dead letters
// until an operator replays it.
type HeldDeadLetter struct {
	// ID names the dead letter within its entity.
	ID        int64
	SessionID string
	HeldMessage
	Reason      string
	Description string
	DeadAt      time.Time
}

// HeldDeadLettersParams are the arguments of HeldStore.HeldDeadLetters.
type HeldDeadLettersParams struct {
	// SessionID selects one session's dead letters ("": every session's).
	SessionID string
	// AfterID lists the dead letters whose ID is above it (paging).
	AfterID int64
	// Limit bounds the dead letters returned (0: all).
	Limit int
	// OmitBody leaves Body nil (a listing).
	OmitBody bool
}

// RemoveHeldDeadLetterParams are the arguments of HeldStore.RemoveHeldDeadLetter.
type RemoveHeldDeadLetterParams struct {
	ID int64
}

// HeldStore is a StateStore that holds early messages (a sequence above Next) of its sessions
// next to their state, so that the broker need not hold them: the message is copied into the
// store, then completed at the broker, and handed to the handler from the store when its turn
// comes. It is the ground of the settlement strategy "held in the store", for brokers without
// deferral and for entities on which deferral is not safe to use. Its Save removes the
// session's held messages below the saved Next, and its Delete removes all of them, in the same
// transaction as the state.
//
// The store's part of the crash argument: three guarantees the strategy builds on.
//
//  1. Hold is one step: the messages and the state (with the version check) are stored together
//     or not at all. A conflict stores nothing, so a holder that lost the session (its version
//     is stale) holds nothing. The broker message is completed only after Hold returned, so a
//     crash before the commit leaves the message at the broker (delivered again), and a crash
//     after it leaves it in the store (and perhaps also at the broker, until the completion
//     lands: the copy delivered again is a duplicate of a held sequence).
//  2. A held sequence keeps its first copy: holding a sequence that is already held keeps what
//     was stored and counts nothing (HoldResult.Stored), so a copy delivered again, or a hold
//     repeated after a crash, changes nothing.
//  3. The advance and the removal are one step: every Save (and Hold, DeadLetterHeld) removes,
//     in the same transaction as the state, the held messages below the saved state's Next;
//     Delete removes all of the session's. A message handed over from the store is therefore
//     removed exactly when the state records it as handled; a crash before that save leaves it
//     held, and it is handed over again, as a message at the broker would be delivered again.
//
// A held message that turns poison is moved to the store's dead letters (DeadLetterHeld), in the
// same transaction as the state that records it (parked on it, or passed by the poison policy
// skip). A dead letter stays, whatever becomes of the state, until an operator replays it: the
// replay sends a copy to the entity, as for the broker's dead letters, then removes the dead
// letter; a crash between the two sends the copy again at the next replay, which the workers
// drop as a duplicate.
//
// What the store does not do: it does not decide what is early, nor bound what a session holds
// (HeldStats reports the count and the bytes; the strategy applies the limits), nor wake a
// session whose Next is held: the broker offers no session whose messages all left it, so the
// state the strategy saves must say so, as it does for a deferred Next (State.NeedsWake), for
// the sweepers to find it.
type HeldStore interface {
	StateStore
	// Hold stores p.Messages and p.State in one transaction if the stored version still equals
	// p.ExpectedVersion (ErrVersionConflict otherwise, storing nothing). A message below
	// p.State.Next, or one the store cannot keep (ErrNotHoldable), fails the whole hold.
	Hold(ctx context.Context, p HoldParams) (HoldResult, error)
	// Held returns the session's held messages from p.From, in sequence order, at most p.Limit.
	Held(ctx context.Context, p HeldParams) ([]*HeldMessage, error)
	// HeldStats returns what the session holds.
	HeldStats(ctx context.Context, p HeldStatsParams) (HeldStats, error)
	// HeldTotals returns what the store holds for its entity, every session together.
	HeldTotals(ctx context.Context, p HeldTotalsParams) (HeldTotals, error)
	// DeadLetterHeld moves the held message p.Sequence to the store's dead letters and saves
	// p.State, in one transaction, if the stored version still equals p.ExpectedVersion
	// (ErrVersionConflict otherwise). A sequence not held is ErrNotFound; either error stores
	// nothing. It returns the new version.
	DeadLetterHeld(ctx context.Context, p DeadLetterHeldParams) (int64, error)
	// HeldDeadLetters lists the entity's dead letters in ID order (the order they were
	// dead-lettered in).
	HeldDeadLetters(ctx context.Context, p HeldDeadLettersParams) ([]*HeldDeadLetter, error)
	// RemoveHeldDeadLetter removes a dead letter once its copy was sent (a replay). Removing one
	// that is gone is not an error.
	RemoveHeldDeadLetter(ctx context.Context, p RemoveHeldDeadLetterParams) error
}

// ErrNotHoldable: the message cannot be kept by the store as it is (an application property of a
// type the store does not keep); nothing was stored. The broker keeps such a message.
var ErrNotHoldable = errors.New("sequencer: message cannot be held in the store")

// CheckHold checks p before a store holds it: a state, every message named by a positive
// sequence at least p.State.Next. It returns the messages to store, the first copy of each
// sequence, in sequence order.
func CheckHold(p HoldParams) ([]*HeldMessage, error) {
	if p.State == nil {
		return nil, errors.New("no state given")
	}
	seen := make(map[int64]bool, len(p.Messages))
	out := make([]*HeldMessage, 0, len(p.Messages))
	for _, m := range p.Messages {
		if m == nil {
			return nil, errors.New("nil message")
		}
		if m.Sequence < p.State.Next || m.Sequence <= 0 {
			return nil, fmt.Errorf("message %q has sequence %d, below the state's next %d: only early messages are held",
				m.MessageID, m.Sequence, p.State.Next)
		}
		if seen[m.Sequence] {
			continue
		}
		seen[m.Sequence] = true
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *HeldMessage) int { return cmp.Compare(a.Sequence, b.Sequence) })
	return out, nil
}

// typedValue is one encoded property: its type and its value.
type typedValue struct {
	T string `json:"t"`
	V any    `json:"v"`
}

// MarshalProperties encodes props (nil or empty: "{}") as one JSON object whose members are typed values, so
// that a store (a jsonb column) gives the handler the types the adapter decoded:
//
//	{"Sequence": {"t": "int64", "v": "5"}, "IsLast": {"t": "bool", "v": true}, "Note": {"t": "string", "v": "…"}}
//
// Kept types: nil, bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32,
// uint64, float32, float64, time.Time and []byte. Integers are written as decimal strings
// (exact beyond 2^53), floats as strconv's shortest form (NaN and ±Inf too), times in
// RFC 3339 with nanoseconds, bytes in base64. A string that JSON text in a store cannot carry
// as it is (not UTF-8, or holding U+0000, which jsonb refuses) is written in base64 with type
// "string64". Any other type is refused with ErrNotHoldable, naming the property: the store
// never hands the handler a value of another type than the broker's copy had.
func MarshalProperties(props map[string]any) ([]byte, error) {
	out := make(map[string]typedValue, len(props))
	for k, v := range props {
		if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
			return nil, fmt.Errorf("%w: property name %q is not UTF-8 text without U+0000", ErrNotHoldable, k)
		}
		tv, err := encodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: property %q: %w", ErrNotHoldable, k, err)
		}
		out[k] = tv
	}
	return json.Marshal(out)
}

func encodeValue(v any) (typedValue, error) {
	i := func(t string, n int64) typedValue { return typedValue{t, strconv.FormatInt(n, 10)} }
	u := func(t string, n uint64) typedValue { return typedValue{t, strconv.FormatUint(n, 10)} }
	switch v := v.(type) {
	case nil:
		return typedValue{"nil", nil}, nil
	case bool:
		return typedValue{"bool", v}, nil
	case string:
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return typedValue{"string64", base64.StdEncoding.EncodeToString([]byte(v))}, nil
		}
		return typedValue{"string", v}, nil
	case int:
		return i("int", int64(v)), nil
	case int8:
		return i("int8", int64(v)), nil
	case int16:
		return i("int16", int64(v)), nil
	case int32:
		return i("int32", int64(v)), nil
	case int64:
		return i("int64", v), nil
	case uint:
		return u("uint", uint64(v)), nil
	case uint8:
		return u("uint8", uint64(v)), nil
	case uint16:
		return u("uint16", uint64(v)), nil
	case uint32:
		return u("uint32", uint64(v)), nil
	case uint64:
		return u("uint64", v), nil
	case float32:
		return typedValue{"float32", strconv.FormatFloat(float64(v), 'g', -1, 32)}, nil
	case float64:
		return typedValue{"float64", strconv.FormatFloat(v, 'g', -1, 64)}, nil
	case time.Time:
		return typedValue{"time", v.UTC().Format(time.RFC3339Nano)}, nil
	case []byte:
		return typedValue{"bytes", base64.StdEncoding.EncodeToString(v)}, nil
	}
	return typedValue{}, fmt.Errorf("type %T is not kept", v)
}

// UnmarshalProperties decodes what MarshalProperties encoded into a map of its own (empty, not
// nil, for "{}").
func UnmarshalProperties(data []byte) (map[string]any, error) {
	var raw map[string]struct {
		T string          `json:"t"`
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decode properties: %w", err)
	}
	out := make(map[string]any, len(raw))
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
			return nil, fmt.Errorf("decode properties: property name %q is not UTF-8 text without U+0000", k)
		}
		v, err := decodeValue(raw[k].T, raw[k].V)
		if err != nil {
			return nil, fmt.Errorf("decode property %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

func decodeValue(t string, raw json.RawMessage) (any, error) {
	var s string
	switch t {
	case "nil":
		return nil, nil
	case "bool":
		var b bool
		err := json.Unmarshal(raw, &b)
		return b, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("type %s: %w", t, err)
	}
	signed := func(bits int) (int64, error) { return strconv.ParseInt(s, 10, bits) }
	unsigned := func(bits int) (uint64, error) { return strconv.ParseUint(s, 10, bits) }
	switch t {
	case "string":
		return s, nil
	case "string64":
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	case "int":
		n, err := signed(strconv.IntSize)
		return int(n), err
	case "int8":
		n, err := signed(8)
		return int8(n), err
	case "int16":
		n, err := signed(16)
		return int16(n), err
	case "int32":
		n, err := signed(32)
		return int32(n), err
	case "int64":
		return signed(64)
	case "uint":
		n, err := unsigned(strconv.IntSize)
		return uint(n), err
	case "uint8":
		n, err := unsigned(8)
		return uint8(n), err
	case "uint16":
		n, err := unsigned(16)
		return uint16(n), err
	case "uint32":
		n, err := unsigned(32)
		return uint32(n), err
	case "uint64":
		return unsigned(64)
	case "float32":
		f, err := strconv.ParseFloat(s, 32)
		return float32(f), err
	case "float64":
		return strconv.ParseFloat(s, 64)
	case "time":
		at, err := time.Parse(time.RFC3339Nano, s)
		return at.UTC(), err
	case "bytes":
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("unknown type %q", t)
}
