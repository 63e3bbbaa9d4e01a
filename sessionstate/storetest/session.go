package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Session is a locked session as far as state stores care: an id and, like a Service Bus session,
// a state blob read and written with GetState/SetState. GetState takes about a millisecond, like a
// round trip, so that read-then-write races in a store show up in tests. Message operations are
// not supported and return an error wrapping errors.ErrUnsupported. Safe for concurrent use.
type Session struct {
	id string

	mu    sync.Mutex
	state []byte
	gets  int
	sets  int
	// FailSetState, when set, is returned by SetState (which then stores nothing).
	failSetState error
}

var _ sequencer.Session = (*Session)(nil)

// NewSession returns a Session with the given id and no state.
func NewSession(id string) *Session { return &Session{id: id} }

// ID implements sequencer.Session.
func (s *Session) ID() string { return s.id }

// LockedUntil implements sequencer.Session: the lock never expires.
func (s *Session) LockedUntil() time.Time { return time.Now().Add(time.Hour) }

// GetState returns a copy of the session state (nil when none is set).
func (s *Session) GetState(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storetest session %q: get state: %w", s.id, err)
	}
	s.mu.Lock()
	state := slices.Clone(s.state)
	s.gets++
	s.mu.Unlock()
	// A real session answers over the network: let other goroutines run before the caller
	// acts on what it read, so read-then-write races show up in tests.
	time.Sleep(time.Millisecond)
	return state, nil
}

// SetState replaces the session state; nil or empty clears it.
func (s *Session) SetState(ctx context.Context, state []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storetest session %q: set state: %w", s.id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSetState != nil {
		return s.failSetState
	}
	s.sets++
	if len(state) == 0 {
		s.state = nil
		return nil
	}
	s.state = slices.Clone(state)
	return nil
}

// FailSetState makes every later SetState return err (nil restores normal behaviour).
func (s *Session) FailSetState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failSetState = err
}

// GetStateCalls returns how often GetState was called.
func (s *Session) GetStateCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// SetStateCalls returns how often SetState succeeded.
func (s *Session) SetStateCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sets
}

func (s *Session) unsupported(op string) error {
	return fmt.Errorf("storetest session %q: %s: %w", s.id, op, errors.ErrUnsupported)
}

// Receive implements sequencer.Session (unsupported).
func (s *Session) Receive(context.Context, int) ([]*sequencer.Message, error) {
	return nil, s.unsupported("receive")
}

// ReceiveDeferred implements sequencer.Session (unsupported).
func (s *Session) ReceiveDeferred(context.Context, []int64) ([]*sequencer.Message, error) {
	return nil, s.unsupported("receive deferred")
}

// Complete implements sequencer.Session (unsupported).
func (s *Session) Complete(context.Context, *sequencer.Message) error {
	return s.unsupported("complete")
}

// Defer implements sequencer.Session (unsupported).
func (s *Session) Defer(context.Context, *sequencer.Message) error { return s.unsupported("defer") }

// DeadLetter implements sequencer.Session (unsupported).
func (s *Session) DeadLetter(context.Context, *sequencer.Message, sequencer.DeadLetterParams) error {
	return s.unsupported("dead-letter")
}

// Abandon implements sequencer.Session (unsupported).
func (s *Session) Abandon(context.Context, *sequencer.Message) error { return s.unsupported("abandon") }

// RenewLock implements sequencer.Session: it extends the lock by an hour.
func (s *Session) RenewLock(context.Context) (time.Time, error) { return s.LockedUntil(), nil }

// Close implements sequencer.Session; it does nothing.
func (s *Session) Close(context.Context) error { return nil }
