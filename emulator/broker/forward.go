package broker

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

// MaxForwardHops is the number of auto-forwarding transfers a message may make, as in
// Service Bus. A message that would need one more goes, with reason
// MaxTransferHopCountExceeded, to the transfer dead-letter queue
// ("<entity>/$Transfer/$DeadLetterQueue") of the entity where the chain stops.
const MaxForwardHops = 4

// Dead-letter reasons of auto-forwarding and sessions.
const (
	ReasonMaxTransferHopCountExceeded = "MaxTransferHopCountExceeded"
	// ReasonForwardingFailed is the emulator's reason for a message in a transfer
	// dead-letter queue whose forwarding target was deleted or refuses messages.
	ReasonForwardingFailed = "ForwardingFailed"
	// ReasonSessionIDIsNull: a forwarded or scheduled message without a session id
	// reached a session-enabled entity.
	ReasonSessionIDIsNull = "Session ID is null"

	descSessionIDIsNull = "Session enabled entity doesn't allow a message whose session identifier is null."
)

var descHopCount = fmt.Sprintf("The maximum number of allowed hops when forwarding between queues has been exceeded. This value is set to %d.", MaxForwardHops)

// forwardsLocked reports whether messages arriving at e move on to e.props.ForwardTo.
func (e *Entity) forwardsLocked() bool {
	return (e.kind == KindQueue || e.kind == KindSubscription) && e.props.ForwardTo != ""
}

// forwardLocked moves s, which e holds, to e's ForwardTo target (see forwardToLocked).
func (e *Entity) forwardLocked(s *stored, now time.Time) {
	e.removeLocked(s)
	e.forwardToLocked(s, e.props.ForwardTo, now)
}

// forwardToLocked hands s, which e no longer holds, to the queue or topic named target:
// the message arrives there with a new number (its number at e stays in
// x-opt-enqueue-sequence-number if it has none yet). When the hop limit is reached or
// the target is gone or refuses messages, s goes to e's transfer dead-letter queue, as
// in Service Bus.
func (e *Entity) forwardToLocked(s *stored, target string, now time.Time) {
	if s.hops >= MaxForwardHops {
		e.b.log.Warn("broker: forwarding hop limit reached; message moved to the transfer dead-letter queue",
			slog.String("entity", e.path), slog.String("forward_to", target), slog.Int64("sequence_number", s.seq))
		e.transferDeadLetterLocked(s, ReasonMaxTransferHopCountExceeded, descHopCount, now)
		return
	}
	if err := e.transferLocked(s, target, now); err != nil {
		e.b.log.Warn("broker: forwarding failed; message moved to the transfer dead-letter queue",
			slog.String("entity", e.path), slog.Int64("sequence_number", s.seq), slog.Any("error", err))
		e.transferDeadLetterLocked(s, ReasonForwardingFailed, err.Error(), now)
	}
}

// transferDeadLetterLocked puts s, which e no longer holds, in e's transfer dead-letter
// queue with the given reason.
func (e *Entity) transferDeadLetterLocked(s *stored, reason, desc string, now time.Time) {
	m := s.msg
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = map[string]any{}
	}
	m.ApplicationProperties[PropertyDeadLetterReason] = reason
	m.ApplicationProperties[PropertyDeadLetterErrorDescription] = desc
	setAnnotation(m, AnnotationDeadLetterSource, e.path)
	e.putLocked(e.tdlq, s, now)
}

// transferLocked hands s's message to the queue or topic named target, one hop further.
func (e *Entity) transferLocked(s *stored, target string, now time.Time) error {
	b := e.b
	t := b.queues[key(target)]
	if t == nil {
		t = b.topics[key(target)]
	}
	if t == nil {
		return fmt.Errorf("forwarding target %q does not exist", target)
	}
	if !t.props.canSend() {
		return fmt.Errorf("forwarding target %q does not accept messages (status %s)", t.path, t.props.Status)
	}
	if _, ok := annotation(s.msg, AnnotationEnqueueSequenceNumber); !ok {
		setAnnotation(s.msg, AnnotationEnqueueSequenceNumber, s.seq)
	}
	b.log.Debug("broker: message forwarded", slog.String("from", e.path), slog.String("to", t.path),
		slog.Int64("sequence_number", s.seq), slog.Int("hop", s.hops+1))
	t.arriveLocked(s.msg, s.size, s.hops+1, now)
	return nil
}

// arriveLocked takes a forwarded message into a queue or topic: duplicate detection,
// then the topic's rules or the queue itself. A queue that requires sessions
// dead-letters a message without a session id.
func (e *Entity) arriveLocked(m *amqp.Message, size int64, hops int, now time.Time) {
	e.accessedAt = now
	if e.duplicateLocked(m, now) {
		return
	}
	if e.kind == KindTopic {
		if t, ok := scheduledTime(m); ok && t.After(now) {
			e.scheduleTopicLocked(incoming{msg: m, size: size}, t, now, hops)
			return
		}
		e.fanOutLocked(e.routeLocked(m), size, now, hops)
		return
	}
	if e.sessions != nil {
		if _, ok := sessionIDOf(m); !ok {
			e.deadLetterArrivalLocked(m, size, now, hops, ReasonSessionIDIsNull, descSessionIDIsNull)
			return
		}
	}
	e.enqueueLocked(m, size, now, hops)
}

// deadLetterArrivalLocked dead-letters a message that arrives at e but cannot enter
// it; it gets a number of e as if it had been enqueued.
func (e *Entity) deadLetterArrivalLocked(m *amqp.Message, size int64, now time.Time, hops int, reason, desc string) {
	e.nextSeq++
	s := &stored{seq: e.nextSeq, msg: m, size: size, heapIdx: -1, enqueuedAt: now, hops: hops}
	e.addDeadLetterLocked(s, reason, desc, nil, now)
}

// forwardBacklogLocked forwards the available messages e holds, after ForwardTo was set.
func (e *Entity) forwardBacklogLocked() {
	if !e.forwardsLocked() {
		return
	}
	now := e.b.clk.Now()
	var ready []*stored
	for _, n := range e.order {
		if s := e.msgs[n]; s != nil && s.state == stateActive {
			ready = append(ready, s)
		}
	}
	for _, s := range ready {
		if e.msgs[s.seq] == s && s.state == stateActive { // a loop may have moved it already
			e.forwardLocked(s, now)
		}
	}
}

// normalizeForwardTarget accepts an entity name or its absolute URI
// ("sb://ns.servicebus.windows.net/q2") and returns the name.
func normalizeForwardTarget(v string) string {
	name := strings.TrimSpace(v)
	if _, rest, ok := strings.Cut(name, "://"); ok {
		_, name, _ = strings.Cut(rest, "/")
	}
	return strings.Trim(name, "/")
}

// checkForwardingLocked normalizes p's forwarding targets for a queue or subscription
// and checks them as the service does when an entity is created or updated: a target
// must be an existing queue or topic, and a queue must not forward to itself. self is
// the queue's name ("" for a subscription).
func (b *Broker) checkForwardingLocked(self string, p *EntityProperties) error {
	for _, f := range []struct {
		field string
		v     *string
	}{{"ForwardTo", &p.ForwardTo}, {"ForwardDeadLetteredMessagesTo", &p.ForwardDeadLetteredMessagesTo}} {
		*f.v = normalizeForwardTarget(*f.v)
		name := *f.v
		if name == "" {
			continue
		}
		if self != "" && key(name) == key(self) {
			return fmt.Errorf("%w: %s: an entity cannot forward to itself", ErrInvalidConfig, f.field)
		}
		if b.queues[key(name)] == nil && b.topics[key(name)] == nil {
			return fmt.Errorf("%w: %s: no queue or topic named %q (the target must exist first)", ErrInvalidConfig, f.field, name)
		}
	}
	return nil
}
