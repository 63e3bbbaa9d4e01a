package operator

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/sequencer"
)

// HeldInfo is a message the state store holds for a session (an early message kept by the
// store instead of the broker) or, with Reason set, one of its dead letters.
type HeldInfo struct {
	Sequence int64 `json:"sequence"`
	Last     bool  `json:"last,omitempty"`
	// MessageID and BrokerSequence are the broker's, from the copy that was held.
	MessageID      string `json:"message_id"`
	BrokerSequence int64  `json:"broker_sequence"`
	// Size is what the message counts against the limits (sequencer.HeldSize): body, ids,
	// properties.
	Size int64 `json:"size"`
	// HeldAt is when the store took the message over from the broker.
	HeldAt time.Time `json:"held_at"`
	// ID, SessionID, Reason, Description and DeadAt are set on a dead letter: the store's id of
	// it, its session, why and when the message was dead-lettered.
	ID          int64      `json:"id,omitempty"`
	SessionID   string     `json:"session_id,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Description string     `json:"description,omitempty"`
	DeadAt      *time.Time `json:"dead_at,omitempty"`
}

// HeldSummary is what a session holds in the store: every message counted, the first ones
// listed.
type HeldSummary struct {
	// Messages and Bytes count every held message of the session (Bytes adds up their sizes).
	Messages int   `json:"messages"`
	Bytes    int64 `json:"bytes"`
	// Listed are the held messages in sequence order, at most ShowParams.MaxMessages.
	Listed []HeldInfo `json:"listed"`
	// DeadLetters are the session's held messages that turned poison, in the order they were
	// dead-lettered, at most ShowParams.MaxMessages.
	DeadLetters []HeldInfo `json:"dead_letters"`
}

// heldReader is what Show reads of a store that holds early messages (sequencer.HeldStore).
type heldReader interface {
	Held(ctx context.Context, p sequencer.HeldParams) ([]*sequencer.HeldMessage, error)
	HeldStats(ctx context.Context, p sequencer.HeldStatsParams) (sequencer.HeldStats, error)
	HeldDeadLetters(ctx context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error)
}

// heldBelow returns the sequences from..to-1 the store holds for session id (none with a store
// that holds no messages): a save that moves Next to to removes them.
func (o *Operator) heldBelow(ctx context.Context, id string, from, to int64) ([]int64, error) {
	hr, ok := o.cfg.Store.(heldReader)
	if !ok || to <= from {
		return nil, nil
	}
	msgs, err := hr.Held(ctx, sequencer.HeldParams{Session: unlocked(id), From: from, Limit: int(min(to-from, math.MaxInt32)), OmitBody: true})
	if err != nil {
		return nil, fmt.Errorf("list the held messages of session %q: %w", id, err)
	}
	var out []int64
	for _, m := range msgs {
		if m.Sequence < to {
			out = append(out, m.Sequence)
		}
	}
	return out, nil
}

// heldDeadLetterStore is what the dead-letter commands use of a store that holds early
// messages: its dead letters, listed and removed once replayed.
type heldDeadLetterStore interface {
	HeldDeadLetters(ctx context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error)
	RemoveHeldDeadLetter(ctx context.Context, p sequencer.RemoveHeldDeadLetterParams) error
}

var (
	_ heldReader          = sequencer.HeldStore(nil)
	_ heldDeadLetterStore = sequencer.HeldStore(nil)
)

// heldPage is how many of the store's dead letters one call lists without their bodies;
// heldBodyPage how many with them (a replay's), which bounds the memory a page takes.
const (
	heldPage     = 500
	heldBodyPage = 50
)

// heldDeadLetters lists the store's dead letters (without bodies) of session id ("": all) with
// the given reason ("": any), at most limit (0: all), and reports whether more match; nil with a
// store that holds no messages.
func (o *Operator) heldDeadLetters(ctx context.Context, id, reason string, limit int) ([]*sequencer.HeldDeadLetter, bool, error) {
	hs, ok := o.cfg.Store.(heldDeadLetterStore)
	if !ok {
		return nil, false, nil
	}
	out := []*sequencer.HeldDeadLetter{}
	var after int64
	for {
		page, err := hs.HeldDeadLetters(ctx, sequencer.HeldDeadLettersParams{SessionID: id, AfterID: after, Limit: heldPage, OmitBody: true})
		if err != nil {
			return nil, false, fmt.Errorf("list the dead letters held in the state store: %w", err)
		}
		for _, d := range page {
			if reason != "" && d.Reason != reason {
				continue
			}
			if limit > 0 && len(out) == limit {
				return out, true, nil
			}
			out = append(out, d)
		}
		if len(page) < heldPage {
			return out, false, nil
		}
		after = page[len(page)-1].ID
	}
}

// deadInfo describes one of the store's dead letters.
func deadInfo(d *sequencer.HeldDeadLetter) HeldInfo {
	info := heldInfo(&d.HeldMessage)
	at := d.DeadAt
	info.ID, info.SessionID, info.Reason, info.Description, info.DeadAt = d.ID, d.SessionID, d.Reason, d.Description, &at
	return info
}

// heldCopy is the copy of the store's dead letter d that goes back to the entity, as replayCopy
// builds one of a dead letter of the broker's.
func heldCopy(d *sequencer.HeldDeadLetter, source string) *azservicebus.Message {
	props := maps.Clone(d.Properties)
	if props == nil {
		props = map[string]any{}
	}
	props[PropertyReplayedFromDLQ] = source
	id := ReplayMessageID(d.MessageID, d.BrokerSequence)
	sid := d.SessionID
	c := &azservicebus.Message{MessageID: &id, SessionID: &sid, Body: d.Body, ApplicationProperties: props}
	if d.ContentType != "" {
		ct := d.ContentType
		c.ContentType = &ct
	}
	return c
}

// held describes what the store holds for the session, nil for a store that holds no messages.
// A store that holds messages is keyed by session id, so no lock is needed to read it.
func (o *Operator) held(ctx context.Context, id string, limit int) (*HeldSummary, error) {
	hr, ok := o.cfg.Store.(heldReader)
	if !ok {
		return nil, nil
	}
	sess := unlocked(id)
	st, err := hr.HeldStats(ctx, sequencer.HeldStatsParams{Session: sess})
	if err != nil {
		return nil, fmt.Errorf("count the held messages of session %q: %w", id, err)
	}
	msgs, err := hr.Held(ctx, sequencer.HeldParams{Session: sess, Limit: limit, OmitBody: true})
	if err != nil {
		return nil, fmt.Errorf("list the held messages of session %q: %w", id, err)
	}
	dead, err := hr.HeldDeadLetters(ctx, sequencer.HeldDeadLettersParams{SessionID: id, Limit: limit, OmitBody: true})
	if err != nil {
		return nil, fmt.Errorf("list the held dead letters of session %q: %w", id, err)
	}
	sum := &HeldSummary{Messages: st.Messages, Bytes: st.Bytes, Listed: []HeldInfo{}, DeadLetters: []HeldInfo{}}
	for _, m := range msgs {
		sum.Listed = append(sum.Listed, heldInfo(m))
	}
	for _, d := range dead {
		sum.DeadLetters = append(sum.DeadLetters, deadInfo(d))
	}
	return sum, nil
}

func heldInfo(m *sequencer.HeldMessage) HeldInfo {
	return HeldInfo{Sequence: m.Sequence, Last: m.IsLast, MessageID: m.MessageID, BrokerSequence: m.BrokerSequence,
		Size: m.Size, HeldAt: m.HeldAt}
}
