package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Store is an in-memory sequencer.StateStore keyed by session id. The zero value is not usable;
// call New. A Store is safe for concurrent use.
type Store struct {
	mu          sync.Mutex
	entries     map[string]entry
	lastVersion int64
}

type entry struct {
	blob    []byte
	version int64
}

var _ sequencer.StateStore = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{entries: map[string]entry{}}
}

// Load implements sequencer.StateStore.
func (s *Store) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("memory state store: load: %w", err)
	}
	id := p.Session.ID()
	s.mu.Lock()
	e, ok := s.entries[id]
	s.mu.Unlock()
	if !ok {
		return sequencer.NewState(), 0, nil
	}
	st := &sequencer.State{}
	if err := st.UnmarshalBinary(e.blob); err != nil {
		return nil, 0, fmt.Errorf("memory state store: load session %q: %w", id, err)
	}
	return st, e.version, nil
}

// Save implements sequencer.StateStore.
func (s *Store) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory state store: save: %w", err)
	}
	id := p.Session.ID()
	blob, err := p.State.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("memory state store: save session %q: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.entries[id].version; cur != p.ExpectedVersion {
		return 0, fmt.Errorf("memory state store: save session %q: expected version %d, stored %d: %w",
			id, p.ExpectedVersion, cur, sequencer.ErrVersionConflict)
	}
	s.lastVersion++
	s.entries[id] = entry{blob: blob, version: s.lastVersion}
	return s.lastVersion, nil
}

// Delete implements sequencer.StateStore.
func (s *Store) Delete(ctx context.Context, p sequencer.DeleteParams) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory state store: delete: %w", err)
	}
	id := p.Session.ID()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok {
		return nil
	}
	if e.version != p.ExpectedVersion {
		return fmt.Errorf("memory state store: delete session %q: expected version %d, stored %d: %w",
			id, p.ExpectedVersion, e.version, sequencer.ErrVersionConflict)
	}
	delete(s.entries, id)
	return nil
}

// Len returns how many sessions have a stored state.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
