package e2e

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// timedStore is a state store that times its loads and saves, so that a benchmark can say what
// the store's round trips cost while the cell runs: on a shared machine they take far longer
// than on an idle one, and the worker waits for one of them before a session's first handler
// call. It must wrap a store that is neither an AtomicStore nor a SessionBoundStore (the engine
// looks for those, and the wrapper hides them).
type timedStore struct {
	sequencer.StateStore
	mu           sync.Mutex
	loads, saves []time.Duration
}

func (s *timedStore) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	start := time.Now()
	st, ver, err := s.StateStore.Load(ctx, p)
	s.add(&s.loads, time.Since(start))
	return st, ver, err
}

func (s *timedStore) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	start := time.Now()
	ver, err := s.StateStore.Save(ctx, p)
	s.add(&s.saves, time.Since(start))
	return ver, err
}

func (s *timedStore) add(to *[]time.Duration, d time.Duration) {
	s.mu.Lock()
	*to = append(*to, d)
	s.mu.Unlock()
}

// ms is the p-th percentile (0 < p < 1) of ds in milliseconds, 0 when ds is empty.
func ms(ds []time.Duration, p float64) float64 {
	return float64(percentile(slices.Sorted(slices.Values(ds)), p)) / float64(time.Millisecond)
}

// floorStore is an unsafe state store for measuring what a store's writes cost a cell: it sends
// the loads to the wrapped store but only some saves, the final one of a session (the tombstone)
// and, with first, a session's first one (for a run that starts the session, the record of its
// first run, awaited before its first handler call); it answers the others at once with a
// made-up version and keeps nothing of them. A crash would lose what it did not send. It
// measures what no design can undercut: a session's state must be read, and its end written.
type floorStore struct {
	sequencer.StateStore
	first bool

	mu   sync.Mutex
	real map[string]int64 // session → the version the wrapped store holds
	sent map[string]bool  // session → a save of it was sent
	fake int64
}

func (s *floorStore) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	st, ver, err := s.StateStore.Load(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.real[p.Session.ID()] = ver
	return st, ver, err
}

func (s *floorStore) initLocked() {
	if s.real == nil {
		s.real, s.sent = map[string]int64{}, map[string]bool{}
	}
}

func (s *floorStore) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	id := p.Session.ID()
	s.mu.Lock()
	s.initLocked()
	real, sent := s.real[id], s.sent[id]
	s.sent[id] = true
	if p.State.EndedAt.IsZero() && (sent || !s.first) {
		s.fake++
		v := 1<<40 + s.fake // never a version the wrapped store hands out here
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	p.ExpectedVersion = real
	ver, err := s.StateStore.Save(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.real[id] = ver
		s.mu.Unlock()
	}
	return ver, err
}

func (s *floorStore) Delete(ctx context.Context, p sequencer.DeleteParams) error {
	s.mu.Lock()
	p.ExpectedVersion = s.real[p.Session.ID()]
	s.mu.Unlock()
	return s.StateStore.Delete(ctx, p)
}
