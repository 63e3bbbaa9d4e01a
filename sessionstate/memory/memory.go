package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// Store is an in-memory sequencer.StateStore keyed by session id. The zero value is not usable;
// call New. A Store is safe for concurrent use.
type Store struct {
	mu          sync.Mutex
	entries     map[string]entry
	lastVersion int64
	// held maps session id → sequence → held message (see held.go); dead are the dead letters
	// in ID order, lastDeadID the last ID given.
	held       map[string]map[int64]heldEntry
	dead       []deadEntry
	lastDeadID int64
}

type entry struct {
	blob    []byte
	version int64
}

var (
	_ sequencer.StateStore = (*Store)(nil)
	_ sequencer.HeldStore  = (*Store)(nil)
	_ sessionstate.Lister  = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store {
	return &Store{entries: map[string]entry{}, held: map[string]map[int64]heldEntry{}}
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
	return s.saveLocked(id, blob, p.State.Next), nil
}

// saveLocked stores blob as the state of session id, with a new version, and removes the held
// messages below next. s.mu is held and the version checked.
func (s *Store) saveLocked(id string, blob []byte, next int64) int64 {
	s.lastVersion++
	s.entries[id] = entry{blob: blob, version: s.lastVersion}
	for seq := range s.held[id] {
		if seq < next {
			delete(s.held[id], seq)
		}
	}
	if len(s.held[id]) == 0 {
		delete(s.held, id)
	}
	return s.lastVersion
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
	delete(s.held, id)
	return nil
}

// Len returns how many sessions have a stored state.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// List implements sessionstate.Lister.
func (s *Store) List(ctx context.Context, p sessionstate.ListParams) ([]sessionstate.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory state store: list: %w", err)
	}
	s.mu.Lock()
	entries := maps.Clone(s.entries)
	s.mu.Unlock()
	var out []sessionstate.Entry
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		if p.After != "" && id <= p.After {
			continue
		}
		if p.Limit > 0 && len(out) >= p.Limit {
			break
		}
		st := &sequencer.State{}
		if err := st.UnmarshalBinary(entries[id].blob); err != nil {
			return nil, fmt.Errorf("memory state store: list: session %q: %w", id, err)
		}
		if p.Filter.Match(st) {
			out = append(out, sessionstate.Entry{SessionID: id, State: st, Version: entries[id].version})
		}
	}
	return out, nil
}
