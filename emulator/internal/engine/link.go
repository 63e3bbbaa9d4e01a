package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
)

type linkKind int

const (
	kindCBS    linkKind = iota // client sender to $cbs
	kindMgmt                   // client sender to <entity>/$management
	kindReply                  // client receiver of $cbs / $management replies
	kindEntity                 // client sender to, or receiver from, an entity
)

type linkState int

const (
	linkPending    linkState = iota // attach received, reply not yet sent (accept-next)
	linkAttached                    // attach answered
	linkDetachSent                  // we detached; waiting for the client's detach
	linkClosed                      // torn down
)

const (
	// linkCreditWindow is the credit granted to client senders.
	linkCreditWindow = 1000
	// maxReceiveBatch bounds one broker receive call of a pump.
	maxReceiveBatch = 256

	sessionFilterKey   amqpwire.Symbol = "com.microsoft:session-filter"
	lockedUntilKey     amqpwire.Symbol = "com.microsoft:locked-until-utc"
	timeoutPropertyKey amqpwire.Symbol = "com.microsoft:timeout"
)

// link is one link endpoint. All fields are guarded by conn.mu.
type link struct {
	s       *session
	name    string
	handle  uint32
	role    amqpwire.Role // our role
	kind    linkKind
	address string // the entity-side address (target of a client sender, source of a client receiver)
	state   linkState
	attach  *amqpwire.Attach

	ctx    context.Context
	cancel context.CancelFunc

	// Our receiver side (client senders).
	rcvDeliveryCount uint32
	rcvCredit        uint32
	cur              *partialDelivery

	// Our sender side (client receivers).
	sndDeliveryCount uint32
	sndCredit        uint32
	replies          []*amqp.Message
	wake             chan struct{}
	nextTag          uint64

	// Entity links.
	entity      *broker.Entity
	mode        broker.ReceiveMode
	sessionLock *broker.SessionLock
}

type partialDelivery struct {
	id       uint32
	settled  bool
	format   uint32
	payload  []byte
	tooLarge bool
}

func (s *session) attachLocked(a *amqpwire.Attach) *amqpwire.Error {
	if _, dup := s.links[a.Handle]; dup {
		return &amqpwire.Error{Condition: "amqp:session:handle-in-use", Description: fmt.Sprintf("handle %d is in use", a.Handle)}
	}
	c := s.c
	ctx, cancel := context.WithCancel(c.ctx)
	l := &link{
		s:      s,
		name:   a.Name,
		handle: a.Handle,
		role:   !a.Role,
		attach: a,
		ctx:    ctx,
		cancel: cancel,
		wake:   make(chan struct{}, 1),
		state:  linkPending,
	}
	s.links[a.Handle] = l
	c.log.Debug("engine: attach", slog.String("link", a.Name), slog.Bool("client_receives", bool(a.Role)), slog.Any("source", a.Source), slog.Any("target", a.Target))
	if a.Role == amqpwire.RoleSender {
		s.attachIncomingLocked(l)
	} else {
		s.attachOutgoingLocked(l)
	}
	return nil
}

// attachIncomingLocked handles a client sender: $cbs, $management or an entity.
func (s *session) attachIncomingLocked(l *link) {
	c := s.c
	a := l.attach
	if a.Target != nil {
		l.address = nodeAddress(a.Target.Address)
	}
	lower := strings.ToLower(l.address)
	switch {
	case l.address == "$cbs":
		l.kind = kindCBS
	case strings.HasSuffix(lower, "/$management"):
		l.kind = kindMgmt
		e, err := c.srv.cfg.Broker.Lookup(l.address[:len(l.address)-len("/$management")])
		if err != nil {
			l.refuseLocked(brokerError(err))
			return
		}
		if !c.claimedLocked(l.address) {
			l.refuseLocked(errUnauthorized(l.address))
			return
		}
		l.entity = e
	default:
		l.kind = kindEntity
		e, err := c.srv.cfg.Broker.Lookup(l.address)
		if err != nil {
			l.refuseLocked(brokerError(err))
			return
		}
		if k := e.Kind(); k != broker.KindQueue && k != broker.KindTopic {
			l.refuseLocked(&amqpwire.Error{Condition: condNotAllowed, Description: fmt.Sprintf("cannot send to %s %q", k, l.address)})
			return
		}
		if !c.claimedLocked(l.address) {
			l.refuseLocked(errUnauthorized(l.address))
			return
		}
		l.entity = e
		c.linksByName[l.name] = l
	}
	reply := &amqpwire.Attach{
		Name:          a.Name,
		Handle:        l.handle,
		Role:          amqpwire.RoleReceiver,
		SndSettleMode: a.SndSettleMode,
		RcvSettleMode: a.RcvSettleMode,
		Source:        a.Source,
		Target:        a.Target,
	}
	if reply.Target == nil {
		reply.Target = &amqpwire.Target{}
	}
	// A non-zero max-message-size is what lets the SDK build batches (§3.1).
	reply.MaxMessageSize = uint64(c.srv.cfg.MaxMessageSize)
	if l.kind == kindEntity {
		reply.Properties = map[amqpwire.Symbol]any{"com.microsoft:max-message-batch-size": uint64(c.srv.cfg.MaxMessageSize)}
	}
	l.state = linkAttached
	s.send(reply, nil)
	l.rcvCredit = linkCreditWindow
	l.sendFlowLocked()
}

// attachOutgoingLocked handles a client receiver: a reply link or an entity.
func (s *session) attachOutgoingLocked(l *link) {
	c := s.c
	a := l.attach
	if a.Source != nil {
		l.address = nodeAddress(a.Source.Address)
	}
	lower := strings.ToLower(l.address)
	if l.address == "$cbs" || strings.HasSuffix(lower, "/$management") {
		// Any reply-link shape is accepted; replyLinkForLocked routes the
		// responses (see reply.go).
		l.kind = kindReply
		c.replyLinkAttachedLocked(l)
		l.state = linkAttached
		s.send(&amqpwire.Attach{
			Name: a.Name, Handle: l.handle, Role: amqpwire.RoleSender,
			SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode,
			Source: a.Source, Target: a.Target,
		}, nil)
		return
	}
	l.kind = kindEntity
	e, err := c.srv.cfg.Broker.Lookup(l.address)
	if err != nil {
		l.refuseLocked(brokerError(err))
		return
	}
	if !c.claimedLocked(l.address) {
		l.refuseLocked(errUnauthorized(l.address))
		return
	}
	l.entity = e
	if a.SndSettleMode == amqpwire.SenderSettleModeSettled {
		l.mode = broker.ReceiveAndDelete
	} else {
		l.mode = broker.PeekLock
	}
	filter, _, wantsSession := sessionFilter(a.Source)
	switch {
	case wantsSession && !e.RequiresSession():
		l.refuseLocked(&amqpwire.Error{Condition: condNotAllowed, Description: fmt.Sprintf("%q is not session-enabled", l.address)})
		return
	case !wantsSession && e.RequiresSession():
		l.refuseLocked(&amqpwire.Error{Condition: condNotAllowed, Description: fmt.Sprintf("%q requires a session receiver", l.address)})
		return
	case !wantsSession:
		l.completeReceiverAttachLocked()
		return
	}
	if id, named := filter.(string); named {
		lock, err := e.AcceptNamedSession(id, l.name)
		if err != nil {
			l.refuseLocked(brokerError(err))
			return
		}
		l.sessionLock = lock
		l.completeReceiverAttachLocked()
		return
	}
	// Accept the next available session: at once when one is available,
	// else wait without blocking the connection.
	lock, err := e.TryAcceptNextSession(l.name)
	if err != nil {
		l.refuseLocked(brokerError(err))
		return
	}
	if lock != nil {
		l.sessionLock = lock
		l.completeReceiverAttachLocked()
		return
	}
	timeout := c.srv.cfg.AcceptNextTimeout
	if v, ok := a.Properties[timeoutPropertyKey]; ok {
		if ms, ok := toInt64(v); ok && ms > 0 {
			// Answer a little before the client's own deadline so that it
			// sees com.microsoft:timeout rather than its context expiring:
			// a tenth of the wait, at least 100 ms (a loaded machine needs
			// that to get the answer through), at most a second or half.
			timeout = msDuration(ms)
			timeout -= min(max(timeout/10, 100*time.Millisecond), time.Second, timeout/2)
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(l.ctx, timeout)
		defer cancel()
		lock, err := e.AcceptSession(ctx, "", l.name)
		c.mu.Lock()
		defer c.mu.Unlock()
		if l.state != linkPending {
			if lock != nil {
				lock.Release()
			}
			return
		}
		if err != nil {
			l.refuseLocked(brokerError(err))
			return
		}
		l.sessionLock = lock
		l.completeReceiverAttachLocked()
	}()
}

// nodeAddress returns the node a link address names. Clients name it either
// by path ("q1", "t1/Subscriptions/s1/$management"), as go-amqp and rhea do,
// or by full URI ("amqps://ns.servicebus.windows.net/q1"), as uamqp (the
// Python SDK) does; the service takes both, so the scheme and host of an
// amqp, amqps or sb URI are dropped. Any other address is kept as given, and
// the lookup refuses it by name when it names no node.
func nodeAddress(addr string) string {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return addr
	}
	switch strings.ToLower(scheme) {
	case "amqp", "amqps", "sb":
	default:
		return addr
	}
	_, path, _ := strings.Cut(rest, "/")
	return path
}

// sessionFilter returns the session filter of a receiver's source: its value
// (a session id string, or nil for "next available") and its descriptor, nil
// when the client sent the value bare. go-amqp describes it (and expects a
// described id back); the JavaScript SDK sends and expects it bare.
func sessionFilter(src *amqpwire.Source) (value, descriptor any, ok bool) {
	if src == nil {
		return nil, nil, false
	}
	v, ok := src.Filter[sessionFilterKey]
	if !ok {
		return nil, nil, false
	}
	switch d := v.(type) {
	case amqpwire.Described:
		return d.Value, d.Descriptor, true
	case *amqpwire.Described:
		if d == nil {
			return nil, nil, true
		}
		return d.Value, d.Descriptor, true
	}
	return v, nil, true
}

// completeReceiverAttachLocked answers an entity receiver's attach and starts
// its pump.
func (l *link) completeReceiverAttachLocked() {
	c := l.s.c
	a := l.attach
	src := &amqpwire.Source{Address: l.address}
	if a.Source != nil {
		cp := *a.Source
		src = &cp
	}
	var props map[amqpwire.Symbol]any
	if l.sessionLock != nil {
		// The session id goes back in the form the filter came in.
		var id any = l.sessionLock.ID()
		if _, desc, _ := sessionFilter(a.Source); desc != nil {
			id = amqpwire.Described{Descriptor: desc, Value: id}
		}
		src.Filter = map[amqpwire.Symbol]any{sessionFilterKey: id}
		props = map[amqpwire.Symbol]any{lockedUntilKey: dotnetTicks(l.sessionLock.LockedUntil())}
	}
	tgt := a.Target
	if tgt == nil {
		tgt = &amqpwire.Target{}
	}
	l.state = linkAttached
	l.s.send(&amqpwire.Attach{
		Name: a.Name, Handle: l.handle, Role: amqpwire.RoleSender,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode,
		Source: src, Target: tgt, Properties: props,
	}, nil)
	c.linksByName[l.name] = l
	c.wg.Add(1)
	go l.pump()
	if lock := l.sessionLock; lock != nil {
		c.wg.Add(1)
		go l.watchSessionLock(lock)
	}
}

// refuseLocked answers an attach with a null terminus and detaches with e.
func (l *link) refuseLocked(e *amqpwire.Error) {
	l.s.c.log.Debug("engine: attach refused", slog.String("link", l.name), slog.String("address", l.address), slog.String("condition", string(e.Condition)))
	l.s.send(l.nullAttach(), nil)
	l.state = linkAttached
	l.detachLocked(e)
}

// nullAttach is our answer to the client's attach without a terminus: the
// link exists only to be detached.
func (l *link) nullAttach() *amqpwire.Attach {
	a := l.attach
	return &amqpwire.Attach{
		Name: a.Name, Handle: l.handle, Role: l.role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode,
	}
}

// detachLocked detaches the link from our side (closed=true) with e.
func (l *link) detachLocked(e *amqpwire.Error) {
	if l.state != linkAttached {
		return
	}
	l.releaseResourcesLocked()
	l.state = linkDetachSent
	if !l.s.ended {
		l.s.send(&amqpwire.Detach{Handle: l.handle, Closed: true, Error: e}, nil)
	}
}

// teardownLocked forgets the link after the client's detach or the end of its
// session or connection.
func (l *link) teardownLocked() {
	l.releaseResourcesLocked()
	l.state = linkClosed
}

func (l *link) releaseResourcesLocked() {
	l.cancel()
	c := l.s.c
	if c.linksByName[l.name] == l {
		delete(c.linksByName, l.name)
	}
	if l.kind == kindReply {
		c.replyLinkGoneLocked(l)
	}
	if l.sessionLock != nil {
		l.sessionLock.Release()
	}
	l.replies = nil
	l.cur = nil
	// Transfers still waiting for the session window die with the link. The
	// client never got their deliveries whole, so their messages go back to
	// the entity at once instead of staying locked until the lock expires.
	kept := l.s.held[:0]
	var undelivered []uint32
	for _, h := range l.s.held {
		switch {
		case h.t.Handle != l.handle:
			kept = append(kept, h)
		case len(undelivered) == 0 || undelivered[len(undelivered)-1] != h.deliveryID:
			undelivered = append(undelivered, h.deliveryID)
		}
	}
	clear(l.s.held[len(kept):])
	l.s.held = kept
	for _, id := range undelivered {
		if od := l.s.unsettled[id]; od != nil && od.l == l {
			_ = od.entity.Release(od.token)
		}
		if od := l.s.heldRAD[id]; od != nil && od.l == l {
			delete(l.s.heldRAD, id)
			_ = od.entity.Release(od.token)
		}
	}
	// Forget our unsettled deliveries on this link; their message locks stay
	// until they expire, so $management settlement still works (§8).
	for id, d := range l.s.unsettled {
		if d.l == l {
			delete(l.s.unsettled, id)
		}
	}
}

func (l *link) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// sendFlowLocked tells a client sender our delivery count and credit.
func (l *link) sendFlowLocked() {
	h, dc, cr := l.handle, l.rcvDeliveryCount, l.rcvCredit
	l.s.send(l.s.flowFields(&amqpwire.Flow{Handle: &h, DeliveryCount: &dc, LinkCredit: &cr}), nil)
}

// flowLocked applies a link flow from the client.
func (l *link) flowLocked(f *amqpwire.Flow) {
	if l.role == amqpwire.RoleReceiver {
		if f.Echo {
			l.sendFlowLocked()
		}
		return
	}
	var dc uint32 // the client's delivery-count; before its first flow, our initial count 0
	if f.DeliveryCount != nil {
		dc = *f.DeliveryCount
	}
	var credit uint32
	if f.LinkCredit != nil {
		credit = dc + *f.LinkCredit - l.sndDeliveryCount
		if int32(credit) < 0 {
			credit = 0
		}
	}
	l.sndCredit = credit
	if f.Drain {
		l.drainLocked()
		return
	}
	if f.Echo {
		l.sendSenderFlowLocked(false)
	}
	if l.kind == kindReply {
		l.flushRepliesLocked()
		return
	}
	l.signal()
}

// sendSenderFlowLocked tells a client receiver our delivery count and its
// remaining credit.
func (l *link) sendSenderFlowLocked(drain bool) {
	h, sdc, cr := l.handle, l.sndDeliveryCount, l.sndCredit
	l.s.send(l.s.flowFields(&amqpwire.Flow{Handle: &h, DeliveryCount: &sdc, LinkCredit: &cr, Drain: drain}), nil)
}

// drainLocked answers a client receiver's drain (the JavaScript SDK drains
// at the end of every receiveMessages call and closes the link when no
// answer comes within 200 ms): it sends what is available now, uses up the
// rest of the credit and says so in a flow with drain set.
func (l *link) drainLocked() {
	switch {
	case l.kind == kindReply:
		l.flushRepliesLocked()
	case l.kind == kindEntity && l.state == linkAttached && l.sndCredit > 0 && l.entity != nil:
		opts := broker.ReceiveOptions{Mode: broker.PeekLock, Session: l.sessionLock}
		if ds, err := l.entity.TryReceive(int(min(l.sndCredit, maxReceiveBatch)), opts); err == nil {
			if !l.s.c.claimedLocked(l.address) || !l.s.c.srv.pressure.take(len(ds), false) {
				// No token, or no credits this second (throttled: nothing now).
				l.giveBack(ds)
			} else {
				for i, d := range ds {
					if l.sndCredit == 0 {
						l.giveBack(ds[i:])
						break
					}
					l.deliverLocked(d)
				}
			}
		}
	}
	if l.state != linkAttached {
		return
	}
	l.sndDeliveryCount += l.sndCredit
	l.sndCredit = 0
	l.sendSenderFlowLocked(true)
}

// transferLocked takes one transfer frame of a client sender.
func (l *link) transferLocked(t *amqpwire.Transfer, payload []byte) *amqpwire.Error {
	if l.role != amqpwire.RoleReceiver {
		return &amqpwire.Error{Condition: "amqp:not-allowed", Description: "transfer on a link where the client receives"}
	}
	if l.state != linkAttached {
		return nil // detached by us; the client will notice
	}
	if l.cur == nil {
		if t.DeliveryID == nil {
			return &amqpwire.Error{Condition: "amqp:not-allowed", Description: "first transfer of a delivery without delivery-id"}
		}
		d := &partialDelivery{id: *t.DeliveryID}
		if t.Settled != nil {
			d.settled = *t.Settled
		}
		if t.MessageFormat != nil {
			d.format = *t.MessageFormat
		}
		l.cur = d
	} else if t.Settled != nil && *t.Settled {
		l.cur.settled = true
	}
	d := l.cur
	if t.Aborted {
		l.cur = nil
		return nil
	}
	limit := int(l.s.c.srv.cfg.MaxMessageSize) + 64*1024
	if !d.tooLarge {
		if len(d.payload)+len(payload) > limit {
			d.tooLarge = true
			d.payload = nil
		} else {
			d.payload = append(d.payload, payload...)
		}
	}
	if t.More {
		return nil
	}
	l.cur = nil
	l.rcvDeliveryCount++
	if l.rcvCredit > 0 {
		l.rcvCredit--
	}
	state, reply := l.deliveryLocked(d)
	if !d.settled {
		l.s.send(&amqpwire.Disposition{Role: amqpwire.RoleReceiver, First: d.id, Settled: true, State: state}, nil)
	}
	// A $cbs or $management response goes out only once its request is
	// settled, as on the service: uamqp fails the operation when the response
	// overtakes the request's disposition, and its C code then writes into the
	// freed operation when the disposition comes.
	if reply != nil {
		reply()
	}
	if l.state == linkAttached && l.rcvCredit < linkCreditWindow/2 {
		l.rcvCredit = linkCreditWindow
		l.sendFlowLocked()
	}
	return nil
}

// deliveryLocked processes a complete message from a client sender and
// returns the outcome and, for a $cbs or $management request, the sending of
// its response, which the caller runs after settling the request.
func (l *link) deliveryLocked(d *partialDelivery) (amqpwire.DeliveryState, func()) {
	c := l.s.c
	if d.tooLarge {
		return &amqpwire.Rejected{Error: &amqpwire.Error{Condition: condMessageSizeExceeded, Description: fmt.Sprintf("message larger than %d bytes", c.srv.cfg.MaxMessageSize)}}, nil
	}
	var handle func(*amqp.Message) *amqp.Message
	switch l.kind {
	case kindCBS:
		handle = c.handleCBSLocked
	case kindMgmt:
		if c.srv.takeMgmtDrop() {
			c.log.Debug("engine: dropping the connection on a management request (fault injected)")
			c.abort()
			return &amqpwire.Accepted{}, nil // never sent: the connection is gone
		}
		handle = func(req *amqp.Message) *amqp.Message { return c.handleManagementLocked(l, req) }
	case kindEntity:
		// The token that authorized the attach must still be valid.
		if !c.claimedLocked(l.address) {
			return &amqpwire.Rejected{Error: errUnauthorized(l.address)}, nil
		}
		return l.sendToEntityLocked(d), nil
	default:
		return &amqpwire.Accepted{}, nil
	}
	req, err := decodeMessage(d.payload)
	if err != nil {
		return rejectDecode(err), nil
	}
	resp := handle(req)
	return &amqpwire.Accepted{}, func() { c.replyLocked(l, req, resp) }
}

func rejectDecode(err error) amqpwire.DeliveryState {
	return &amqpwire.Rejected{Error: &amqpwire.Error{Condition: "amqp:decode-error", Description: err.Error()}}
}

func decodeMessage(b []byte) (*amqp.Message, error) {
	m := &amqp.Message{}
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("decode message: %w", err)
	}
	return m, nil
}

func (l *link) flushRepliesLocked() {
	for len(l.replies) > 0 && l.sndCredit > 0 && l.state == linkAttached {
		m := l.replies[0]
		l.replies = l.replies[1:]
		b, err := encodeResponse(m)
		if err != nil {
			l.s.c.log.Error("engine: encode reply", slog.Any("error", err))
			continue
		}
		l.nextTag++
		l.transferOutLocked(b, tag8(l.nextTag), true)
	}
}

func tag8(n uint64) []byte {
	return []byte{byte(n >> 56), byte(n >> 48), byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

// transferOutLocked sends one delivery to the client, split into frames no
// larger than the client's max-frame-size. It returns the delivery-id.
func (l *link) transferOutLocked(payload, tag []byte, settled bool) uint32 {
	s := l.s
	id := s.nextDeliveryID
	s.nextDeliveryID++
	format := uint32(0)
	first := &amqpwire.Transfer{Handle: l.handle, DeliveryID: &id, DeliveryTag: tag, MessageFormat: &format, Settled: &settled, More: true}
	hdr, err := amqpwire.AppendValue(nil, first)
	if err != nil {
		s.c.log.Error("engine: encode transfer", slog.Any("error", err))
		return id
	}
	room := int(s.c.peerMaxFrame) - 8 - len(hdr) - 8
	for off := 0; ; {
		end := min(off+room, len(payload))
		t := &amqpwire.Transfer{Handle: l.handle, More: end < len(payload)}
		if off == 0 {
			t.DeliveryID, t.DeliveryTag, t.MessageFormat, t.Settled = &id, tag, &format, &settled
		}
		s.sendTransferLocked(t, payload[off:end], id)
		off = end
		if off >= len(payload) {
			break
		}
	}
	l.sndDeliveryCount++
	if l.sndCredit > 0 {
		l.sndCredit--
	}
	return id
}
