package sequencertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Store is an in-memory sequencer.StateStore keyed by session id. It keeps states in their
// binary encoding, so every Save and Load goes through the codec. Use Client to get a view bound
// to a Process for fault injection.
type Store struct {
	mu    sync.Mutex
	data  map[string]storeEntry
	calls map[string]int
	// held and dead are what HeldStoreClient holds: early messages by session, and the dead
	// letters of held messages.
	held map[string]heldSession
	dead []*sequencer.HeldDeadLetter
}

type storeEntry struct {
	b   []byte
	ver int64
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{data: map[string]storeEntry{}, calls: map[string]int{}, held: map[string]heldSession{}}
}

// Client returns a view of the store whose calls run in proc (hooks, crashes).
func (s *Store) Client(proc *Process) *StoreClient {
	if proc == nil {
		proc = &Process{}
	}
	return &StoreClient{s: s, proc: proc}
}

// Get returns the decoded state of a session and its version (nil, 0 when none is stored).
func (s *Store) Get(sessionID string) (*sequencer.State, int64) {
	s.mu.Lock()
	e, ok := s.data[sessionID]
	s.mu.Unlock()
	if !ok {
		return nil, 0
	}
	st := &sequencer.State{}
	if err := st.UnmarshalBinary(e.b); err != nil {
		panic(fmt.Sprintf("sequencertest: stored state of %q does not decode: %v", sessionID, err))
	}
	return st, e.ver
}

// Put stores a state for a session unconditionally (tests use it to set up a situation).
func (s *Store) Put(sessionID string, st *sequencer.State) {
	b, err := st.MarshalBinary()
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[sessionID] = storeEntry{b: b, ver: s.data[sessionID].ver + 1}
}

// SessionIDs returns the ids of the sessions with a stored state.
func (s *Store) SessionIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.data))
	for id := range s.data {
		ids = append(ids, id)
	}
	return ids
}

// Calls returns how often each store operation was called.
func (s *Store) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// StoreClient is a Store seen from one Process. It implements sequencer.StateStore.
type StoreClient struct {
	s    *Store
	proc *Process
	// bound: every call first checks that the session (a fake broker Session) still holds its
	// lock, as a store kept in the session itself does (sequencer.SessionBoundStore).
	bound bool
}

var _ sequencer.SessionBoundStore = (*StoreClient)(nil)

// BoundClient is Client for a store kept in the session itself, like the Service Bus session
// state: each call fails with sequencer.ErrLockLost once the fake broker session has lost its
// lock, and the engine knows it (WritesThroughSession).
func (s *Store) BoundClient(proc *Process) *StoreClient {
	c := s.Client(proc)
	c.bound = true
	return c
}

// WritesThroughSession implements sequencer.SessionBoundStore.
func (c *StoreClient) WritesThroughSession() bool { return c.bound }

func (c *StoreClient) op(op string, sess sequencer.Session, fn func() error) error {
	id := sess.ID()
	if err := c.proc.hook(Before, op, id, nil); err != nil {
		return err
	}
	if h, ok := sess.(*Session); ok && c.bound {
		if err := h.Held(); err != nil {
			return fmt.Errorf("fake store: %s: %w", op, err)
		}
	}
	c.s.mu.Lock()
	c.s.calls[op]++
	err := fn()
	c.s.mu.Unlock()
	if err != nil {
		return err
	}
	return c.proc.hook(After, op, id, nil)
}

// Load returns the stored state or NewState() with version 0.
func (c *StoreClient) Load(_ context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	var st *sequencer.State
	var ver int64
	err := c.op("load", p.Session, func() error {
		e, ok := c.s.data[p.Session.ID()]
		if !ok {
			st = sequencer.NewState()
			return nil
		}
		st = &sequencer.State{}
		if err := st.UnmarshalBinary(e.b); err != nil {
			return fmt.Errorf("fake store: decoding state of %q: %w", p.Session.ID(), err)
		}
		ver = e.ver
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return st, ver, nil
}

// Save stores the state if the version matches.
func (c *StoreClient) Save(_ context.Context, p sequencer.SaveParams) (int64, error) {
	var ver int64
	err := c.op("save", p.Session, func() error {
		var err error
		ver, err = c.s.saveLocked(p)
		return err
	})
	if err != nil {
		return 0, err
	}
	return ver, nil
}

func (s *Store) saveLocked(p sequencer.SaveParams) (int64, error) {
	id := p.Session.ID()
	cur := s.data[id].ver
	if cur != p.ExpectedVersion {
		return 0, fmt.Errorf("fake store: session %q at version %d, expected %d: %w", id, cur, p.ExpectedVersion, sequencer.ErrVersionConflict)
	}
	b, err := p.State.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("fake store: encoding state of %q: %w", id, err)
	}
	s.data[id] = storeEntry{b: b, ver: cur + 1}
	s.heldGoneLocked(id, p.State.Next)
	return cur + 1, nil
}

// Delete removes the state if the version matches; a missing state is not an error.
func (c *StoreClient) Delete(_ context.Context, p sequencer.DeleteParams) error {
	return c.op("delete", p.Session, func() error {
		id := p.Session.ID()
		e, ok := c.s.data[id]
		if !ok {
			return nil
		}
		if e.ver != p.ExpectedVersion {
			return fmt.Errorf("fake store: delete %q at version %d, expected %d: %w", id, e.ver, p.ExpectedVersion, sequencer.ErrVersionConflict)
		}
		delete(c.s.data, id)
		delete(c.s.held, id)
		return nil
	})
}

// AtomicStoreClient is a StoreClient that also implements sequencer.AtomicStore: fn runs first
// and the state is saved only if it succeeds (a transaction whose only effect besides the state
// is whatever fn records).
type AtomicStoreClient struct{ *StoreClient }

var _ sequencer.AtomicStore = AtomicStoreClient{}

// Atomic returns the atomic view of the client.
func (c *StoreClient) Atomic() AtomicStoreClient { return AtomicStoreClient{c} }

// SaveWith runs fn, then saves; an error from fn is returned unchanged and nothing is saved.
func (a AtomicStoreClient) SaveWith(ctx context.Context, p sequencer.SaveParams, fn func(ctx context.Context) error) (int64, error) {
	if err := fn(ctx); err != nil {
		return 0, err
	}
	return a.Save(ctx, p)
}
