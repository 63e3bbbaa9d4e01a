package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
)

// batchMessageFormat is the message-format of an SDK message batch: each data
// section of the envelope is a complete encoded message.
const batchMessageFormat = 0x80013700

// AMQP and Service Bus error conditions.
const (
	condNotFound            amqpwire.Symbol = "amqp:not-found"
	condNotAllowed          amqpwire.Symbol = "amqp:not-allowed"
	condUnauthorized        amqpwire.Symbol = "amqp:unauthorized-access"
	condInternal            amqpwire.Symbol = "amqp:internal-error"
	condMessageSizeExceeded amqpwire.Symbol = "amqp:link:message-size-exceeded"
	condLockLost            amqpwire.Symbol = "com.microsoft:message-lock-lost"
	condSessionLockLost     amqpwire.Symbol = "com.microsoft:session-lock-lost"
	condSessionCannotLock   amqpwire.Symbol = "com.microsoft:session-cannot-be-locked"
	condTimeout             amqpwire.Symbol = "com.microsoft:timeout"
	condMessageNotFound     amqpwire.Symbol = "com.microsoft:message-not-found"
	condEntityDisabled      amqpwire.Symbol = "com.microsoft:entity-disabled"
	condDeadLetter          amqpwire.Symbol = "com.microsoft:dead-letter"
	condEntityExists        amqpwire.Symbol = "com.microsoft:entity-already-exists"
	condArgumentError       amqpwire.Symbol = "com.microsoft:argument-error"
)

// brokerError maps a broker error to the AMQP error the SDK expects.
func brokerError(err error) *amqpwire.Error {
	cond := condInternal
	switch {
	case errors.Is(err, broker.ErrNotFound):
		cond = condNotFound
	case errors.Is(err, broker.ErrLockLost):
		cond = condLockLost
	case errors.Is(err, broker.ErrSessionLockLost):
		cond = condSessionLockLost
	case errors.Is(err, broker.ErrSessionCannotBeLocked):
		cond = condSessionCannotLock
	case errors.Is(err, broker.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		cond = condTimeout
	case errors.Is(err, broker.ErrMessageTooLarge):
		cond = condMessageSizeExceeded
	case errors.Is(err, broker.ErrNotAllowed):
		cond = condNotAllowed
	case errors.Is(err, broker.ErrMessageNotFound):
		cond = condMessageNotFound
	case errors.Is(err, broker.ErrEntityDisabled):
		cond = condEntityDisabled
	case errors.Is(err, broker.ErrEntityExists):
		cond = condEntityExists
	case errors.Is(err, broker.ErrInvalidConfig):
		cond = condArgumentError
	}
	return &amqpwire.Error{Condition: cond, Description: err.Error()}
}

func errUnauthorized(address string) *amqpwire.Error {
	return &amqpwire.Error{Condition: condUnauthorized, Description: fmt.Sprintf("no valid token for %q: put a token on $cbs first", address)}
}

// sendToEntityLocked hands a message (or a batch) from a client sender to the
// broker.
func (l *link) sendToEntityLocked(d *partialDelivery) amqpwire.DeliveryState {
	limit := l.s.c.srv.cfg.MaxMessageSize
	// A batch is one AMQP message: its whole encoding counts, as on the
	// service (and so each item fits too).
	if n := int64(len(d.payload)); n > limit {
		return &amqpwire.Rejected{Error: &amqpwire.Error{Condition: condMessageSizeExceeded,
			Description: fmt.Sprintf("the message is %d bytes, larger than the limit of %d bytes", n, limit)}}
	}
	env, err := decodeMessage(d.payload)
	if err != nil {
		return rejectDecode(err)
	}
	msgs := []*amqp.Message{env}
	if d.format == batchMessageFormat {
		msgs = msgs[:0]
		for i, data := range env.Data {
			m, err := decodeMessage(data)
			if err != nil {
				return rejectDecode(fmt.Errorf("batch item %d: %w", i, err))
			}
			msgs = append(msgs, m)
		}
	}
	if d.settled {
		l.s.c.srv.pressure.charge(len(msgs)) // the client wants no outcome: nothing to refuse
	} else if e := l.s.c.refuseLinkOp(len(msgs)); e != nil {
		return &amqpwire.Rejected{Error: e}
	}
	if err := l.entity.Send(l.ctx, msgs); err != nil {
		return &amqpwire.Rejected{Error: brokerError(err)}
	}
	return &amqpwire.Accepted{}
}

// pump moves messages from the broker to an entity receiver while it has
// credit.
func (l *link) pump() {
	c := l.s.c
	defer c.wg.Done()
	// Receive-and-delete links lock too: a message is deleted only once its
	// delivery is on its way to the client (deliverLocked), so messages the
	// link cannot deliver any more go back instead of being lost.
	opts := broker.ReceiveOptions{Mode: broker.PeekLock, Session: l.sessionLock}
	for {
		c.mu.Lock()
		for l.state == linkAttached && l.sndCredit == 0 {
			c.mu.Unlock()
			select {
			case <-l.wake:
			case <-l.ctx.Done():
				return
			}
			c.mu.Lock()
		}
		if l.state != linkAttached {
			c.mu.Unlock()
			return
		}
		n := int(min(l.sndCredit, maxReceiveBatch))
		c.mu.Unlock()

		ds, err := l.entity.Receive(l.ctx, n, opts)
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			l.detachLocked(brokerError(err))
			c.mu.Unlock()
			return
		}
		// A delivery cannot be refused: without credits it waits for the next second.
		if !c.srv.pressure.admitDelivery(l.ctx, len(ds)) {
			l.giveBack(ds)
			return
		}
		c.mu.Lock()
		if l.state == linkAttached && !c.claimedLocked(l.address) {
			// The token that authorized the attach has expired.
			l.giveBack(ds)
			l.detachLocked(errUnauthorized(l.address))
			c.mu.Unlock()
			return
		}
		for i, d := range ds {
			if l.state != linkAttached || l.sndCredit == 0 {
				l.giveBack(ds[i:])
				break
			}
			l.deliverLocked(d)
		}
		c.mu.Unlock()
	}
}

// giveBack returns messages the link could not deliver.
func (l *link) giveBack(ds []*broker.Delivery) {
	for _, d := range ds {
		_ = l.entity.Release(d.LockToken)
	}
}

func (l *link) deliverLocked(d *broker.Delivery) {
	if l.mode == broker.ReceiveAndDelete {
		// The lock is the emulator's own business (see pump): the client
		// sees a receive-and-delete message without one.
		delete(d.Message.Annotations, broker.AnnotationLockedUntil)
		delete(d.Message.DeliveryAnnotations, broker.DeliveryAnnotationLockToken)
	}
	payload, err := encodeMessage(d.Message)
	if err != nil {
		l.s.c.log.Error("engine: encode delivery", slog.Any("error", err))
		l.giveBack([]*broker.Delivery{d})
		return
	}
	if l.mode == broker.ReceiveAndDelete {
		l.nextTag++
		id := l.transferOutLocked(payload, tag8(l.nextTag), true)
		od := &outDelivery{l: l, entity: l.entity, token: d.LockToken}
		if s := l.s; len(s.held) > 0 && s.held[len(s.held)-1].deliveryID == id {
			s.heldRAD[id] = od // deleted when its last frame goes out
			return
		}
		od.deleteSentLocked()
		return
	}
	id := l.transferOutLocked(payload, dotnetGUID(d.LockToken), false)
	l.s.unsettled[id] = &outDelivery{l: l, entity: l.entity, token: d.LockToken}
}

// watchSessionLock detaches the link with com.microsoft:session-lock-lost
// when its session lock ends other than by our own release.
func (l *link) watchSessionLock(lock *broker.SessionLock) {
	c := l.s.c
	defer c.wg.Done()
	select {
	case <-lock.Lost():
		c.mu.Lock()
		l.detachLocked(&amqpwire.Error{Condition: condSessionLockLost, Description: fmt.Sprintf("the lock on session %q was lost", lock.ID())})
		c.mu.Unlock()
	case <-l.ctx.Done():
	}
}

// outDelivery is a peek-lock delivery waiting for the client's settlement.
type outDelivery struct {
	l      *link
	entity *broker.Entity
	token  amqp.UUID
}

// settleLocked applies the client's outcome and returns the state of the
// confirming disposition (reference §4.6: echo without error, or
// message-lock-lost).
func (d *outDelivery) settleLocked(state amqpwire.DeliveryState) amqpwire.DeliveryState {
	var err error
	var confirm amqpwire.DeliveryState
	switch st := state.(type) {
	case *amqpwire.Accepted:
		err = d.entity.Complete(d.token)
		confirm = &amqpwire.Accepted{}
	case *amqpwire.Released:
		err = d.entity.Release(d.token)
		confirm = &amqpwire.Released{}
	case *amqpwire.Modified:
		props := plainMap(st.MessageAnnotations)
		if st.UndeliverableHere {
			err = d.entity.Defer(d.token, props)
		} else {
			err = d.entity.Abandon(d.token, props)
		}
		confirm = &amqpwire.Modified{DeliveryFailed: st.DeliveryFailed, UndeliverableHere: st.UndeliverableHere}
	case *amqpwire.Rejected:
		reason, desc := "", ""
		var props map[string]any
		if st.Error != nil {
			props = map[string]any{}
			for k, v := range st.Error.Info {
				props[string(k)] = plainValue(v)
			}
			reason, _ = props["DeadLetterReason"].(string)
			desc, _ = props["DeadLetterErrorDescription"].(string)
			delete(props, "DeadLetterReason")
			delete(props, "DeadLetterErrorDescription")
			if st.Error.Condition != condDeadLetter && reason == "" {
				reason = string(st.Error.Condition)
				desc = st.Error.Description
			}
		}
		err = d.entity.DeadLetter(d.token, reason, desc, props)
		confirm = &amqpwire.Rejected{}
	default:
		// No outcome (or received): treat as released.
		err = d.entity.Release(d.token)
		confirm = &amqpwire.Released{}
	}
	if err != nil {
		if errors.Is(err, broker.ErrLockLost) || errors.Is(err, broker.ErrSessionLockLost) || errors.Is(err, broker.ErrNotFound) {
			return &amqpwire.Rejected{Error: &amqpwire.Error{Condition: condLockLost, Description: err.Error()}}
		}
		return &amqpwire.Rejected{Error: brokerError(err)}
	}
	return confirm
}

// deleteSentLocked removes the message of a receive-and-delete delivery that
// is now on its way to the client.
func (d *outDelivery) deleteSentLocked() {
	if err := d.entity.Complete(d.token); err != nil {
		// Its lock ran out while the delivery waited for the client's
		// window: the message is back in the entity and reaches the client
		// twice.
		d.l.s.c.log.Debug("engine: receive-and-delete message not deleted", slog.Any("error", err))
	}
}

// dotnetGUID returns the delivery tag for a lock token: the token's bytes in
// .NET Guid.ToByteArray order.
func dotnetGUID(u amqp.UUID) []byte {
	b := make([]byte, 16)
	copy(b, u[:])
	b[0], b[1], b[2], b[3] = u[3], u[2], u[1], u[0]
	b[4], b[5] = u[5], u[4]
	b[6], b[7] = u[7], u[6]
	return b
}

// dotnetTicks converts t to .NET ticks (100 ns since 0001-01-01).
func dotnetTicks(t time.Time) int64 {
	return t.UnixMilli()*10000 + 621355968000000000
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	}
	return 0, false
}

// plainValue converts an amqpwire value to the Go type go-amqp uses.
func plainValue(v any) any {
	switch x := v.(type) {
	case amqpwire.Symbol:
		return string(x)
	case amqpwire.UUID:
		return amqp.UUID(x)
	case map[any]any:
		return plainMap(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainValue(e)
		}
		return out
	}
	return v
}

func plainMap(m map[any]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch k := k.(type) {
		case string:
			out[k] = plainValue(v)
		case amqpwire.Symbol:
			out[string(k)] = plainValue(v)
		default:
			out[fmt.Sprint(k)] = plainValue(v)
		}
	}
	return out
}

// encodeMessage encodes a message the broker hands out. go-amqp leaves a
// header's zero delivery-count out of the encoding; Service Bus writes it, and
// the JavaScript SDK (rhea) reports a missing one as an undefined
// deliveryCount, so the header is encoded here with every field present.
func encodeMessage(m *amqp.Message) ([]byte, error) {
	h := m.Header
	if h == nil {
		return m.MarshalBinary()
	}
	var ttl any
	if h.TTL > 0 {
		ttl = uint32(min(h.TTL.Milliseconds(), math.MaxUint32))
	}
	out, err := amqpwire.AppendValue(nil, amqpwire.Described{
		Descriptor: amqpwire.SectionHeader,
		Value:      []any{h.Durable, h.Priority, ttl, h.FirstAcquirer, h.DeliveryCount},
	})
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	m.Header = nil
	rest, err := m.MarshalBinary()
	m.Header = h
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}
