package sequencertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// heldSession is what the fake store holds for one session: its held messages by sequence.
type heldSession map[int64]*sequencer.HeldMessage

// HeldStoreClient is a StoreClient that also implements sequencer.HeldStore (EarlyStore), each
// call through the Process's hooks like the state's: a crash before a hold stores nothing, one
// after it leaves everything stored.
type HeldStoreClient struct{ *StoreClient }

var _ sequencer.HeldStore = HeldStoreClient{}

// Holding returns the view of the client that holds early messages.
func (c *StoreClient) Holding() HeldStoreClient { return HeldStoreClient{c} }

// AtomicHeldStoreClient is a HeldStoreClient that is also a sequencer.AtomicStore (the Postgres
// store in its transactional mode is both).
type AtomicHeldStoreClient struct{ HeldStoreClient }

var _ sequencer.AtomicStore = AtomicHeldStoreClient{}

// SaveWith runs fn, then saves, as AtomicStoreClient does.
func (a AtomicHeldStoreClient) SaveWith(ctx context.Context, p sequencer.SaveParams, fn func(ctx context.Context) error) (int64, error) {
	return a.Atomic().SaveWith(ctx, p, fn)
}

// HeldMessages returns the sequences a session holds (sorted).
func (s *Store) HeldMessages(sessionID string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.held[sessionID]))
}

// HeldDeadLetters returns every dead letter of a held message, in the order they were made.
func (s *Store) HeldDeadLetters() []*sequencer.HeldDeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dead)
}

// heldGoneLocked removes the held messages below next of session id (the advance's removal).
func (s *Store) heldGoneLocked(id string, next int64) {
	for seq := range s.held[id] {
		if seq < next {
			delete(s.held[id], seq)
		}
	}
}

// Hold implements sequencer.HeldStore.
func (c HeldStoreClient) Hold(_ context.Context, p sequencer.HoldParams) (sequencer.HoldResult, error) {
	var res sequencer.HoldResult
	err := c.op("hold", p.Session, func() error {
		msgs, err := sequencer.CheckHold(p)
		if err != nil {
			return fmt.Errorf("fake store: hold: %w", err)
		}
		for _, m := range msgs {
			if _, err := sequencer.MarshalProperties(m.Properties); err != nil {
				return fmt.Errorf("fake store: hold sequence %d: %w", m.Sequence, err)
			}
		}
		id := p.Session.ID()
		ver, err := c.s.saveLocked(sequencer.SaveParams{Session: p.Session, State: p.State, ExpectedVersion: p.ExpectedVersion})
		if err != nil {
			return err
		}
		if c.s.held[id] == nil {
			c.s.held[id] = heldSession{}
		}
		for _, m := range msgs {
			if _, ok := c.s.held[id][m.Sequence]; ok {
				continue
			}
			cp := *m
			cp.Body, cp.Properties = slices.Clone(m.Body), maps.Clone(m.Properties)
			cp.Size = sequencer.HeldSize(m)
			c.s.held[id][m.Sequence] = &cp
			res.Stored++
		}
		res.Version, res.Stats = ver, c.s.statsLocked(id)
		return nil
	})
	return res, err
}

func (s *Store) statsLocked(id string) sequencer.HeldStats {
	var st sequencer.HeldStats
	for _, m := range s.held[id] {
		st.Messages++
		st.Bytes += m.Size
	}
	return st
}

// Held implements sequencer.HeldStore.
func (c HeldStoreClient) Held(_ context.Context, p sequencer.HeldParams) ([]*sequencer.HeldMessage, error) {
	var out []*sequencer.HeldMessage
	err := c.op("held", p.Session, func() error {
		for _, seq := range slices.Sorted(maps.Keys(c.s.held[p.Session.ID()])) {
			if seq < p.From || (p.Limit > 0 && len(out) == p.Limit) {
				continue
			}
			cp := *c.s.held[p.Session.ID()][seq]
			cp.Body, cp.Properties = slices.Clone(cp.Body), maps.Clone(cp.Properties)
			if p.OmitBody {
				cp.Body = nil
			}
			out = append(out, &cp)
		}
		return nil
	})
	return out, err
}

// HeldStats implements sequencer.HeldStore.
func (c HeldStoreClient) HeldStats(_ context.Context, p sequencer.HeldStatsParams) (sequencer.HeldStats, error) {
	var st sequencer.HeldStats
	err := c.op("held_stats", p.Session, func() error {
		st = c.s.statsLocked(p.Session.ID())
		return nil
	})
	return st, err
}

// HeldTotals implements sequencer.HeldStore.
func (c HeldStoreClient) HeldTotals(context.Context, sequencer.HeldTotalsParams) (sequencer.HeldTotals, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var t sequencer.HeldTotals
	for id := range c.s.held {
		st := c.s.statsLocked(id)
		t.Held.Messages += st.Messages
		t.Held.Bytes += st.Bytes
	}
	for _, d := range c.s.dead {
		t.DeadLetters.Messages++
		t.DeadLetters.Bytes += d.Size
	}
	return t, nil
}

// DeadLetterHeld implements sequencer.HeldStore.
func (c HeldStoreClient) DeadLetterHeld(_ context.Context, p sequencer.DeadLetterHeldParams) (int64, error) {
	var ver int64
	err := c.op("dead_letter_held", p.Session, func() error {
		id := p.Session.ID()
		m, ok := c.s.held[id][p.Sequence]
		if !ok {
			return fmt.Errorf("fake store: dead-letter held sequence %d of %q: %w", p.Sequence, id, sequencer.ErrNotFound)
		}
		var err error
		if ver, err = c.s.saveLocked(sequencer.SaveParams{Session: p.Session, State: p.State, ExpectedVersion: p.ExpectedVersion}); err != nil {
			return err
		}
		delete(c.s.held[id], p.Sequence)
		at := p.At
		if at.IsZero() {
			at = time.Now()
		}
		c.s.dead = append(c.s.dead, &sequencer.HeldDeadLetter{ID: int64(len(c.s.dead) + 1), SessionID: id, HeldMessage: *m,
			Reason: p.Reason, Description: p.Description, DeadAt: at})
		return nil
	})
	return ver, err
}

// HeldDeadLetters implements sequencer.HeldStore.
func (c HeldStoreClient) HeldDeadLetters(_ context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var out []*sequencer.HeldDeadLetter
	for _, d := range c.s.dead {
		if d.ID > p.AfterID && (p.SessionID == "" || d.SessionID == p.SessionID) && (p.Limit == 0 || len(out) < p.Limit) {
			out = append(out, d)
		}
	}
	return out, nil
}

// RemoveHeldDeadLetter implements sequencer.HeldStore.
func (c HeldStoreClient) RemoveHeldDeadLetter(_ context.Context, p sequencer.RemoveHeldDeadLetterParams) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.dead = slices.DeleteFunc(c.s.dead, func(d *sequencer.HeldDeadLetter) bool { return d.ID == p.ID })
	return nil
}
