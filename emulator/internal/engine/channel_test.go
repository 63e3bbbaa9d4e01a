package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// TestEndOfAbandonedBeginKeepsConnection covers a session whose begin the
// client gave up on before writing it: go-amqp abandons it and, on the next
// NewSession, sends an end on a channel the server has never seen. The
// connection must survive that and keep working.
func TestEndOfAbandonedBeginKeepsConnection(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, plain())

	dead, deadCancel := context.WithCancel(ctx)
	deadCancel()
	_, err := c.NewSession(dead, nil)
	require.ErrorIs(t, err, context.Canceled)

	s, err := c.NewSession(ctx, nil) // sends the abandoned session's end first
	require.NoError(t, err)
	snd, err := s.NewSender(ctx, "q1", nil)
	require.NoError(t, err, "the connection survives the end on an unknown channel")
	require.NoError(t, snd.Close(ctx))
	require.NoError(t, s.Close(ctx))
}

// TestDetachOfPendingAcceptNextAttachesFirst abandons an accept-next receiver
// while the server still waits for a session, then opens another link on the
// same AMQP session: go-amqp first detaches the abandoned link. The server
// must answer with an attach before its detach (a link it never attached
// cannot be detached), or the client ends the whole session with
// unattached-handle.
func TestDetachOfPendingAcceptNextAttachesFirst(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	require.NoError(t, b.CreateQueue("sq", broker.EntityProperties{RequiresSession: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, plain())
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)

	short, shortCancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer shortCancel()
	_, err = s.NewReceiver(short, "sq", &amqp.ReceiverOptions{
		Filters: []amqp.LinkFilter{amqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000c, nil)},
	})
	require.ErrorIs(t, err, context.DeadlineExceeded, "no session to accept")

	snd, err := s.NewSender(ctx, "q1", nil) // detaches the abandoned receiver first
	require.NoError(t, err)
	require.NoError(t, snd.Send(ctx, amqp.NewMessage([]byte("still here")), nil), "the session survives")
	require.NoError(t, s.Close(ctx))
}

// TestBeginOvertakingTheEndAnswerKeepsTheNewSession replays go-amqp's order
// after the server ends a session: the client frees the channel on reading
// our end and may begin a new session on it before its answering end goes
// out. That end must not end the new session.
func TestBeginOvertakingTheEndAnswerKeepsTheNewSession(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	rc := dialPlain(t, addr)
	rc.write(2, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	rc.read()
	rc.write(2, &amqpwire.Detach{Handle: 5, Closed: true}) // unknown handle: the server ends the session
	end, ok := rc.read().Body.(*amqpwire.End)
	require.True(t, ok)
	require.NotNil(t, end.Error)

	rc.write(2, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100}) // overtakes…
	rc.write(2, &amqpwire.End{})                                           // …the answer to the server's end
	_, ok = rc.read().Body.(*amqpwire.Begin)
	require.True(t, ok)

	rc.write(2, &amqpwire.Attach{Name: "cbs", Handle: 0, Role: amqpwire.RoleSender, Target: &amqpwire.Target{Address: "$cbs"}, Source: &amqpwire.Source{}})
	body := rc.read().Body
	_, ok = body.(*amqpwire.Attach)
	require.True(t, ok, "the new session is alive; got %T %+v", body, body)

	rc.write(2, &amqpwire.End{})
	for body = rc.read().Body; ; body = rc.read().Body {
		if _, isFlow := body.(*amqpwire.Flow); !isFlow { // the $cbs link's credit
			break
		}
	}
	end, ok = body.(*amqpwire.End)
	require.True(t, ok, "the new session ends on the client's next end; got %T", body)
	require.Nil(t, end.Error)
}

// TestDetachReturnsDeliveriesHeldForTheSessionWindow detaches a peek-lock
// receiver while some of its deliveries still wait for the client's session
// window. The client never saw those, so their messages must be available
// again at once, not only when their locks expire.
func TestDetachReturnsDeliveriesHeldForTheSessionWindow(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	require.NoError(t, b.CreateQueue("long", broker.EntityProperties{LockDuration: time.Hour}))
	enqueue(t, b, "long", 3)
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 1, OutgoingWindow: 100})
	p.read()
	attach := func(h uint32, name string) {
		p.write(0, &amqpwire.Attach{Name: name, Handle: h, Role: amqpwire.RoleReceiver, RcvSettleMode: amqpwire.ReceiverSettleModeSecond,
			Source: &amqpwire.Source{Address: "long"}, Target: &amqpwire.Target{}})
		_, ok := p.read().Body.(*amqpwire.Attach)
		require.True(t, ok)
	}
	attach(0, "first")
	h, dc, credit := uint32(0), uint32(0), uint32(3)
	p.write(0, &amqpwire.Flow{IncomingWindow: 1, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	_, ok := p.read().Body.(*amqpwire.Transfer)
	require.True(t, ok, "the window lets one transfer through; two are held")

	p.write(0, &amqpwire.Detach{Handle: 0, Closed: true})
	_, ok = p.read().Body.(*amqpwire.Detach)
	require.True(t, ok)

	// A new link, with the window open again, gets the two held messages
	// now; the one the client saw stays locked (reference §8).
	attach(1, "second")
	next := uint32(1)
	h = 1
	p.write(0, &amqpwire.Flow{NextIncomingID: &next, IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	n := 0
	for {
		_ = p.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		fr, err := amqpwire.ReadFrame(p.br, 1<<20)
		if err != nil {
			break
		}
		if tr, ok := fr.Body.(*amqpwire.Transfer); ok {
			require.Equal(t, uint32(1), tr.Handle)
			n++
		}
	}
	require.Equal(t, 2, n)
}

// TestReceiveAndDeleteKeepsWhatItNeverSent detaches a receive-and-delete
// receiver while two of its three deliveries wait for the client's session
// window: only the message that went out is deleted.
func TestReceiveAndDeleteKeepsWhatItNeverSent(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	q := enqueue(t, b, "q1", 3)
	p := dialPlain(t, addr)
	p.openSettledReceiver("rad", 1)
	h, dc, credit := uint32(0), uint32(0), uint32(3)
	p.write(0, &amqpwire.Flow{IncomingWindow: 1, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	tr, ok := p.read().Body.(*amqpwire.Transfer)
	require.True(t, ok)
	require.NotNil(t, tr.Settled)
	require.True(t, *tr.Settled)
	require.Eventually(t, func() bool { return q.Info().Counts.Active == 2 }, 2*time.Second, time.Millisecond,
		"the message sent is deleted; the two held stay")

	p.write(0, &amqpwire.Detach{Handle: 0, Closed: true})
	_, ok = p.read().Body.(*amqpwire.Detach)
	require.True(t, ok)
	require.Equal(t, int64(2), q.Info().Counts.Active)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	ds, err := q.Receive(ctx, 10, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})
	require.NoError(t, err)
	require.Len(t, ds, 2, "and they are available again, not locked")
}
