package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// heldEntry is a held message as the store keeps it: its own copy of the body, the properties
// encoded as a durable store encodes them (sequencer.MarshalProperties).
type heldEntry struct {
	msg   sequencer.HeldMessage // Properties nil, Body owned by the store
	props []byte
}

// deadEntry is a dead letter of a held message.
type deadEntry struct {
	id          int64
	sessionID   string
	held        heldEntry
	reason      string
	description string
	deadAt      time.Time
}

// newHeldEntry copies m for the store, stamped at now unless it says when it was held.
func newHeldEntry(m *sequencer.HeldMessage, now time.Time) (heldEntry, error) {
	props, err := sequencer.MarshalProperties(m.Properties)
	if err != nil {
		return heldEntry{}, fmt.Errorf("sequence %d: %w", m.Sequence, err)
	}
	e := heldEntry{msg: *m, props: props}
	e.msg.Properties = nil
	e.msg.Body = slices.Clone(m.Body)
	if e.msg.Body == nil {
		e.msg.Body = []byte{}
	}
	e.msg.Size = sequencer.HeldSize(m)
	if e.msg.HeldAt.IsZero() {
		e.msg.HeldAt = now
	}
	e.msg.EnqueuedTime, e.msg.HeldAt = toMicro(e.msg.EnqueuedTime), toMicro(e.msg.HeldAt)
	return e, nil
}

// toMicro is t in UTC, truncated to the microsecond as a durable store keeps it.
func toMicro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// message returns the caller's own copy of the held message.
func (e heldEntry) message(omitBody bool) (*sequencer.HeldMessage, error) {
	m := e.msg
	props, err := sequencer.UnmarshalProperties(e.props)
	if err != nil {
		return nil, fmt.Errorf("held message %d: %w", m.Sequence, err)
	}
	m.Properties = props
	m.Body = slices.Clone(e.msg.Body)
	if omitBody {
		m.Body = nil
	}
	return &m, nil
}

// Hold implements sequencer.HeldStore.
func (s *Store) Hold(ctx context.Context, p sequencer.HoldParams) (sequencer.HoldResult, error) {
	if err := ctx.Err(); err != nil {
		return sequencer.HoldResult{}, fmt.Errorf("memory state store: hold: %w", err)
	}
	id := p.Session.ID()
	msgs, err := sequencer.CheckHold(p)
	if err != nil {
		return sequencer.HoldResult{}, fmt.Errorf("memory state store: hold messages of session %q: %w", id, err)
	}
	blob, err := p.State.MarshalBinary()
	if err != nil {
		return sequencer.HoldResult{}, fmt.Errorf("memory state store: hold messages of session %q: %w", id, err)
	}
	now := time.Now()
	entries := make([]heldEntry, len(msgs))
	for i, m := range msgs {
		if entries[i], err = newHeldEntry(m, now); err != nil {
			return sequencer.HoldResult{}, fmt.Errorf("memory state store: hold messages of session %q: %w", id, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.entries[id].version; cur != p.ExpectedVersion {
		return sequencer.HoldResult{}, fmt.Errorf("memory state store: hold messages of session %q: expected version %d, stored %d: %w",
			id, p.ExpectedVersion, cur, sequencer.ErrVersionConflict)
	}
	res := sequencer.HoldResult{Version: s.saveLocked(id, blob, p.State.Next)}
	held := s.held[id]
	if held == nil {
		held = map[int64]heldEntry{}
		s.held[id] = held
	}
	for _, e := range entries {
		if _, ok := held[e.msg.Sequence]; ok {
			continue // the first copy wins
		}
		held[e.msg.Sequence] = e
		res.Stored++
	}
	res.Stats = statsOf(held)
	return res, nil
}

func statsOf(held map[int64]heldEntry) sequencer.HeldStats {
	st := sequencer.HeldStats{Messages: len(held)}
	for _, e := range held {
		st.Bytes += e.msg.Size
	}
	return st
}

// Held implements sequencer.HeldStore.
func (s *Store) Held(ctx context.Context, p sequencer.HeldParams) ([]*sequencer.HeldMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory state store: held: %w", err)
	}
	id := p.Session.ID()
	s.mu.Lock()
	held := maps.Clone(s.held[id])
	s.mu.Unlock()
	var out []*sequencer.HeldMessage
	for _, seq := range slices.Sorted(maps.Keys(held)) {
		if seq < p.From {
			continue
		}
		if p.Limit > 0 && len(out) == p.Limit {
			break
		}
		m, err := held[seq].message(p.OmitBody)
		if err != nil {
			return nil, fmt.Errorf("memory state store: list held messages of session %q: %w", id, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// HeldStats implements sequencer.HeldStore.
func (s *Store) HeldStats(ctx context.Context, p sequencer.HeldStatsParams) (sequencer.HeldStats, error) {
	if err := ctx.Err(); err != nil {
		return sequencer.HeldStats{}, fmt.Errorf("memory state store: held stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return statsOf(s.held[p.Session.ID()]), nil
}

// HeldTotals implements sequencer.HeldStore.
func (s *Store) HeldTotals(ctx context.Context, _ sequencer.HeldTotalsParams) (sequencer.HeldTotals, error) {
	if err := ctx.Err(); err != nil {
		return sequencer.HeldTotals{}, fmt.Errorf("memory state store: held totals: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var t sequencer.HeldTotals
	for _, held := range s.held {
		st := statsOf(held)
		t.Held.Messages += st.Messages
		t.Held.Bytes += st.Bytes
	}
	for _, d := range s.dead {
		t.DeadLetters.Messages++
		t.DeadLetters.Bytes += d.held.msg.Size
	}
	return t, nil
}

// DeadLetterHeld implements sequencer.HeldStore.
func (s *Store) DeadLetterHeld(ctx context.Context, p sequencer.DeadLetterHeldParams) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory state store: dead-letter held message: %w", err)
	}
	id := p.Session.ID()
	op := fmt.Sprintf("dead-letter held message %d of session %q", p.Sequence, id)
	if p.State == nil {
		return 0, fmt.Errorf("memory state store: %s: no state given", op)
	}
	blob, err := p.State.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("memory state store: %s: %w", op, err)
	}
	at := p.At
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.entries[id].version; cur != p.ExpectedVersion || cur == 0 {
		return 0, fmt.Errorf("memory state store: %s: expected version %d, stored %d: %w",
			op, p.ExpectedVersion, cur, sequencer.ErrVersionConflict)
	}
	e, ok := s.held[id][p.Sequence]
	if !ok {
		return 0, fmt.Errorf("memory state store: %s: %w: the sequence is not held", op, sequencer.ErrNotFound)
	}
	delete(s.held[id], p.Sequence)
	s.lastDeadID++
	s.dead = append(s.dead, deadEntry{id: s.lastDeadID, sessionID: id, held: e, reason: p.Reason,
		description: p.Description, deadAt: toMicro(at)})
	return s.saveLocked(id, blob, p.State.Next), nil
}

// HeldDeadLetters implements sequencer.HeldStore.
func (s *Store) HeldDeadLetters(ctx context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory state store: list held dead letters: %w", err)
	}
	s.mu.Lock()
	dead := slices.Clone(s.dead)
	s.mu.Unlock()
	var out []*sequencer.HeldDeadLetter
	for _, d := range dead {
		if d.id <= p.AfterID || (p.SessionID != "" && d.sessionID != p.SessionID) {
			continue
		}
		if p.Limit > 0 && len(out) == p.Limit {
			break
		}
		m, err := d.held.message(p.OmitBody)
		if err != nil {
			return nil, fmt.Errorf("memory state store: list held dead letters: dead letter %d: %w", d.id, err)
		}
		out = append(out, &sequencer.HeldDeadLetter{ID: d.id, SessionID: d.sessionID, HeldMessage: *m,
			Reason: d.reason, Description: d.description, DeadAt: d.deadAt})
	}
	return out, nil
}

// RemoveHeldDeadLetter implements sequencer.HeldStore.
func (s *Store) RemoveHeldDeadLetter(ctx context.Context, p sequencer.RemoveHeldDeadLetterParams) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory state store: remove held dead letter %d: %w", p.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = slices.DeleteFunc(s.dead, func(d deadEntry) bool { return d.id == p.ID })
	return nil
}
