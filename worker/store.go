package worker

import (
	"context"
	"errors"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// instrumented counts the loads and counts and times the saves of a state store for the metrics, and tells saved
// (when set) the outcome of each save and delete of the runner: the release reports.
type instrumented struct {
	sequencer.StateStore
	m     *metrics
	saved func(id string, st *sequencer.State, err error)
}

// instrumentedAtomic is instrumented for an AtomicStore, so that the engine still finds SaveWith.
type instrumentedAtomic struct {
	*instrumented
	atomic sequencer.AtomicStore
}

// instrument wraps s with the save metrics (and saved, when not nil), keeping its AtomicStore
// and HeldStore sides if it has them.
func instrument(s sequencer.StateStore, m *metrics, saved func(id string, st *sequencer.State, err error)) sequencer.StateStore {
	in := &instrumented{StateStore: s, m: m, saved: saved}
	a, atomic := s.(sequencer.AtomicStore)
	h, held := s.(sequencer.HeldStore)
	switch {
	case atomic && held:
		return &instrumentedAtomicHeld{&instrumentedAtomic{instrumented: in, atomic: a}, heldSide{in, h}}
	case atomic:
		return &instrumentedAtomic{instrumented: in, atomic: a}
	case held:
		return &instrumentedHeld{in, heldSide{in, h}}
	}
	return in
}

// WritesThroughSession passes on the wrapped store's answer (sequencer.SessionBoundStore).
func (s *instrumented) WritesThroughSession() bool {
	b, ok := s.StateStore.(sequencer.SessionBoundStore)
	return ok && b.WritesThroughSession()
}

func (s *instrumented) observe(start time.Time, err error) {
	s.m.stateSaves.Inc()
	s.m.stateSaveTime.Observe(time.Since(start).Seconds())
	if errors.Is(err, sequencer.ErrVersionConflict) {
		s.m.stateConflicts.Inc()
	}
}

func (s *instrumented) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	s.m.stateLoads.Inc()
	return s.StateStore.Load(ctx, p)
}

func (s *instrumented) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	start := time.Now()
	v, err := s.StateStore.Save(ctx, p)
	s.observe(start, err)
	if s.saved != nil {
		s.saved(p.Session.ID(), p.State, err)
	}
	return v, err
}

func (s *instrumented) Delete(ctx context.Context, p sequencer.DeleteParams) error {
	start := time.Now()
	err := s.StateStore.Delete(ctx, p)
	s.observe(start, err)
	if s.saved != nil {
		s.saved(p.Session.ID(), nil, err)
	}
	return err
}

// SaveWith counts a save only when the handler succeeded: a failed handler call is no save.
func (s *instrumentedAtomic) SaveWith(ctx context.Context, p sequencer.SaveParams, fn func(ctx context.Context) error) (int64, error) {
	start := time.Now()
	var handled bool
	v, err := s.atomic.SaveWith(ctx, p, func(ctx context.Context) error {
		err := fn(ctx)
		handled = err == nil
		return err
	})
	if handled {
		s.observe(start, err)
	}
	return v, err
}
