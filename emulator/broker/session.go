package broker

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// session is the broker's record of one session of a session entity. It exists while it
// has messages, state or a lock.
type session struct {
	id           string
	avail        seqHeap
	count        int // messages in any state
	state        []byte
	stateUpdated time.Time
	lock         *SessionLock
	// readyIdx is the session's index in its entity's ready heap, -1 when
	// it is not there (locked, or no available message).
	readyIdx int
}

// SessionLock is an exclusive lock on one session of a session entity. Its methods fail
// with ErrSessionLockLost once it has expired or been released.
type SessionLock struct {
	e     *Entity
	s     *session
	id    string
	owner string

	lockedUntil time.Time // guarded by the broker's mutex
	timer       clock.Timer
	held        bool
	lost        chan struct{}
}

func (e *Entity) sessionLocked(id string) *session {
	ss := e.sessions[id]
	if ss == nil {
		ss = &session{id: id, readyIdx: -1}
		e.sessions[id] = ss
		e.index.added(ss)
	}
	return ss
}

func (e *Entity) maybeDropSessionLocked(ss *session) {
	if ss.count == 0 && ss.state == nil && ss.lock == nil && e.sessions[ss.id] == ss {
		delete(e.sessions, ss.id)
		e.index.removed(ss)
	}
}

// AcceptSession locks a session for owner (a label, e.g. the link name, kept for logs).
// With a sessionID it locks that session (sessions exist implicitly, so an empty or
// unknown one can be locked) or fails at once with ErrSessionCannotBeLocked if another
// holder has it. With sessionID "" it locks the next available session: one with an
// active message and no holder, the one whose first available message is oldest,
// waiting until one appears; when ctx ends first it fails with ErrTimeout. Sessions with
// only deferred messages are not offered. ErrNotAllowed on a non-session entity.
func (e *Entity) AcceptSession(ctx context.Context, sessionID, owner string) (*SessionLock, error) {
	return e.acceptSession(ctx, sessionID, sessionID == "", owner)
}

// AcceptNamedSession locks the session with the given id, even the empty id "", which
// AcceptSession takes to mean "next available".
func (e *Entity) AcceptNamedSession(sessionID, owner string) (*SessionLock, error) {
	return e.acceptSession(context.Background(), sessionID, false, owner)
}

func (e *Entity) acceptSession(ctx context.Context, sessionID string, next bool, owner string) (*SessionLock, error) {
	for {
		l, wake, err := e.acceptOnce(sessionID, next, owner)
		if err != nil || l != nil {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("accept next session on %q: %w: %w", e.path, ErrTimeout, ctx.Err())
		case <-wake:
		}
	}
}

// acceptOnce locks a session if it can, or returns the channel to wait on.
func (e *Entity) acceptOnce(sessionID string, next bool, owner string) (*SessionLock, <-chan struct{}, error) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkLocked(); err != nil {
		return nil, nil, fmt.Errorf("accept session: %w", err)
	}
	if e.sessions == nil {
		return nil, nil, fmt.Errorf("accept session on %q: entity is not session-enabled: %w", e.path, ErrNotAllowed)
	}
	if !e.props.canReceive() {
		return nil, nil, fmt.Errorf("accept session on %q (status %s): %w", e.path, e.props.Status, ErrEntityDisabled)
	}
	if !next {
		ss := e.sessionLocked(sessionID)
		if ss.lock != nil {
			return nil, nil, fmt.Errorf("accept session %q on %q: %w", sessionID, e.path, ErrSessionCannotBeLocked)
		}
		return e.lockSessionLocked(ss, owner), nil, nil
	}
	if best := e.ready.min(); best != nil {
		return e.lockSessionLocked(best, owner), nil, nil
	}
	return nil, e.wake, nil
}

// TryAcceptNextSession locks the next available session for owner, as
// AcceptSession with no session id does, without waiting: it returns nil and
// no error when no session is available now.
func (e *Entity) TryAcceptNextSession(owner string) (*SessionLock, error) {
	l, _, err := e.acceptOnce("", true, owner)
	return l, err
}

// sessionChangedLocked keeps ss's place in the ready heap (the unlocked
// sessions with an available message, oldest first message first, which
// accept-next takes from) after its lock or its available messages changed.
func (e *Entity) sessionChangedLocked(ss *session) {
	ready := ss.lock == nil && len(ss.avail) > 0 && e.sessions[ss.id] == ss
	switch {
	case ready && ss.readyIdx >= 0:
		heap.Fix(&e.ready, ss.readyIdx)
	case ready:
		heap.Push(&e.ready, ss)
	case ss.readyIdx >= 0:
		heap.Remove(&e.ready, ss.readyIdx)
	}
}

func (e *Entity) lockSessionLocked(ss *session, owner string) *SessionLock {
	l := &SessionLock{e: e, s: ss, id: ss.id, owner: owner, held: true, lost: make(chan struct{})}
	ss.lock = l
	e.sessionChangedLocked(ss)
	l.lockedUntil = e.b.clk.Now().Add(e.props.LockDuration)
	l.armLocked(e.props.LockDuration)
	e.b.log.Debug("broker: session locked", slog.String("entity", e.path), slog.String("session", ss.id),
		slog.String("owner", owner))
	return l
}

func (l *SessionLock) armLocked(d time.Duration) {
	if l.timer != nil {
		l.timer.Stop()
	}
	until := l.lockedUntil
	l.timer = l.e.b.clk.AfterFunc(d, func() {
		l.e.b.mu.Lock()
		defer l.e.b.mu.Unlock()
		if l.held && l.lockedUntil.Equal(until) {
			l.e.b.log.Debug("broker: session lock expired", slog.String("entity", l.e.path), slog.String("session", l.id))
			l.endLocked(true)
		}
	})
}

func (l *SessionLock) heldLocked() bool {
	return l.held && !l.e.deleted && !l.e.b.closed
}

// endLocked ends the lock: messages locked under it return to the session, with their delivery
// count incremented when the lock expired (expired), the session becomes available to others,
// and Lost is closed. Service Bus counts a delivery of a session's message when the session
// lock expires, not when the receiver closes the session (see "Impact of delivery count" in the
// Service Bus message sessions documentation).
func (l *SessionLock) endLocked(expired bool) {
	if !l.held {
		return
	}
	e := l.e
	var locked []*stored
	for _, s := range e.locks {
		if s.sessLock == l {
			locked = append(locked, s)
		}
	}
	slices.SortFunc(locked, func(a, b *stored) int { return int(a.seq - b.seq) })
	l.loseLocked()
	for _, s := range locked {
		e.returnLocked(s, expired, nil)
	}
	e.maybeDropSessionLocked(l.s)
	e.signalLocked()
}

// loseLocked marks the lock lost and frees the session, without touching messages.
func (l *SessionLock) loseLocked() {
	if !l.held {
		return
	}
	l.held = false
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.s.lock == l {
		l.s.lock = nil
		l.e.sessionChangedLocked(l.s)
	}
	close(l.lost)
}

// ID returns the session id.
func (l *SessionLock) ID() string { return l.id }

// Owner returns the owner given to AcceptSession.
func (l *SessionLock) Owner() string { return l.owner }

// Entity returns the entity the session belongs to.
func (l *SessionLock) Entity() *Entity { return l.e }

// LockedUntil returns when the lock expires unless renewed.
func (l *SessionLock) LockedUntil() time.Time {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	return l.lockedUntil
}

// Lost returns a channel closed when the lock ends: expiry, Release, entity deletion or
// broker close. The link layer detaches the session's link with
// com.microsoft:session-lock-lost when it closes without a Release.
func (l *SessionLock) Lost() <-chan struct{} { return l.lost }

// Held reports whether the lock is still held.
func (l *SessionLock) Held() bool {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	return l.heldLocked()
}

func (l *SessionLock) checkLocked(op string) error {
	if !l.heldLocked() {
		return fmt.Errorf("%s for session %q on %q: %w", op, l.id, l.e.path, ErrSessionLockLost)
	}
	return nil
}

// Renew extends the lock by the entity's LockDuration and returns the new expiry.
// Messages locked under the session follow it.
func (l *SessionLock) Renew() (time.Time, error) {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	if err := l.checkLocked("renew session lock"); err != nil {
		return time.Time{}, err
	}
	d := l.e.props.LockDuration
	l.lockedUntil = l.e.b.clk.Now().Add(d)
	l.armLocked(d)
	for _, s := range l.e.locks {
		if s.sessLock == l {
			s.lockedUntil = l.lockedUntil
		}
	}
	return l.lockedUntil, nil
}

// Release gives the session up. Messages still locked under it return to the session with
// their delivery count unchanged. Releasing twice is a no-op.
func (l *SessionLock) Release() {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	l.endLocked(false)
}

// State returns the session state (nil when none is set).
func (l *SessionLock) State() ([]byte, error) {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	if err := l.checkLocked("get session state"); err != nil {
		return nil, err
	}
	return slices.Clone(l.s.state), nil
}

// SetState stores the session state; nil or empty clears it. The state is kept while
// the session has no messages, until cleared.
func (l *SessionLock) SetState(state []byte) error {
	l.e.b.mu.Lock()
	defer l.e.b.mu.Unlock()
	if err := l.checkLocked("set session state"); err != nil {
		return err
	}
	var st []byte
	if len(state) > 0 {
		st = slices.Clone(state)
	}
	l.e.index.setState(l.s, st, l.e.b.clk.Now())
	return nil
}

// ExpireSessionLock is a fault hook: it expires the current lock on a session now, as
// if its time ran out. ErrSessionLockLost if the session is not locked.
func (e *Entity) ExpireSessionLock(sessionID string) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkLocked(); err != nil {
		return fmt.Errorf("expire session lock: %w", err)
	}
	ss := e.sessions[sessionID]
	if ss == nil || ss.lock == nil {
		return fmt.Errorf("expire session lock %q on %q: %w", sessionID, e.path, ErrSessionLockLost)
	}
	ss.lock.endLocked(true)
	return nil
}

// listAllSessions is the last-updated-time the SDK sends to mean "every session with
// messages or state" (10000-01-01T00:00:00Z).
var listAllSessions = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// ListSessions returns session ids ordered by id, after skipping skip and at most top
// (top <= 0: all). With lastUpdated zero or at/after year 9999 (the SDK's default
// 10000-01-01) it lists sessions that have messages or state; otherwise sessions whose
// state was updated after lastUpdated.
func (e *Entity) ListSessions(lastUpdated time.Time, skip, top int) ([]string, error) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkLocked(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	if e.sessions == nil {
		return nil, fmt.Errorf("list sessions on %q: entity is not session-enabled: %w", e.path, ErrNotAllowed)
	}
	if lastUpdated.IsZero() || !lastUpdated.Before(listAllSessions) {
		return e.index.list(time.Time{}, func(ss *session) bool { return ss.count > 0 || ss.state != nil }, skip, top), nil
	}
	return e.index.list(lastUpdated, func(ss *session) bool {
		return ss.state != nil && ss.stateUpdated.After(lastUpdated)
	}, skip, top), nil
}
