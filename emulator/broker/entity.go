package broker

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/seqbus/seqbus/clock"
)

type lockKey = amqp.UUID

// Entity is a queue, topic, subscription or dead-letter queue. Get one with
// Broker.Lookup. An Entity stays valid after it is deleted, but every call then returns
// ErrNotFound.
type Entity struct {
	b         *Broker
	kind      EntityKind
	name      string
	topicName string
	path      string
	props     EntityProperties

	createdAt, updatedAt, accessedAt time.Time
	deleted                          bool

	dlq    *Entity            // queues and subscriptions
	tdlq   *Entity            // queues and subscriptions: the transfer dead-letter queue
	parent *Entity            // dead-letter queues
	subs   map[string]*Entity // topics
	topic  *Entity            // subscriptions
	rules  []*compiledRule    // subscriptions

	nextSeq int64
	msgs    map[int64]*stored
	// order holds the sequence numbers of msgs, ascending, plus up to about as many of
	// removed messages (orderDead of them), which readers skip; it is compacted when
	// the dead outnumber the living, so removal from the head stays cheap.
	order     []int64
	orderDead int
	avail     seqHeap // available messages of a non-session entity
	sessions  map[string]*session
	index     sessionIndex // the sessions ordered for listing (sessionindex.go)
	ready     sessionHeap  // sessions accept-next can take (see sessionChangedLocked)
	locks     map[lockKey]*stored
	sizeBytes int64
	scheduled int64 // count of scheduled messages

	// dedup remembers the message ids seen within the duplicate detection window (queues
	// and topics with RequiresDuplicateDetection); see dedup.go.
	dedup dedupHistory

	// wake is closed (and replaced) whenever a message or session may have become
	// available, or the entity went away; waiting receivers then look again.
	wake chan struct{}
}

type msgState int

const (
	stateActive msgState = iota
	stateLocked
	stateDeferred
	stateScheduled
)

// stored is a message held by an entity.
type stored struct {
	seq        int64
	msg        *amqp.Message // owned by the broker; never handed out
	size       int64
	state      msgState
	enqueuedAt time.Time
	expiresAt  time.Time // zero: never
	scheduleAt time.Time
	// failed is the header delivery-count: deliveries that ended without settlement.
	failed   uint32
	deferred bool // deferred; stays deferred when a ReceiveDeferred lock ends
	// hops counts the auto-forwarding transfers that brought the message here.
	hops    int
	sess    *session
	heapIdx int

	token       lockKey
	lockedUntil time.Time
	sessLock    *SessionLock // the session lock this message was locked under
	lockTimer   clock.Timer
	ttlTimer    clock.Timer
	schedTimer  clock.Timer
}

// Path returns the entity's address, e.g. "t/Subscriptions/s/$DeadLetterQueue".
func (e *Entity) Path() string { return e.path }

// Kind returns what the entity is.
func (e *Entity) Kind() EntityKind { return e.kind }

// RequiresSession reports whether receivers must lock a session.
func (e *Entity) RequiresSession() bool {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	return e.sessions != nil
}

// Properties returns the entity's current properties (defaults filled in).
func (e *Entity) Properties() EntityProperties {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	return e.props
}

// Info describes the entity, with its runtime counts.
func (e *Entity) Info() EntityInfo {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	return e.infoLocked()
}

func (e *Entity) infoLocked() EntityInfo {
	info := EntityInfo{
		Kind: e.kind, Name: e.name, Topic: e.topicName, Path: e.path, Properties: e.props,
		SubscriptionCount: len(e.subs),
		CreatedAt:         e.createdAt, UpdatedAt: e.updatedAt, AccessedAt: e.accessedAt,
	}
	info.Counts = e.countsLocked()
	return info
}

func (e *Entity) countsLocked() Counts {
	var c Counts
	c.Scheduled = e.scheduled
	c.Active = int64(len(e.msgs)) - e.scheduled
	c.SizeBytes = e.sizeBytes
	if e.dlq != nil {
		c.DeadLetter = int64(len(e.dlq.msgs))
		c.SizeBytes += e.dlq.sizeBytes
	}
	if e.tdlq != nil {
		c.TransferDeadLetter = int64(len(e.tdlq.msgs))
		c.SizeBytes += e.tdlq.sizeBytes
	}
	c.Total = c.Active + c.DeadLetter + c.Scheduled + c.TransferDeadLetter
	return c
}

func (e *Entity) checkLocked() error {
	if e.b.closed {
		return ErrClosed
	}
	if e.deleted || (e.parent != nil && e.parent.deleted) {
		return fmt.Errorf("%s %q: %w", e.kind, e.path, ErrNotFound)
	}
	return nil
}

// signalLocked wakes everyone waiting on the entity.
func (e *Entity) signalLocked() {
	close(e.wake)
	e.wake = make(chan struct{})
}

// shutdownLocked stops the entity's timers, fails its session locks and wakes waiters;
// used by delete and Broker.Close.
func (e *Entity) shutdownLocked() {
	e.deleted = true
	for _, s := range e.msgs {
		stopTimers(s)
	}
	for _, ss := range e.sessions {
		if ss.lock != nil {
			ss.lock.loseLocked()
		}
	}
	e.signalLocked()
	if e.dlq != nil {
		e.dlq.shutdownLocked()
	}
	if e.tdlq != nil {
		e.tdlq.shutdownLocked()
	}
}

func stopTimers(s *stored) {
	for _, t := range []clock.Timer{s.lockTimer, s.ttlTimer, s.schedTimer} {
		if t != nil {
			t.Stop()
		}
	}
	s.lockTimer, s.ttlTimer, s.schedTimer = nil, nil, nil
}

// alive reports whether s is still held by e (timer callbacks check it).
func (e *Entity) alive(s *stored) bool {
	return !e.b.closed && !e.deleted && e.msgs[s.seq] == s
}

// Send enqueues a batch of messages atomically: either all are accepted or none.
// Messages carrying x-opt-scheduled-enqueue-time in the future are scheduled. Sending
// to a topic fans the messages out to every subscription with a matching rule; each
// subscription numbers its copies itself. The broker keeps its own copy of each
// message, so the caller may reuse them.
func (e *Entity) Send(ctx context.Context, msgs []*amqp.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("send to %q: %w", e.path, err)
	}
	_, err := e.send(msgs, time.Time{})
	return err
}

// Schedule enqueues messages to become available at the given time and returns their
// sequence numbers, in order (for a topic, the topic's numbers, which CancelScheduled takes).
func (e *Entity) Schedule(msgs []*amqp.Message, at time.Time) ([]int64, error) {
	if at.IsZero() {
		return nil, fmt.Errorf("schedule on %q: zero time: %w", e.path, ErrNotAllowed)
	}
	return e.send(msgs, at)
}

type incoming struct {
	msg  *amqp.Message
	size int64
}

func (e *Entity) send(msgs []*amqp.Message, at time.Time) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	// Encode outside the lock: the size check needs the encoded length.
	in := make([]incoming, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("send to %q: message %d is nil: %w", e.path, i, ErrNotAllowed)
		}
		c := cloneMessage(m, true)
		c.DeliveryTag = nil
		c.DeliveryAnnotations = nil
		if !at.IsZero() {
			setAnnotation(c, AnnotationScheduledEnqueueTime, at.UTC())
		}
		if c.Properties == nil {
			c.Properties = &amqp.MessageProperties{}
		}
		if c.Properties.MessageID == nil {
			// Service Bus gives every message an id; SDKs rely on it (the
			// JavaScript receiver tracks its lock renewals by message id).
			c.Properties.MessageID = newMessageID()
		}
		raw, err := c.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("send to %q: encode message %d: %w", e.path, i, err)
		}
		if int64(len(raw)) > e.b.cfg.MaxMessageSize {
			return nil, fmt.Errorf("send to %q: message %d is %d bytes, limit %d: %w",
				e.path, i, len(raw), e.b.cfg.MaxMessageSize, ErrMessageTooLarge)
		}
		in[i] = incoming{msg: c, size: int64(len(raw))}
	}

	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkLocked(); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	switch e.kind {
	case KindSubscription, KindDeadLetterQueue:
		return nil, fmt.Errorf("send to %s %q: %w", e.kind, e.path, ErrNotAllowed)
	}
	if !e.props.canSend() {
		return nil, fmt.Errorf("send to %q (status %s): %w", e.path, e.props.Status, ErrEntityDisabled)
	}
	now := e.b.clk.Now()
	// Validate the whole batch before changing anything.
	var routes [][]route
	if e.kind == KindTopic {
		routes = make([][]route, len(in))
	}
	for i, m := range in {
		if e.kind == KindQueue {
			if err := e.admitLocked(m.msg); err != nil {
				return nil, fmt.Errorf("send to %q: message %d: %w", e.path, i, err)
			}
			continue
		}
		if t, ok := scheduledTime(m.msg); ok && t.After(now) {
			continue // routed when due
		}
		r := e.routeLocked(m.msg)
		if err := checkRoutesLocked(r); err != nil {
			return nil, fmt.Errorf("send to %q: message %d: %w", e.path, i, err)
		}
		routes[i] = r
	}
	e.accessedAt = now
	seqs := make([]int64, len(in))
	for i, m := range in {
		dup := e.duplicateLocked(m.msg, now)
		if e.kind == KindTopic {
			switch t, ok := scheduledTime(m.msg); {
			case dup:
				seqs[i] = e.nextTopicSeqLocked()
			case ok && t.After(now):
				seqs[i] = e.scheduleTopicLocked(m, t, now, 0)
			default:
				e.fanOutLocked(routes[i], m.size, now, 0)
				seqs[i] = e.nextTopicSeqLocked()
			}
			continue
		}
		if dup {
			e.nextSeq++
			seqs[i] = e.nextSeq
			continue
		}
		seqs[i] = e.enqueueLocked(m.msg, m.size, now, 0)
	}
	return seqs, nil
}

// admitLocked checks that a message sent directly fits the entity.
func (e *Entity) admitLocked(m *amqp.Message) error {
	if e.sessions != nil {
		if _, ok := sessionIDOf(m); !ok {
			return fmt.Errorf("%q requires a session id (group-id): %w", e.path, ErrNotAllowed)
		}
	}
	return nil
}

// enqueueLocked stores a message in a queue or subscription and returns its number. An
// entity with ForwardTo passes the message on at once (or when its schedule is due).
func (e *Entity) enqueueLocked(m *amqp.Message, size int64, now time.Time, hops int) int64 {
	e.nextSeq++
	s := &stored{seq: e.nextSeq, msg: m, size: size, heapIdx: -1, enqueuedAt: now, hops: hops}
	if t, ok := scheduledTime(m); ok && t.After(now) {
		s.state = stateScheduled
		s.scheduleAt = t
	}
	e.insertLocked(s)
	if s.state == stateScheduled {
		e.scheduled++
		s.schedTimer = e.b.clk.AfterFunc(t0(s.scheduleAt.Sub(now)), func() { e.activate(s) })
		return s.seq
	}
	if e.forwardsLocked() {
		e.forwardLocked(s, now)
		return s.seq
	}
	e.startTTLLocked(s, now)
	e.makeAvailableLocked(s, now)
	return s.seq
}

func t0(d time.Duration) time.Duration { return max(d, 0) }

// insertLocked adds s to the entity's indexes (not to the available heap).
func (e *Entity) insertLocked(s *stored) {
	e.msgs[s.seq] = s
	if n := len(e.order); n == 0 || e.order[n-1] < s.seq {
		e.order = append(e.order, s.seq)
	} else {
		if i, found := slices.BinarySearch(e.order, s.seq); found {
			e.orderDead-- // a removed number coming back (not expected: numbers are unique)
		} else {
			e.order = slices.Insert(e.order, i, s.seq)
		}
	}
	e.sizeBytes += s.size
	if e.sessions != nil {
		id, _ := sessionIDOf(s.msg)
		ss := e.sessionLocked(id)
		ss.count++
		s.sess = ss
	}
}

// removeLocked deletes s from the entity entirely.
func (e *Entity) removeLocked(s *stored) {
	if e.msgs[s.seq] != s {
		return
	}
	e.unlockLocked(s)
	stopTimers(s)
	delete(e.msgs, s.seq)
	e.orderDead++
	if e.orderDead > 64 && e.orderDead > len(e.msgs) {
		e.order = slices.DeleteFunc(e.order, func(n int64) bool { return e.msgs[n] == nil })
		e.orderDead = 0
	}
	e.sizeBytes -= s.size
	if s.state == stateScheduled {
		e.scheduled--
	}
	if s.sess != nil {
		s.sess.avail.remove(s)
		s.sess.count--
		e.sessionChangedLocked(s.sess)
		e.maybeDropSessionLocked(s.sess)
	} else {
		e.avail.remove(s)
	}
}

// startTTLLocked computes the expiry of a message entering the entity (or activated
// from the schedule) and arms its timer.
func (e *Entity) startTTLLocked(s *stored, now time.Time) {
	if e.kind == KindDeadLetterQueue {
		return
	}
	ttl := e.props.DefaultMessageTimeToLive
	if e.topic != nil && e.topic.props.DefaultMessageTimeToLive > 0 {
		ttl = minPositive(ttl, e.topic.props.DefaultMessageTimeToLive)
	}
	if s.msg.Header != nil {
		ttl = minPositive(ttl, s.msg.Header.TTL)
	}
	if ttl <= 0 {
		return
	}
	if s.msg.Header == nil {
		s.msg.Header = &amqp.MessageHeader{}
	}
	s.msg.Header.TTL = ttl
	s.expiresAt = now.Add(ttl)
	if s.expiresAt.Before(now) { // overflow
		s.expiresAt = time.Time{}
		return
	}
	s.ttlTimer = e.b.clk.AfterFunc(ttl, func() {
		e.b.mu.Lock()
		defer e.b.mu.Unlock()
		if !e.alive(s) {
			return
		}
		// A locked message expires when its lock ends.
		if s.state == stateActive || s.state == stateDeferred {
			e.expireLocked(s)
		}
	})
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

func (s *stored) expired(now time.Time) bool {
	return !s.expiresAt.IsZero() && !now.Before(s.expiresAt)
}

// expireLocked drops an expired message, or dead-letters it when the entity says so.
func (e *Entity) expireLocked(s *stored) {
	if e.props.DeadLetteringOnMessageExpiration && e.dlq != nil {
		e.deadLetterLocked(s, ReasonTTLExpired, "The message expired and was dead lettered.", nil)
		return
	}
	e.b.log.Debug("broker: message expired", slog.String("entity", e.path), slog.Int64("sequence_number", s.seq))
	e.removeLocked(s)
}

// makeAvailableLocked puts s in the active state (or expires it).
func (e *Entity) makeAvailableLocked(s *stored, now time.Time) {
	if s.expired(now) {
		e.expireLocked(s)
		return
	}
	s.state = stateActive
	if s.sess != nil {
		s.sess.avail.add(s)
		e.sessionChangedLocked(s.sess)
	} else {
		e.avail.add(s)
	}
	e.signalLocked()
}

// activate moves a scheduled message to the active state (timer callback).
func (e *Entity) activate(s *stored) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if !e.alive(s) || s.state != stateScheduled {
		return
	}
	now := e.b.clk.Now()
	s.schedTimer = nil
	if e.kind == KindTopic {
		e.removeLocked(s)
		e.fanOutLocked(e.routeLocked(s.msg), s.size, now, s.hops)
		return
	}
	e.scheduled--
	s.enqueuedAt = now
	s.state = stateActive
	if e.forwardsLocked() {
		e.forwardLocked(s, now)
		return
	}
	e.startTTLLocked(s, now)
	e.makeAvailableLocked(s, now)
}

// CancelScheduled removes scheduled messages by sequence number. The call is atomic:
// ErrMessageNotFound (naming the number) if any is not a scheduled message.
func (e *Entity) CancelScheduled(seqs []int64) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if err := e.checkLocked(); err != nil {
		return fmt.Errorf("cancel scheduled: %w", err)
	}
	for _, n := range seqs {
		if s := e.msgs[n]; s == nil || s.state != stateScheduled {
			return fmt.Errorf("cancel scheduled on %q: sequence number %d: %w", e.path, n, ErrMessageNotFound)
		}
	}
	for _, n := range seqs {
		if s := e.msgs[n]; s != nil {
			e.removeLocked(s)
		}
	}
	return nil
}

// Topic side: scheduled topic messages live in the topic until they fan out.

func (e *Entity) nextTopicSeqLocked() int64 {
	e.nextSeq++
	return e.nextSeq
}

func (e *Entity) scheduleTopicLocked(m incoming, at, now time.Time, hops int) int64 {
	s := &stored{seq: e.nextTopicSeqLocked(), msg: m.msg, size: m.size, heapIdx: -1,
		enqueuedAt: now, state: stateScheduled, scheduleAt: at, hops: hops}
	e.insertLocked(s)
	e.scheduled++
	s.schedTimer = e.b.clk.AfterFunc(t0(at.Sub(now)), func() { e.activate(s) })
	return s.seq
}

// route is one copy of a topic message for one subscription, with the rule's action
// already applied. A copy with evalErr set goes to the subscription's dead-letter
// queue: one of its rules failed to evaluate.
type route struct {
	sub     *Entity
	msg     *amqp.Message
	evalErr string
}

// PropertyRuleName is the application property naming the rule whose action produced
// a subscription's copy of a message.
const PropertyRuleName = "RuleName"

// routeLocked evaluates every subscription's rules, as Service Bus documents it: all
// matching rules without an action together yield one copy of the message, and each
// matching rule with an action yields a copy of its own, changed by the action and
// carrying the rule's name in the application property RuleName. When a rule's filter
// or action fails to evaluate, the subscription gets no copy from its rules: the
// message goes to its dead-letter queue instead, or nowhere with
// DropOnFilterEvaluationExceptions (logged either way).
func (e *Entity) routeLocked(m *amqp.Message) []route {
	names := make([]string, 0, len(e.subs))
	for k := range e.subs {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []route
	for _, k := range names {
		sub := e.subs[k]
		r, err := sub.routeOneLocked(m)
		if err == nil {
			out = append(out, r...)
			continue
		}
		if sub.props.DropOnFilterEvaluationExceptions {
			e.b.log.Warn("broker: rule evaluation failed; message dropped for the subscription",
				slog.String("subscription", sub.path), slog.Any("error", err))
			continue
		}
		e.b.log.Warn("broker: rule evaluation failed; message dead-lettered in the subscription",
			slog.String("subscription", sub.path), slog.Any("error", err))
		out = append(out, route{sub: sub, msg: cloneMessage(m, false), evalErr: err.Error()})
	}
	return out
}

// routeOneLocked evaluates the rules of one subscription, sub, for m.
func (sub *Entity) routeOneLocked(m *amqp.Message) ([]route, error) {
	plain := false
	var acts []route
	for _, r := range sub.rules {
		ok, err := r.filter.Match(m)
		if err != nil {
			return nil, fmt.Errorf("rule %q filter: %w", r.rule.Name, err)
		}
		if !ok {
			continue
		}
		if r.action == nil {
			plain = true
			continue
		}
		c := cloneMessage(m, false)
		if err := r.action.Apply(c); err != nil {
			return nil, fmt.Errorf("rule %q action: %w", r.rule.Name, err)
		}
		if c.ApplicationProperties == nil {
			c.ApplicationProperties = map[string]any{}
		}
		c.ApplicationProperties[PropertyRuleName] = r.rule.Name
		acts = append(acts, route{sub: sub, msg: c})
	}
	if plain {
		acts = append([]route{{sub: sub, msg: cloneMessage(m, false)}}, acts...)
	}
	return acts, nil
}

// checkRoutesLocked refuses a direct send whose copies a subscription cannot take.
func checkRoutesLocked(routes []route) error {
	for _, r := range routes {
		if r.evalErr != "" {
			continue // dead-lettered on arrival
		}
		if !r.sub.props.canSend() {
			return fmt.Errorf("subscription %q (status %s): %w", r.sub.path, r.sub.props.Status, ErrEntityDisabled)
		}
		if err := r.sub.admitLocked(r.msg); err != nil {
			return err
		}
	}
	return nil
}

// fanOutLocked delivers the copies. Copies that arrive by forwarding or from the
// schedule were not checked: a subscription that refuses sends skips its copy, and a
// session subscription dead-letters a copy without a session id.
func (e *Entity) fanOutLocked(routes []route, size int64, now time.Time, hops int) {
	for _, r := range routes {
		if !r.sub.props.canSend() {
			e.b.log.Warn("broker: subscription refuses messages; copy dropped", slog.String("subscription", r.sub.path),
				slog.String("status", string(r.sub.props.Status)))
			continue
		}
		r.sub.accessedAt = now
		if r.evalErr != "" {
			r.sub.deadLetterArrivalLocked(r.msg, size, now, hops, ReasonFilterEvaluationException, r.evalErr)
			continue
		}
		if r.sub.sessions != nil {
			if _, ok := sessionIDOf(r.msg); !ok {
				r.sub.deadLetterArrivalLocked(r.msg, size, now, hops, ReasonSessionIDIsNull, descSessionIDIsNull)
				continue
			}
		}
		r.sub.enqueueLocked(r.msg, size, now, hops)
	}
}

// deadLetterLocked moves s to the dead-letter queue with the given reason.
func (e *Entity) deadLetterLocked(s *stored, reason, desc string, props map[string]any) {
	e.removeLocked(s)
	e.addDeadLetterLocked(s, reason, desc, props, e.b.clk.Now())
}

// addDeadLetterLocked dead-letters s, which e no longer holds: it sets the reason,
// description and source, then forwards the message to ForwardDeadLetteredMessagesTo
// when the entity has one (and the hop limit allows), or else puts it in e's
// dead-letter queue with its number and enqueued time.
func (e *Entity) addDeadLetterLocked(s *stored, reason, desc string, props map[string]any, now time.Time) {
	m := s.msg
	applyProperties(m, props)
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = map[string]any{}
	}
	m.ApplicationProperties[PropertyDeadLetterReason] = reason
	m.ApplicationProperties[PropertyDeadLetterErrorDescription] = desc
	setAnnotation(m, AnnotationDeadLetterSource, e.path)
	e.b.log.Debug("broker: message dead-lettered", slog.String("entity", e.path),
		slog.Int64("sequence_number", s.seq), slog.String("reason", reason))
	if to := e.props.ForwardDeadLetteredMessagesTo; to != "" {
		e.forwardToLocked(s, to, now)
		return
	}
	e.putLocked(e.dlq, s, now)
}

// putLocked adds s, dead-lettered by e, to one of e's dead-letter queues, keeping its
// number and enqueued time.
func (e *Entity) putLocked(q *Entity, s *stored, now time.Time) {
	d := &stored{seq: s.seq, msg: s.msg, size: s.size, heapIdx: -1, enqueuedAt: s.enqueuedAt, failed: s.failed, hops: s.hops}
	q.insertLocked(d)
	q.makeAvailableLocked(d, now)
}

func newToken() lockKey { return lockKey(uuid.New()) }

// newMessageID returns the id the broker gives a message sent without one: a
// random GUID as 32 hex digits.
func newMessageID() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}
