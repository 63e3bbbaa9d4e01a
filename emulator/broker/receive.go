package broker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/go-amqp"
)

// ReceiveMode is how messages are handed to a receiver.
type ReceiveMode int

// Receive modes.
const (
	// PeekLock locks each delivered message until it is settled or the lock expires.
	PeekLock ReceiveMode = iota
	// ReceiveAndDelete removes each message as it is delivered.
	ReceiveAndDelete
)

// ReceiveOptions are the options of Receive and ReceiveDeferred.
type ReceiveOptions struct {
	Mode ReceiveMode
	// Session is the receiver's session lock: required on session entities, nil otherwise.
	Session *SessionLock
}

// Delivery is one message handed to a receiver.
type Delivery struct {
	// Message is the receiver's own copy, with the broker's annotations set:
	// x-opt-sequence-number (int64), x-opt-enqueued-time (time.Time),
	// x-opt-message-state (int64), x-opt-locked-until (time.Time, peek-lock only), and on
	// peek-lock also the delivery annotation x-opt-lock-token (amqp.UUID).
	// Header.DeliveryCount is the number of earlier deliveries that ended unsettled.
	Message *amqp.Message
	// LockToken identifies the lock (RFC 4122 byte order); zero in ReceiveAndDelete.
	LockToken amqp.UUID
	// LockedUntil is when the lock expires; zero in ReceiveAndDelete.
	LockedUntil    time.Time
	SequenceNumber int64
}

func (e *Entity) checkReceiverLocked(o ReceiveOptions) error {
	if err := e.checkLocked(); err != nil {
		return err
	}
	if e.kind == KindTopic {
		return fmt.Errorf("receive from topic %q: %w", e.path, ErrNotAllowed)
	}
	if !e.props.canReceive() {
		return fmt.Errorf("receive from %q (status %s): %w", e.path, e.props.Status, ErrEntityDisabled)
	}
	if e.sessions != nil && o.Session == nil {
		return fmt.Errorf("%q requires a session receiver: %w", e.path, ErrNotAllowed)
	}
	if e.sessions == nil && o.Session != nil {
		return fmt.Errorf("%q is not session-enabled: %w", e.path, ErrNotAllowed)
	}
	if o.Session != nil {
		if o.Session.e != e {
			return fmt.Errorf("session lock of %q used on %q: %w", o.Session.e.path, e.path, ErrNotAllowed)
		}
		if !o.Session.heldLocked() {
			return fmt.Errorf("session %q on %q: %w", o.Session.id, e.path, ErrSessionLockLost)
		}
	}
	if o.Mode != PeekLock && o.Mode != ReceiveAndDelete {
		return fmt.Errorf("receive from %q: unknown mode %d: %w", e.path, o.Mode, ErrNotAllowed)
	}
	return nil
}

// Receive returns up to max available messages in sequence-number order, blocking until
// at least one is available or ctx ends (then it returns ctx's error). On a session
// entity it reads only the locked session and fails with ErrSessionLockLost once that
// lock is lost.
func (e *Entity) Receive(ctx context.Context, max int, o ReceiveOptions) ([]*Delivery, error) {
	if max <= 0 {
		return nil, fmt.Errorf("receive from %q: max %d must be positive: %w", e.path, max, ErrNotAllowed)
	}
	for {
		out, wake, lost, err := e.receiveOnce(max, o)
		if err != nil || len(out) > 0 {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receive from %q: %w", e.path, ctx.Err())
		case <-wake:
		case <-lost:
		}
	}
}

// receiveOnce takes what is available, or returns the channels to wait on.
func (e *Entity) receiveOnce(max int, o ReceiveOptions) (out []*Delivery, wake, lost <-chan struct{}, err error) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkReceiverLocked(o); err != nil {
		return nil, nil, nil, err
	}
	if out := e.takeLocked(max, o); len(out) > 0 {
		return out, nil, nil, nil
	}
	if o.Session != nil {
		lost = o.Session.lost
	}
	return nil, e.wake, lost, nil
}

// TryReceive is Receive without waiting: it returns at once, possibly with no messages.
func (e *Entity) TryReceive(max int, o ReceiveOptions) ([]*Delivery, error) {
	if max <= 0 {
		return nil, fmt.Errorf("receive from %q: max %d must be positive: %w", e.path, max, ErrNotAllowed)
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkReceiverLocked(o); err != nil {
		return nil, err
	}
	return e.takeLocked(max, o), nil
}

// Available returns a channel that is closed when a message or session may have become
// available on the entity (or the entity went away). Take a new channel after each wake.
func (e *Entity) Available() <-chan struct{} {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	return e.wake
}

func (e *Entity) takeLocked(max int, o ReceiveOptions) []*Delivery {
	h := &e.avail
	if o.Session != nil {
		h = &o.Session.s.avail
	}
	now := e.b.clk.Now()
	var out []*Delivery
	for len(out) < max {
		s := h.popMin()
		if s == nil {
			break
		}
		if s.expired(now) {
			e.expireLocked(s)
			continue
		}
		out = append(out, e.deliverLocked(s, o, now))
	}
	if len(out) > 0 {
		e.accessedAt = now
	}
	return out
}

// deliverLocked hands s to a receiver: locks it (peek-lock) or removes it.
func (e *Entity) deliverLocked(s *stored, o ReceiveOptions, now time.Time) *Delivery {
	if o.Mode == ReceiveAndDelete {
		d := &Delivery{Message: e.outgoingLocked(s, now), SequenceNumber: s.seq}
		e.removeLocked(s)
		return d
	}
	s.state = stateLocked
	s.token = newToken()
	e.locks[s.token] = s
	if o.Session != nil {
		// Message locks inside a session last as long as the session lock.
		s.sessLock = o.Session
		s.lockedUntil = o.Session.lockedUntil
	} else {
		s.lockedUntil = now.Add(e.props.LockDuration)
		e.armLockTimerLocked(s, e.props.LockDuration)
	}
	m := e.outgoingLocked(s, now)
	if m.DeliveryAnnotations == nil {
		m.DeliveryAnnotations = amqp.Annotations{}
	}
	m.DeliveryAnnotations[DeliveryAnnotationLockToken] = s.token
	return &Delivery{Message: m, LockToken: s.token, LockedUntil: s.lockedUntil, SequenceNumber: s.seq}
}

func (e *Entity) armLockTimerLocked(s *stored, d time.Duration) {
	if s.lockTimer != nil {
		s.lockTimer.Stop()
	}
	tok := s.token
	s.lockTimer = e.b.clk.AfterFunc(d, func() {
		e.b.mu.Lock()
		defer e.b.mu.Unlock()
		if e.alive(s) && s.state == stateLocked && s.token == tok {
			e.lockExpiredLocked(s)
		}
	})
}

// outgoingLocked builds the copy of s a receiver or peeker gets.
func (e *Entity) outgoingLocked(s *stored, now time.Time) *amqp.Message {
	m := cloneMessage(s.msg, false)
	if m.Properties == nil {
		m.Properties = &amqp.MessageProperties{}
	}
	if m.Header == nil {
		m.Header = &amqp.MessageHeader{Priority: 4} // the AMQP defaults
	}
	m.Header.DeliveryCount = s.failed
	setAnnotation(m, AnnotationSequenceNumber, s.seq)
	setAnnotation(m, AnnotationEnqueuedTime, s.enqueuedAt.UTC())
	state := MessageStateActive
	switch {
	case s.state == stateScheduled:
		state = MessageStateScheduled
	case s.deferred:
		state = MessageStateDeferred
	}
	setAnnotation(m, AnnotationMessageState, int64(state))
	if s.state == stateLocked {
		setAnnotation(m, AnnotationLockedUntil, s.lockedUntil.UTC())
	}
	return m
}

// unlockLocked forgets s's lock, if any, without changing its state.
func (e *Entity) unlockLocked(s *stored) {
	if s.token != (lockKey{}) {
		delete(e.locks, s.token)
	}
	if s.lockTimer != nil {
		s.lockTimer.Stop()
		s.lockTimer = nil
	}
	s.token = lockKey{}
	s.lockedUntil = time.Time{}
	s.sessLock = nil
}

// returnLocked ends a lock without settlement. countIt increments the delivery count
// (abandon, lock expiry) and dead-letters at MaxDeliveryCount; released messages are
// not counted.
func (e *Entity) returnLocked(s *stored, countIt bool, props map[string]any) {
	e.unlockLocked(s)
	applyProperties(s.msg, props)
	now := e.b.clk.Now()
	if countIt {
		s.failed++
		if e.dlq != nil && int64(s.failed) >= int64(e.props.MaxDeliveryCount) {
			e.deadLetterLocked(s, ReasonMaxDeliveryCountExceeded,
				fmt.Sprintf("Message could not be consumed after %d delivery attempts.", e.props.MaxDeliveryCount), nil)
			return
		}
	}
	if s.deferred {
		if s.expired(now) {
			e.expireLocked(s)
			return
		}
		s.state = stateDeferred
		return
	}
	if e.forwardsLocked() {
		e.forwardLocked(s, now)
		return
	}
	e.makeAvailableLocked(s, now)
}

func (e *Entity) lockExpiredLocked(s *stored) {
	e.b.log.Debug("broker: message lock expired", slog.String("entity", e.path), slog.Int64("sequence_number", s.seq))
	e.returnLocked(s, true, nil)
}

// lockedLocked finds the message a token locks.
func (e *Entity) lockedLocked(op string, token amqp.UUID) (*stored, error) {
	if err := e.checkLocked(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s := e.locks[token]
	if s == nil || s.state != stateLocked {
		return nil, fmt.Errorf("%s on %q: lock token %x: %w", op, e.path, token[:], ErrLockLost)
	}
	return s, nil
}

// Complete settles a locked message by deleting it.
func (e *Entity) Complete(token amqp.UUID) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("complete", token)
	if err != nil {
		return err
	}
	e.removeLocked(s)
	return nil
}

// Abandon unlocks a message, increments its delivery count (dead-lettering it with
// MaxDeliveryCountExceeded at the limit) and merges props into its application
// properties. An abandoned deferred message stays deferred.
func (e *Entity) Abandon(token amqp.UUID, props map[string]any) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("abandon", token)
	if err != nil {
		return err
	}
	e.returnLocked(s, true, props)
	return nil
}

// Release unlocks a message without counting a delivery (the AMQP released outcome,
// which the SDK sends for messages that arrive after ReceiveMessages returned).
func (e *Entity) Release(token amqp.UUID) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("release", token)
	if err != nil {
		return err
	}
	e.returnLocked(s, false, nil)
	return nil
}

// Defer unlocks a message into the deferred state: it is then reachable only through
// ReceiveDeferred (and Peek). props are merged into its application properties.
func (e *Entity) Defer(token amqp.UUID, props map[string]any) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("defer", token)
	if err != nil {
		return err
	}
	e.unlockLocked(s)
	applyProperties(s.msg, props)
	s.deferred = true
	if s.expired(e.b.clk.Now()) {
		e.expireLocked(s)
		return nil
	}
	s.state = stateDeferred
	return nil
}

// DeadLetter moves a locked message to the dead-letter queue, setting the application
// properties DeadLetterReason and DeadLetterErrorDescription (always, possibly "") and
// the annotation x-opt-deadletter-source, after merging props. ErrNotAllowed on a
// dead-letter queue.
func (e *Entity) DeadLetter(token amqp.UUID, reason, description string, props map[string]any) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("dead-letter", token)
	if err != nil {
		return err
	}
	if e.dlq == nil {
		return fmt.Errorf("dead-letter on %q: %w", e.path, ErrNotAllowed)
	}
	e.deadLetterLocked(s, reason, description, props)
	return nil
}

// RenewLocks extends message locks by the entity's LockDuration and returns the new
// expiry of each, in order. The call is atomic: ErrLockLost if any token is not held.
// Messages locked under a session lock follow that lock: their expiry is the session's.
func (e *Entity) RenewLocks(tokens []amqp.UUID) ([]time.Time, error) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	ss := make([]*stored, len(tokens))
	for i, t := range tokens {
		s, err := e.lockedLocked("renew lock", t)
		if err != nil {
			return nil, err
		}
		ss[i] = s
	}
	now := e.b.clk.Now()
	out := make([]time.Time, len(ss))
	for i, s := range ss {
		if s.sessLock != nil {
			out[i] = s.sessLock.lockedUntil
			continue
		}
		s.lockedUntil = now.Add(e.props.LockDuration)
		e.armLockTimerLocked(s, e.props.LockDuration)
		out[i] = s.lockedUntil
	}
	return out, nil
}

// ReceiveDeferred receives deferred messages by sequence number, in the order asked.
// On session entities only the holder of the message's session lock may do so. The call
// is atomic: ErrMessageNotFound (naming the number) if any number is not a deferred
// message of this entity (or session).
func (e *Entity) ReceiveDeferred(seqs []int64, o ReceiveOptions) ([]*Delivery, error) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkReceiverLocked(o); err != nil {
		return nil, err
	}
	now := e.b.clk.Now()
	ss := make([]*stored, len(seqs))
	for i, n := range seqs {
		s := e.msgs[n]
		if s != nil && s.state == stateDeferred && s.expired(now) {
			e.expireLocked(s)
			s = nil
		}
		if s == nil || s.state != stateDeferred || (o.Session != nil && s.sess != o.Session.s) {
			return nil, fmt.Errorf("receive deferred from %q: sequence number %d: %w", e.path, n, ErrMessageNotFound)
		}
		ss[i] = s
	}
	out := make([]*Delivery, len(ss))
	for i, s := range ss {
		out[i] = e.deliverLocked(s, o, now)
	}
	e.accessedAt = now
	return out, nil
}

// Peek returns up to max messages with sequence numbers >= fromSeq, without locking
// them: active, locked, deferred and scheduled ones (x-opt-message-state tells them
// apart). sessionID, when not "", limits the peek to that session.
func (e *Entity) Peek(fromSeq int64, max int, sessionID string) []*amqp.Message {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.checkLocked() != nil || e.kind == KindTopic || max <= 0 {
		return nil
	}
	now := e.b.clk.Now()
	var out []*amqp.Message
	var expired []*stored
	i, _ := slicesSearch(e.order, fromSeq)
	for ; i < len(e.order) && len(out) < max; i++ {
		s := e.msgs[e.order[i]]
		if s == nil {
			continue // removed
		}
		if sessionID != "" && (s.sess == nil || s.sess.id != sessionID) {
			continue
		}
		if s.state != stateLocked && s.state != stateScheduled && s.expired(now) {
			expired = append(expired, s)
			continue
		}
		out = append(out, e.outgoingLocked(s, now))
	}
	for _, s := range expired {
		e.expireLocked(s)
	}
	return out
}

// ExpireLock is a fault hook: it expires a message lock now, as if its time ran out
// (the message returns with its delivery count incremented).
func (e *Entity) ExpireLock(token amqp.UUID) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	s, err := e.lockedLocked("expire lock", token)
	if err != nil {
		return err
	}
	e.lockExpiredLocked(s)
	return nil
}

// ExpireLock is a fault hook: it expires the message lock with this token on whichever
// entity holds it, as Entity.ExpireLock does. ErrLockLost if no entity holds it.
func (b *Broker) ExpireLock(token amqp.UUID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpenLocked(); err != nil {
		return err
	}
	for _, e := range b.allEntitiesLocked() {
		if s := e.locks[token]; s != nil && s.state == stateLocked {
			e.lockExpiredLocked(s)
			return nil
		}
	}
	return fmt.Errorf("expire lock %x: %w", token[:], ErrLockLost)
}

// allEntitiesLocked lists every entity that can hold messages, dead-letter queues included.
func (b *Broker) allEntitiesLocked() []*Entity {
	var out []*Entity
	add := func(e *Entity) {
		out = append(out, e)
		if e.dlq != nil {
			out = append(out, e.dlq, e.tdlq)
		}
	}
	for _, q := range b.queues {
		add(q)
	}
	for _, t := range b.topics {
		for _, s := range t.subs {
			add(s)
		}
	}
	return out
}
