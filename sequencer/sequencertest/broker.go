package sequencertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sequencer"
)

// BrokerOptions configure a fake Broker.
type BrokerOptions struct {
	// Clock drives lock expiry (default: a new clock.Fake).
	Clock clock.Clock
	// LockDuration is the session lock duration (default 60s).
	LockDuration time.Duration
	// MaxDeliveryCount dead-letters a message released after that many deliveries (default 10).
	MaxDeliveryCount uint32
	// Blocking makes Receive and AcceptNext wait for messages until their ctx ends, as the real
	// service does. When false, an empty Receive returns at once (as if the idle timeout had
	// passed) and AcceptNext returns ErrNoSession at once, which keeps single-goroutine tests fast.
	Blocking bool
	// SwapEvery, when positive, makes every SwapEvery-th receive of two or more messages return
	// its first two in reverse order, as a Service Bus SDK client may see them: the SDK releases
	// a message that lands on the link between two receives while a later one may already wait
	// in the link's buffer, and the broker delivers the released one again after it.
	SwapEvery int
}

// DeadLetter is a message in the fake broker's dead-letter queue.
type DeadLetter struct {
	Message     sequencer.Message
	Reason      string
	Description string
}

// Broker is a faithful in-memory Service Bus session queue: session locks with expiry,
// deferral by broker sequence number, delivery counts with a max delivery count, a dead-letter
// queue, session state, and the accept-next rule (a session whose messages are all deferred is
// not offered). Clients made with NewClient are its processes; a Process can crash.
type Broker struct {
	opts BrokerOptions

	mu       sync.Mutex
	nextSeq  int64
	sessions map[string]*brokerSession
	dlq      []DeadLetter
	changed  chan struct{}
	calls    map[string]int
	receives int // receives of two or more messages, for SwapEvery
}

type brokerSession struct {
	id          string
	msgs        map[int64]*brokerMessage
	holder      *Session
	lockedUntil time.Time
	state       []byte
}

type brokerMessage struct {
	msg      sequencer.Message
	deferred bool
	locked   *Session
}

// NewBroker returns an empty broker.
func NewBroker(opts *BrokerOptions) *Broker {
	var o BrokerOptions
	if opts != nil {
		o = *opts
	}
	o.Clock = cmp.Or[clock.Clock](o.Clock, clock.NewFake(time.Time{}))
	o.LockDuration = cmp.Or(o.LockDuration, 60*time.Second)
	o.MaxDeliveryCount = cmp.Or(o.MaxDeliveryCount, 10)
	return &Broker{opts: o, sessions: map[string]*brokerSession{}, changed: make(chan struct{}), calls: map[string]int{}}
}

// Clock returns the broker's clock.
func (b *Broker) Clock() clock.Clock { return b.opts.Clock }

// Publish enqueues a message for the session with the given application properties and body and
// returns its broker sequence number.
func (b *Broker) Publish(sessionID string, props map[string]any, body []byte) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextSeq++
	s := b.session(sessionID)
	s.msgs[b.nextSeq] = &brokerMessage{msg: sequencer.Message{
		MessageID:      fmt.Sprintf("msg-%d", b.nextSeq),
		SessionID:      sessionID,
		BrokerSequence: b.nextSeq,
		EnqueuedTime:   b.opts.Clock.Now(),
		Properties:     maps.Clone(props),
		Body:           slices.Clone(body),
	}}
	b.notifyLocked()
	return b.nextSeq
}

// PublishSeq publishes a message with the application property "Sequence" set to seq and
// "IsLast" set when last is true (the names of package contract).
func (b *Broker) PublishSeq(sessionID string, seq int64, last bool) int64 {
	props := map[string]any{contract.SequenceProperty: seq}
	if last {
		props[contract.LastProperty] = true
	}
	return b.Publish(sessionID, props, fmt.Appendf(nil, "%s/%d", sessionID, seq))
}

// DeadLetters returns a copy of the dead-letter queue in arrival order.
func (b *Broker) DeadLetters() []DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dlq)
}

// Pending returns the active and deferred messages the broker still holds for the session.
func (b *Broker) Pending(sessionID string) (active, deferred int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[sessionID]; s != nil {
		for _, m := range s.msgs {
			if m.deferred {
				deferred++
			} else {
				active++
			}
		}
	}
	return active, deferred
}

// Len returns the number of messages (active or deferred) the broker holds over all sessions.
func (b *Broker) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sessions {
		n += len(s.msgs)
	}
	return n
}

// SessionIDs returns the ids of the sessions that hold messages, sorted.
func (b *Broker) SessionIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, s := range b.sessions {
		if len(s.msgs) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Calls returns how often each operation was called on the broker (by Call.Op).
func (b *Broker) Calls() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.calls)
}

// ExpireLocks makes every session lock expire now, as if its holder had stopped renewing.
func (b *Broker) ExpireLocks() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		if s.holder != nil {
			b.releaseLocked(s)
		}
	}
}

func (b *Broker) session(id string) *brokerSession {
	s := b.sessions[id]
	if s == nil {
		s = &brokerSession{id: id, msgs: map[int64]*brokerMessage{}}
		b.sessions[id] = s
	}
	return s
}

func (b *Broker) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// expireLocked releases the session's lock if it has expired.
func (b *Broker) expireLocked(s *brokerSession) {
	if s.holder != nil && !b.opts.Clock.Now().Before(s.lockedUntil) {
		b.releaseLocked(s)
	}
}

// releaseLocked drops the session lock: unsettled messages become available again, and those
// delivered MaxDeliveryCount times go to the dead-letter queue.
func (b *Broker) releaseLocked(s *brokerSession) {
	s.holder = nil
	for _, bs := range slices.Sorted(maps.Keys(s.msgs)) {
		m := s.msgs[bs]
		if m.locked != nil {
			b.unlockMessageLocked(s, m)
		}
	}
	b.notifyLocked()
}

func (b *Broker) unlockMessageLocked(s *brokerSession, m *brokerMessage) {
	m.locked = nil
	if m.msg.DeliveryCount >= b.opts.MaxDeliveryCount {
		delete(s.msgs, m.msg.BrokerSequence)
		b.dlq = append(b.dlq, DeadLetter{Message: m.msg, Reason: "MaxDeliveryCountExceeded",
			Description: fmt.Sprintf("delivered %d times", m.msg.DeliveryCount)})
	}
}

// hasActiveLocked reports whether the session holds a message that accept-next may offer.
func hasActive(s *brokerSession) (int64, bool) {
	first := int64(-1)
	for bs, m := range s.msgs {
		if !m.deferred && (first < 0 || bs < first) {
			first = bs
		}
	}
	return first, first >= 0
}

// Client is one process's connection to the broker; it implements sequencer.SessionSource.
type Client struct {
	b    *Broker
	proc *Process
}

var _ sequencer.SessionSource = (*Client)(nil)

// NewClient returns a client running in proc (nil: a process that never crashes by itself).
func (b *Broker) NewClient(proc *Process) *Client {
	if proc == nil {
		proc = &Process{}
	}
	c := &Client{b: b, proc: proc}
	proc.onCrash(c.crashed)
	return c
}

// crashed releases every lock the client holds, as lock expiry would after a crash.
func (c *Client) crashed() {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	for _, s := range c.b.sessions {
		if s.holder != nil && s.holder.c == c {
			c.b.releaseLocked(s)
		}
	}
}

// op runs fn under the broker lock with the process hook before and after it. msgs, when set,
// holds the broker sequences of the messages the call settles or (filled by fn) returns, for the
// hook's Call.BrokerSequences; the callers fill it only when there is a hook, so that the fake
// costs benchmarks of the engine nothing for it.
func (c *Client) op(op, sessionID string, msgs *[]int64, fn func() error) error {
	if err := c.proc.hook(Before, op, sessionID, msgs); err != nil {
		return err
	}
	c.b.mu.Lock()
	c.b.calls[op]++
	err := fn()
	c.b.mu.Unlock()
	if err != nil {
		return err
	}
	return c.proc.hook(After, op, sessionID, msgs)
}

var _ sequencer.CapableSource = (*Client)(nil)

// Capabilities implements sequencer.CapableSource: the fake broker's sessions offer what Service
// Bus sessions do.
func (c *Client) Capabilities() sequencer.Capabilities {
	return sequencer.Capabilities{Deferral: true, Peek: true, SessionState: true, SessionLock: true}
}

// AcceptNext locks the session whose oldest active message is oldest. Sessions holding only
// deferred messages are not offered.
func (c *Client) AcceptNext(ctx context.Context) (sequencer.Session, error) {
	for {
		var got *Session
		var wait chan struct{}
		err := c.op("accept_next", "", nil, func() error {
			b := c.b
			best, bestSeq := (*brokerSession)(nil), int64(0)
			for _, s := range b.sessions {
				b.expireLocked(s)
				if s.holder != nil {
					continue
				}
				if first, ok := hasActive(s); ok && (best == nil || first < bestSeq) {
					best, bestSeq = s, first
				}
			}
			if best != nil {
				got = c.lockLocked(best)
			}
			wait = b.changed
			return nil
		})
		if err != nil {
			return nil, err
		}
		if got != nil {
			return got, nil
		}
		if !c.b.opts.Blocking {
			return nil, sequencer.ErrNoSession
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", sequencer.ErrNoSession, ctx.Err())
		case <-wait:
		}
	}
}

// Accept locks the named session, which may be empty or hold only deferred messages.
func (c *Client) Accept(ctx context.Context, sessionID string) (sequencer.Session, error) {
	var got *Session
	err := c.op("accept", sessionID, nil, func() error {
		s := c.b.session(sessionID)
		c.b.expireLocked(s)
		if s.holder != nil {
			return fmt.Errorf("fake broker: session %q: %w", sessionID, sequencer.ErrSessionLocked)
		}
		got = c.lockLocked(s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

func (c *Client) lockLocked(s *brokerSession) *Session {
	h := &Session{c: c, s: s}
	s.holder = h
	s.lockedUntil = c.b.opts.Clock.Now().Add(c.b.opts.LockDuration)
	return h
}

// Session is a session locked by a Client. It implements sequencer.Session and offers the
// session state methods of the Service Bus SDK.
type Session struct {
	c *Client
	s *brokerSession
}

var _ sequencer.HoldingSession = (*Session)(nil)

// ID returns the session id.
func (h *Session) ID() string { return h.s.id }

// LockedUntil returns the expiry of the session lock.
func (h *Session) LockedUntil() time.Time {
	h.c.b.mu.Lock()
	defer h.c.b.mu.Unlock()
	return h.s.lockedUntil
}

// Held reports, with an error wrapping sequencer.ErrLockLost, when this handle no longer holds
// the session lock.
func (h *Session) Held() error {
	h.c.b.mu.Lock()
	defer h.c.b.mu.Unlock()
	return h.held()
}

// held checks the lock; it must be called with the broker lock held.
func (h *Session) held() error {
	h.c.b.expireLocked(h.s)
	if h.s.holder != h {
		return fmt.Errorf("fake broker: session %q: %w", h.s.id, sequencer.ErrLockLost)
	}
	return nil
}

func (h *Session) deliver(m *brokerMessage) *sequencer.Message {
	m.locked = h
	m.msg.DeliveryCount++
	out := m.msg
	out.Properties = maps.Clone(m.msg.Properties)
	return &out
}

// Receive returns up to max available active messages in broker order.
func (h *Session) Receive(ctx context.Context, max int) ([]*sequencer.Message, error) {
	for {
		var out []*sequencer.Message
		var got []int64 // for the hook
		var wait chan struct{}
		err := h.c.op("receive", h.s.id, &got, func() error {
			if err := h.held(); err != nil {
				return err
			}
			for _, bs := range slices.Sorted(maps.Keys(h.s.msgs)) {
				m := h.s.msgs[bs]
				if len(out) == max {
					break
				}
				if !m.deferred && m.locked == nil {
					out = append(out, h.deliver(m))
					if h.c.proc.Hook != nil {
						got = append(got, bs)
					}
				}
			}
			if n := h.c.b.opts.SwapEvery; n > 0 && len(out) > 1 {
				if h.c.b.receives++; h.c.b.receives%n == 0 {
					out[0], out[1] = out[1], out[0]
					if len(got) > 1 {
						got[0], got[1] = got[1], got[0]
					}
				}
			}
			wait = h.c.b.changed
			return nil
		})
		if err != nil || len(out) > 0 || !h.c.b.opts.Blocking {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-wait:
		}
	}
}

// Holding returns those of brokerSequences that are active messages of the session, locked or
// not. Like the real broker's peek it needs no lock.
func (h *Session) Holding(_ context.Context, brokerSequences []int64) ([]int64, error) {
	var out []int64
	err := h.c.op("holding", h.s.id, nil, func() error {
		for _, bs := range brokerSequences {
			if m := h.s.msgs[bs]; m != nil && !m.deferred {
				out = append(out, bs)
			}
		}
		return nil
	})
	return out, err
}

// ReceiveDeferred returns the deferred messages with the given broker sequence numbers, leaving
// out numbers the broker does not hold as deferred.
func (h *Session) ReceiveDeferred(_ context.Context, seqs []int64) ([]*sequencer.Message, error) {
	var out []*sequencer.Message
	var got []int64 // for the hook
	err := h.c.op("receive_deferred", h.s.id, &got, func() error {
		if err := h.held(); err != nil {
			return err
		}
		for _, bs := range seqs {
			if m := h.s.msgs[bs]; m != nil && m.deferred && m.locked == nil {
				out = append(out, h.deliver(m))
				if h.c.proc.Hook != nil {
					got = append(got, bs)
				}
			}
		}
		return nil
	})
	return out, err
}

// settle applies fn to the locked message m.
func (h *Session) settle(op string, msg *sequencer.Message, fn func(*brokerMessage)) error {
	var settles []int64 // for the hook
	if h.c.proc.Hook != nil {
		settles = []int64{msg.BrokerSequence}
	}
	return h.c.op(op, h.s.id, &settles, func() error {
		if err := h.held(); err != nil {
			return err
		}
		m := h.s.msgs[msg.BrokerSequence]
		if m == nil || m.locked != h {
			return fmt.Errorf("fake broker: %s message %d: not locked by this session: %w", op, msg.BrokerSequence, sequencer.ErrLockLost)
		}
		fn(m)
		return nil
	})
}

// Complete removes the message.
func (h *Session) Complete(_ context.Context, msg *sequencer.Message) error {
	return h.settle("complete", msg, func(m *brokerMessage) { delete(h.s.msgs, m.msg.BrokerSequence) })
}

// Defer sets the message aside; only ReceiveDeferred returns it again.
func (h *Session) Defer(_ context.Context, msg *sequencer.Message) error {
	return h.settle("defer", msg, func(m *brokerMessage) { m.deferred, m.locked = true, nil })
}

// DeadLetter moves the message to the dead-letter queue.
func (h *Session) DeadLetter(_ context.Context, msg *sequencer.Message, p sequencer.DeadLetterParams) error {
	return h.settle("dead_letter", msg, func(m *brokerMessage) {
		delete(h.s.msgs, m.msg.BrokerSequence)
		h.c.b.dlq = append(h.c.b.dlq, DeadLetter{Message: m.msg, Reason: p.Reason, Description: p.Description})
	})
}

// Abandon releases the message lock; the message is delivered again (or dead-lettered once it
// reached the max delivery count).
func (h *Session) Abandon(_ context.Context, msg *sequencer.Message) error {
	return h.settle("abandon", msg, func(m *brokerMessage) {
		h.c.b.unlockMessageLocked(h.s, m)
		h.c.b.notifyLocked()
	})
}

// RenewLock extends the session lock by the lock duration.
func (h *Session) RenewLock(_ context.Context) (time.Time, error) {
	var until time.Time
	err := h.c.op("renew_lock", h.s.id, nil, func() error {
		if err := h.held(); err != nil {
			return err
		}
		h.s.lockedUntil = h.c.b.opts.Clock.Now().Add(h.c.b.opts.LockDuration)
		until = h.s.lockedUntil
		return nil
	})
	return until, err
}

// Close releases the session lock; unsettled messages become available again.
func (h *Session) Close(_ context.Context) error {
	return h.c.op("close", h.s.id, nil, func() error {
		if h.s.holder == h {
			h.c.b.releaseLocked(h.s)
		}
		return nil
	})
}

// GetState returns the session state (nil when none was set).
func (h *Session) GetState(_ context.Context) ([]byte, error) {
	var out []byte
	err := h.c.op("get_state", h.s.id, nil, func() error {
		if err := h.held(); err != nil {
			return err
		}
		out = slices.Clone(h.s.state)
		return nil
	})
	return out, err
}

// SetState replaces the session state (nil clears it).
func (h *Session) SetState(_ context.Context, state []byte) error {
	return h.c.op("set_state", h.s.id, nil, func() error {
		if err := h.held(); err != nil {
			return err
		}
		h.s.state = slices.Clone(state)
		return nil
	})
}

// ErrInjected is a convenience error for hooks that inject a plain failure.
var ErrInjected = errors.New("sequencertest: injected failure")
