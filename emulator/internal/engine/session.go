package engine

import (
	"fmt"

	"github.com/seqbus/seqbus/emulator/amqpwire"
)

// sessionWindow is the incoming and outgoing window the server announces. A
// session flow refreshes the client's view after every sessionWindow/2
// transfers received.
const sessionWindow = 5000

// session is one AMQP session of a connection. All fields are guarded by
// conn.mu.
type session struct {
	c  *conn
	ch uint16

	nextIncomingID    uint32 // transfer-id expected next from the client
	receivedSinceFlow uint32
	nextOutgoingID    uint32 // our next transfer-id
	nextDeliveryID    uint32 // our next delivery-id
	// remoteIncomingWindow is how many more transfer frames the client
	// accepts; frames beyond it wait in held until its next session flow.
	remoteIncomingWindow uint32
	held                 []heldTransfer

	links     map[uint32]*link        // by the client's handle (ours mirrors it)
	unsettled map[uint32]*outDelivery // our unsettled deliveries by delivery-id
	incoming  map[uint32]*link        // client delivery-id → link, for multi-frame continuation
	// heldRAD holds receive-and-delete deliveries by delivery-id whose frames
	// wait in held; their messages are deleted once the last frame is sent.
	heldRAD map[uint32]*outDelivery
	ended   bool
	// staleEnd says the client has yet to answer our end of the previous
	// session on this channel; its next end is that answer.
	staleEnd bool
}

// heldTransfer is a transfer frame waiting for the client's incoming window.
type heldTransfer struct {
	t          *amqpwire.Transfer
	payload    []byte
	deliveryID uint32 // of the delivery the frame belongs to
}

func newSession(c *conn, ch uint16, b *amqpwire.Begin) *session {
	return &session{
		c:                    c,
		ch:                   ch,
		remoteIncomingWindow: b.IncomingWindow,
		nextIncomingID:       b.NextOutgoingID,
		links:                make(map[uint32]*link),
		unsettled:            make(map[uint32]*outDelivery),
		incoming:             make(map[uint32]*link),
		heldRAD:              make(map[uint32]*outDelivery),
	}
}

// endLocked forgets the session: every link is torn down without frames.
func (s *session) endLocked() {
	if s.ended {
		return
	}
	s.ended = true
	for _, l := range s.links {
		l.teardownLocked()
	}
	s.links = map[uint32]*link{}
	// Message locks of unsettled deliveries are kept until they expire, so
	// the SDK can still settle them through $management (reference §8).
	s.unsettled = map[uint32]*outDelivery{}
	s.heldRAD = map[uint32]*outDelivery{}
}

func (s *session) send(body any, payload []byte) { s.c.send(s.ch, body, payload) }

// sendTransferLocked sends a transfer frame if the client's incoming window
// allows, and holds it (in order) otherwise.
func (s *session) sendTransferLocked(t *amqpwire.Transfer, payload []byte, deliveryID uint32) {
	if len(s.held) > 0 || s.remoteIncomingWindow == 0 {
		s.held = append(s.held, heldTransfer{t: t, payload: payload, deliveryID: deliveryID})
		return
	}
	s.remoteIncomingWindow--
	s.nextOutgoingID++
	s.send(t, payload)
}

// releaseHeldLocked sends held transfers while the window allows.
func (s *session) releaseHeldLocked() {
	for len(s.held) > 0 && s.remoteIncomingWindow > 0 {
		h := s.held[0]
		s.held[0] = heldTransfer{}
		s.held = s.held[1:]
		s.remoteIncomingWindow--
		s.nextOutgoingID++
		s.send(h.t, h.payload)
		if od := s.heldRAD[h.deliveryID]; od != nil && !h.t.More {
			delete(s.heldRAD, h.deliveryID)
			od.deleteSentLocked()
		}
	}
}

// flowFields fills the session part of a flow frame.
func (s *session) flowFields(f *amqpwire.Flow) *amqpwire.Flow {
	nid := s.nextIncomingID
	f.NextIncomingID = &nid
	f.IncomingWindow = sessionWindow
	f.NextOutgoingID = s.nextOutgoingID
	f.OutgoingWindow = sessionWindow
	s.receivedSinceFlow = 0
	return f
}

// handleLocked dispatches a session-level frame. A returned error ends the session.
func (s *session) handleLocked(body any, payload []byte) *amqpwire.Error {
	switch b := body.(type) {
	case *amqpwire.Attach:
		return s.attachLocked(b)
	case *amqpwire.Flow:
		// The client's incoming window, counted from our next transfer-id.
		var base uint32 // initial outgoing id
		if b.NextIncomingID != nil {
			base = *b.NextIncomingID
		}
		s.remoteIncomingWindow = base + b.IncomingWindow - s.nextOutgoingID
		if int32(s.remoteIncomingWindow) < 0 {
			s.remoteIncomingWindow = 0
		}
		s.releaseHeldLocked()
		if b.Handle == nil {
			if b.Echo {
				s.send(s.flowFields(&amqpwire.Flow{}), nil)
			}
			return nil
		}
		l := s.links[*b.Handle]
		if l == nil {
			return &amqpwire.Error{Condition: "amqp:session:unattached-handle", Description: fmt.Sprintf("flow on unknown handle %d", *b.Handle)}
		}
		l.flowLocked(b)
	case *amqpwire.Transfer:
		s.nextIncomingID++
		s.receivedSinceFlow++
		if s.receivedSinceFlow >= sessionWindow/2 {
			s.send(s.flowFields(&amqpwire.Flow{}), nil)
		}
		l := s.links[b.Handle]
		if l == nil {
			return &amqpwire.Error{Condition: "amqp:session:unattached-handle", Description: fmt.Sprintf("transfer on unknown handle %d", b.Handle)}
		}
		return l.transferLocked(b, payload)
	case *amqpwire.Disposition:
		if b.Role == amqpwire.RoleReceiver {
			s.dispositionLocked(b)
		}
	case *amqpwire.Detach:
		l := s.links[b.Handle]
		if l == nil {
			return &amqpwire.Error{Condition: "amqp:session:unattached-handle", Description: fmt.Sprintf("detach on unknown handle %d", b.Handle)}
		}
		delete(s.links, b.Handle)
		if l.state == linkPending {
			// The client gave up on an attach we have not answered yet
			// (accept-next still waiting). A link is detached only once
			// attached, so answer the attach, without a terminus, first;
			// a bare detach makes go-amqp end the session with
			// unattached-handle.
			s.send(l.nullAttach(), nil)
		}
		if l.state != linkDetachSent {
			s.send(&amqpwire.Detach{Handle: b.Handle, Closed: true}, nil)
		}
		l.teardownLocked()
	default:
		return &amqpwire.Error{Condition: "amqp:not-implemented", Description: fmt.Sprintf("unexpected %T", body)}
	}
	return nil
}

// dispositionLocked applies the client's settlement of our deliveries.
func (s *session) dispositionLocked(d *amqpwire.Disposition) {
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	for id := d.First; ; id++ {
		if od := s.unsettled[id]; od != nil {
			delete(s.unsettled, id)
			var confirm amqpwire.DeliveryState
			if d.Settled {
				s.c.srv.pressure.charge(1) // settled by the client already: nothing to refuse
				confirm = od.settleLocked(d.State)
			} else if e := s.c.refuseLinkOp(1); e != nil {
				// Refused and not carried out: the message keeps its lock. (go-amqp takes
				// any confirming disposition as final, so the SDK cannot settle it on
				// this link again; it comes back when its lock expires.)
				confirm = &amqpwire.Rejected{Error: e}
			} else {
				confirm = od.settleLocked(d.State)
			}
			if !d.Settled {
				s.send(&amqpwire.Disposition{Role: amqpwire.RoleSender, First: id, Settled: true, State: confirm}, nil)
			}
		}
		// Unknown ids belong to links already detached (the client learns
		// that from the detach) or were settled before: nothing to confirm.
		if id == last || last-d.First > 1<<16 {
			break
		}
	}
}
