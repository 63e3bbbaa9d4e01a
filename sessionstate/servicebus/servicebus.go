package servicebus

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// StateAccessor reads and writes a locked session's state. The Service Bus adapter's sessions and
// the fake broker's sessions implement it; the session passed in Load/Save/DeleteParams must.
type StateAccessor interface {
	// GetState returns the session state; nil or empty when none is set.
	GetState(ctx context.Context) ([]byte, error)
	// SetState replaces the session state; nil clears it.
	SetState(ctx context.Context, state []byte) error
}

// VersionKeeper is a StateAccessor whose session never regains a lock it lost: once a call
// showed the lock gone, every later call fails (sbadapter's sessions; see sbadapter, "Lock
// tenure"). Through such a session the store remembers the version it last read or wrote and
// skips the read before each write: while the session holds its lock nobody else writes the
// state, and once it lost it the write fails. The session keeps the version so that it goes
// with the session.
type VersionKeeper interface {
	StateAccessor
	// KnownStateVersion returns the version the store noted last (ok false: none).
	KnownStateVersion() (version int64, ok bool)
	// NoteStateVersion records the stored version; ok false forgets it.
	NoteStateVersion(version int64, ok bool)
}

// DefaultMaxStateSize is the maximum message size of a Standard tier entity (256 KiB).
const DefaultMaxStateSize = 256 * 1024

const formatV1 = 0x01

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// MaxStateSize is the entity's maximum message size in bytes, which bounds the session state
	// (default DefaultMaxStateSize; Premium entities allow up to 100 MiB).
	MaxStateSize int
}

// Store is a sequencer.StateStore in the Service Bus session state. Safe for concurrent use.
type Store struct {
	maxSize int

	mu    sync.Mutex
	locks map[string]*sessionLock // held while a Save or Delete of that session runs
}

// sessionLock serialises the read-compare-write of one session; refs counts its users so the
// entry is dropped when the last one leaves.
type sessionLock struct {
	mu   sync.Mutex
	refs int
}

var _ sequencer.SessionBoundStore = (*Store)(nil)

// WritesThroughSession implements sequencer.SessionBoundStore: the state is read and written
// through the locked session, so every call fails once the lock is lost (the adapter's sessions
// make sure of it; see sbadapter, "Lock tenure").
func (s *Store) WritesThroughSession() bool { return true }

// New returns a Store. A negative MaxStateSize is a programmer error and panics.
func New(cfg *Config) *Store {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.MaxStateSize < 0 {
		panic("servicebus state store: Config.MaxStateSize must not be negative")
	}
	return &Store{maxSize: cmp.Or(cfg.MaxStateSize, DefaultMaxStateSize), locks: map[string]*sessionLock{}}
}

// lock takes the lock of session id and returns its release.
func (s *Store) lock(id string) func() {
	s.mu.Lock()
	l, ok := s.locks[id]
	if !ok {
		l = &sessionLock{}
		s.locks[id] = l
	}
	l.refs++
	s.mu.Unlock()

	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
}

// accessor returns the session's state accessor. It also refuses an ended ctx up front, so the
// store behaves the same whether or not the accessor honours ctx.
func accessor(ctx context.Context, op string, sess sequencer.Session) (StateAccessor, error) {
	if sess == nil {
		return nil, errors.New("servicebus state store: no session given")
	}
	a, ok := sess.(StateAccessor)
	if !ok {
		return nil, fmt.Errorf("servicebus state store: session %q (%T) has no GetState/SetState", sess.ID(), sess)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("servicebus state store: %s session %q: %w", op, sess.ID(), err)
	}
	return a, nil
}

// Load implements sequencer.StateStore.
func (s *Store) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	a, err := accessor(ctx, "load", p.Session)
	if err != nil {
		return nil, 0, err
	}
	blob, err := a.GetState(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("servicebus state store: load session %q: %w", p.Session.ID(), err)
	}
	st, v, err := decode(blob)
	if err != nil {
		return nil, 0, fmt.Errorf("servicebus state store: load session %q: %w", p.Session.ID(), err)
	}
	if k, ok := a.(VersionKeeper); ok {
		k.NoteStateVersion(v, true)
	}
	return st, v, nil
}

// Save implements sequencer.StateStore.
func (s *Store) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	a, err := accessor(ctx, "save", p.Session)
	if err != nil {
		return 0, err
	}
	id := p.Session.ID()
	body, err := p.State.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("servicebus state store: save session %q: %w", id, err)
	}

	defer s.lock(id)()
	cur, err := s.storedVersion(ctx, a)
	if err != nil {
		return 0, fmt.Errorf("servicebus state store: save session %q: %w", id, err)
	}
	if cur != p.ExpectedVersion {
		return 0, fmt.Errorf("servicebus state store: save session %q: expected version %d, stored %d: %w",
			id, p.ExpectedVersion, cur, sequencer.ErrVersionConflict)
	}
	next := cur + 1
	if cur == 0 {
		// A fresh random start: versions from before a Delete never match again.
		next = rand.Int64N(1<<62) + 1
	}
	blob := binary.AppendUvarint([]byte{formatV1}, uint64(next))
	blob = append(blob, body...)
	if len(blob) > s.maxSize {
		return 0, fmt.Errorf("servicebus state store: save session %q: encoded state is %d bytes (%d deferred), the entity allows %d: %w",
			id, len(blob), len(p.State.Deferred), s.maxSize, sequencer.ErrStateTooLarge)
	}
	if err := s.write(ctx, a, blob, next); err != nil {
		return 0, fmt.Errorf("servicebus state store: save session %q: %w", id, err)
	}
	return next, nil
}

// Delete implements sequencer.StateStore: it clears the session state.
func (s *Store) Delete(ctx context.Context, p sequencer.DeleteParams) error {
	a, err := accessor(ctx, "delete", p.Session)
	if err != nil {
		return err
	}
	id := p.Session.ID()
	defer s.lock(id)()
	cur, err := s.storedVersion(ctx, a)
	if err != nil {
		return fmt.Errorf("servicebus state store: delete session %q: %w", id, err)
	}
	if cur == 0 {
		return nil
	}
	if cur != p.ExpectedVersion {
		return fmt.Errorf("servicebus state store: delete session %q: expected version %d, stored %d: %w",
			id, p.ExpectedVersion, cur, sequencer.ErrVersionConflict)
	}
	if err := s.write(ctx, a, nil, 0); err != nil {
		return fmt.Errorf("servicebus state store: delete session %q: %w", id, err)
	}
	return nil
}

// storedVersion returns the stored version: the one a VersionKeeper noted, or else read from
// the session. Another accessor is read on every Save and Delete, never cached: its session may
// lose its lock and get it back without noticing (the SDK re-locks a session whose lock went
// with a dropped connection on a later call when its retries are on), so another worker may have
// written the state while the same session object seemed to hold it all along.
func (s *Store) storedVersion(ctx context.Context, a StateAccessor) (int64, error) {
	k, keeps := a.(VersionKeeper)
	if keeps {
		if v, ok := k.KnownStateVersion(); ok {
			return v, nil
		}
	}
	blob, err := a.GetState(ctx)
	if err != nil {
		return 0, err
	}
	v, _, err := envelope(blob)
	if err == nil && keeps {
		k.NoteStateVersion(v, true)
	}
	return v, err
}

// write sets the session state to blob, whose version is v (0: none), and notes v with a
// VersionKeeper. A failed write may or may not have reached the broker: the version is
// forgotten, and the next write reads it again.
func (s *Store) write(ctx context.Context, a StateAccessor, blob []byte, v int64) error {
	k, keeps := a.(VersionKeeper)
	if err := a.SetState(ctx, blob); err != nil {
		if keeps {
			k.NoteStateVersion(0, false)
		}
		return err
	}
	if keeps {
		k.NoteStateVersion(v, true)
	}
	return nil
}

func envelope(blob []byte) (version int64, body []byte, err error) {
	if len(blob) == 0 {
		return 0, nil, nil
	}
	if blob[0] != formatV1 {
		return 0, nil, fmt.Errorf("session state has unknown format 0x%02x (not written by seqbus?)", blob[0])
	}
	v, n := binary.Uvarint(blob[1:])
	if n <= 0 || v == 0 || v >= 1<<63-1 { // MaxInt64 is refused so that +1 cannot overflow
		return 0, nil, errors.New("session state has a corrupt version header")
	}
	return int64(v), blob[1+n:], nil
}

func decode(blob []byte) (*sequencer.State, int64, error) {
	v, body, err := envelope(blob)
	if err != nil {
		return nil, 0, err
	}
	if v == 0 {
		return sequencer.NewState(), 0, nil
	}
	st := &sequencer.State{}
	if err := st.UnmarshalBinary(body); err != nil {
		return nil, 0, fmt.Errorf("decoding session state: %w", err)
	}
	return st, v, nil
}
