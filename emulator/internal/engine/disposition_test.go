package engine_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// rawPeer is a hand-driven AMQP client for protocol-level tests.
type rawPeer struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (p *rawPeer) write(ch uint16, body any) {
	p.t.Helper()
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Channel: ch, Body: body})
	require.NoError(p.t, err)
	_, err = p.nc.Write(b)
	require.NoError(p.t, err)
}

// read returns the next non-empty frame.
func (p *rawPeer) read() amqpwire.Frame {
	p.t.Helper()
	for {
		_ = p.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		fr, err := amqpwire.ReadFrame(p.br, 1<<20)
		require.NoError(p.t, err)
		if fr.Body != nil {
			return fr
		}
	}
}

// enqueue sends n one-byte messages straight into the broker queue and returns it.
func enqueue(t *testing.T, b *broker.Broker, queue string, n int) *broker.Entity {
	t.Helper()
	q, err := b.Lookup(queue)
	require.NoError(t, err)
	for range n {
		require.NoError(t, q.Send(t.Context(), []*amqp.Message{amqp.NewMessage([]byte("m"))}))
	}
	return q
}

// openSettledReceiver begins a session with the given incoming window on channel 0 and attaches a
// receive-and-delete (pre-settled) receiver on queue q1 as handle 0, returning the broker's attach.
func (p *rawPeer) openSettledReceiver(name string, window uint32) *amqpwire.Attach {
	p.t.Helper()
	p.write(0, &amqpwire.Begin{IncomingWindow: window, OutgoingWindow: 100})
	p.read()
	p.write(0, &amqpwire.Attach{Name: name, Handle: 0, Role: amqpwire.RoleReceiver, SndSettleMode: amqpwire.SenderSettleModeSettled,
		Source: &amqpwire.Source{Address: "q1"}, Target: &amqpwire.Target{}})
	attach, ok := p.read().Body.(*amqpwire.Attach)
	require.True(p.t, ok)
	return attach
}

// dialPlain authenticates with SASL PLAIN and exchanges open frames.
func dialPlain(t *testing.T, addr string) *rawPeer {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	p := &rawPeer{t: t, nc: nc, br: bufio.NewReader(nc)}
	_, err = nc.Write(amqpwire.AppendProtocolHeader(nil, amqpwire.ProtocolHeader{ProtocolID: amqpwire.ProtocolSASL, Major: 1}))
	require.NoError(t, err)
	h, err := amqpwire.ReadProtocolHeader(p.br)
	require.NoError(t, err)
	require.Equal(t, amqpwire.ProtocolSASL, h.ProtocolID)
	fr, err := amqpwire.ReadFrame(p.br, 1<<20)
	require.NoError(t, err)
	mechs, ok := fr.Body.(*amqpwire.SASLMechanisms)
	require.True(t, ok, "got %T", fr.Body)
	require.Contains(t, mechs.Mechanisms, amqpwire.Symbol("ANONYMOUS"))
	require.Contains(t, mechs.Mechanisms, amqpwire.Symbol("PLAIN"))
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeSASL, Body: &amqpwire.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00" + keyName + "\x00" + key)}})
	require.NoError(t, err)
	_, err = nc.Write(b)
	require.NoError(t, err)
	fr, err = amqpwire.ReadFrame(p.br, 1<<20)
	require.NoError(t, err)
	outcome, ok := fr.Body.(*amqpwire.SASLOutcome)
	require.True(t, ok, "got %T", fr.Body)
	require.Equal(t, amqpwire.SASLCodeOK, outcome.Code)

	_, err = nc.Write(amqpwire.AppendProtocolHeader(nil, amqpwire.ProtocolHeader{ProtocolID: amqpwire.ProtocolAMQP, Major: 1}))
	require.NoError(t, err)
	_, err = amqpwire.ReadProtocolHeader(p.br)
	require.NoError(t, err)
	p.write(0, &amqpwire.Open{ContainerID: "raw", MaxFrameSize: 65536})
	_, ok = p.read().Body.(*amqpwire.Open)
	require.True(t, ok)
	return p
}

func TestDispositionRangeSettlesEveryDelivery(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	q := enqueue(t, b, "q1", 3)
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	_, ok := p.read().Body.(*amqpwire.Begin)
	require.True(t, ok)
	p.write(0, &amqpwire.Attach{Name: "r", Handle: 0, Role: amqpwire.RoleReceiver, RcvSettleMode: amqpwire.ReceiverSettleModeSecond,
		Source: &amqpwire.Source{Address: "q1"}, Target: &amqpwire.Target{}})
	attach, ok := p.read().Body.(*amqpwire.Attach)
	require.True(t, ok)
	require.NotNil(t, attach.Source)
	require.Equal(t, amqpwire.ReceiverSettleModeSecond, attach.RcvSettleMode)

	nid, h, dc, credit := uint32(0), uint32(0), uint32(0), uint32(3)
	p.write(0, &amqpwire.Flow{NextIncomingID: &nid, IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	var ids []uint32
	for range 3 {
		tr, ok := p.read().Body.(*amqpwire.Transfer)
		require.True(t, ok)
		require.NotNil(t, tr.DeliveryID)
		require.Len(t, tr.DeliveryTag, 16)
		require.NotNil(t, tr.Settled)
		require.False(t, *tr.Settled, "peek-lock deliveries are unsettled")
		ids = append(ids, *tr.DeliveryID)
	}
	require.Equal(t, []uint32{ids[0], ids[0] + 1, ids[0] + 2}, ids)

	last := ids[2]
	p.write(0, &amqpwire.Disposition{Role: amqpwire.RoleReceiver, First: ids[0], Last: &last, State: &amqpwire.Accepted{}})
	confirmed := map[uint32]bool{}
	for range 3 {
		d, ok := p.read().Body.(*amqpwire.Disposition)
		require.True(t, ok)
		require.Equal(t, amqpwire.RoleSender, d.Role)
		require.True(t, d.Settled)
		require.IsType(t, &amqpwire.Accepted{}, d.State)
		confirmed[d.First] = true
	}
	require.Len(t, confirmed, 3)
	require.Zero(t, q.Info().Counts.Active, "all three completed")
}

func TestNoTransferWithoutCredit(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	q, err := b.Lookup("q1")
	require.NoError(t, err)
	require.NoError(t, q.Send(t.Context(), []*amqp.Message{amqp.NewMessage([]byte("a")), amqp.NewMessage([]byte("b"))}))
	p := dialPlain(t, addr)
	attach := p.openSettledReceiver("r", 100)
	require.Equal(t, amqpwire.SenderSettleModeSettled, attach.SndSettleMode, "settle mode echoed")

	// No flow yet: nothing may arrive.
	_ = p.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		fr, err := amqpwire.ReadFrame(p.br, 1<<20)
		if err != nil {
			break
		}
		require.Nil(t, fr.Body, "only heartbeats before credit, got %T", fr.Body)
	}
	nid, h, dc, credit := uint32(0), uint32(0), uint32(0), uint32(1)
	p.write(0, &amqpwire.Flow{NextIncomingID: &nid, IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	tr, ok := p.read().Body.(*amqpwire.Transfer)
	require.True(t, ok)
	require.True(t, *tr.Settled, "receive-and-delete deliveries are settled")
	_ = p.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		fr, err := amqpwire.ReadFrame(p.br, 1<<20)
		if err != nil {
			break
		}
		require.Nil(t, fr.Body, "one credit, one transfer; got %T", fr.Body)
	}
	require.Equal(t, int64(1), q.Info().Counts.Active)
}

func TestOversizedMessageIsRejected(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{MaxMessageSize: 1000})
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	p.read()
	p.write(0, &amqpwire.Attach{Name: "s", Handle: 0, Role: amqpwire.RoleSender, Source: &amqpwire.Source{}, Target: &amqpwire.Target{Address: "q1"}})
	attach, ok := p.read().Body.(*amqpwire.Attach)
	require.True(t, ok)
	require.Equal(t, uint64(1000), attach.MaxMessageSize, "the limit is announced")
	_, ok = p.read().Body.(*amqpwire.Flow)
	require.True(t, ok, "credit granted right after attach")

	for i, size := range []int{500, 5000} {
		payload, err := amqp.NewMessage(make([]byte, size)).MarshalBinary()
		require.NoError(t, err)
		id, format, settled := uint32(i), uint32(0), false
		fr, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Body: &amqpwire.Transfer{
			Handle: 0, DeliveryID: &id, DeliveryTag: []byte{byte(i)}, MessageFormat: &format, Settled: &settled,
		}, Payload: payload})
		require.NoError(t, err)
		_, err = p.nc.Write(fr)
		require.NoError(t, err)
		d, ok := p.read().Body.(*amqpwire.Disposition)
		require.True(t, ok)
		require.Equal(t, id, d.First)
		require.True(t, d.Settled)
		if size <= 1000 {
			require.IsType(t, &amqpwire.Accepted{}, d.State)
			continue
		}
		rej, ok := d.State.(*amqpwire.Rejected)
		require.True(t, ok, "got %T", d.State)
		require.Equal(t, amqpwire.Symbol("amqp:link:message-size-exceeded"), rej.Error.Condition)
	}
	q, err := b.Lookup("q1")
	require.NoError(t, err)
	require.Equal(t, int64(1), q.Info().Counts.Active)
}

// TestOversizedBatchIsRejected: a batch is one AMQP message, so its total size
// counts against the link's max-message-size, not only each item's.
func TestOversizedBatchIsRejected(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{MaxMessageSize: 1000})
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	p.read()
	p.write(0, &amqpwire.Attach{Name: "s", Handle: 0, Role: amqpwire.RoleSender, Source: &amqpwire.Source{}, Target: &amqpwire.Target{Address: "q1"}})
	p.read() // attach
	p.read() // flow

	batch := func(items, size int) []byte {
		env := &amqp.Message{}
		for range items {
			item, err := amqp.NewMessage(make([]byte, size)).MarshalBinary()
			require.NoError(t, err)
			env.Data = append(env.Data, item)
		}
		payload, err := env.MarshalBinary()
		require.NoError(t, err)
		return payload
	}
	for i, tc := range []struct {
		payload []byte
		ok      bool
	}{
		{payload: batch(3, 200), ok: true},
		{payload: batch(3, 600)}, // each item fits, the batch does not
	} {
		id, format, settled := uint32(i), uint32(0x80013700), false
		fr, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Body: &amqpwire.Transfer{
			Handle: 0, DeliveryID: &id, DeliveryTag: []byte{byte(i)}, MessageFormat: &format, Settled: &settled,
		}, Payload: tc.payload})
		require.NoError(t, err)
		_, err = p.nc.Write(fr)
		require.NoError(t, err)
		d, ok := p.read().Body.(*amqpwire.Disposition)
		require.True(t, ok)
		require.Equal(t, id, d.First)
		if tc.ok {
			require.IsType(t, &amqpwire.Accepted{}, d.State, "batch of %d bytes", len(tc.payload))
			continue
		}
		rej, ok := d.State.(*amqpwire.Rejected)
		require.True(t, ok, "batch of %d bytes: got %T", len(tc.payload), d.State)
		require.Equal(t, amqpwire.Symbol("amqp:link:message-size-exceeded"), rej.Error.Condition)
	}
	q, err := b.Lookup("q1")
	require.NoError(t, err)
	require.Equal(t, int64(3), q.Info().Counts.Active, "only the first batch was enqueued")
}

func TestTransfersRespectTheClientsIncomingWindow(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	enqueue(t, b, "q1", 5)
	p := dialPlain(t, addr)
	p.openSettledReceiver("r", 2)
	h, dc, credit := uint32(0), uint32(0), uint32(5)
	p.write(0, &amqpwire.Flow{IncomingWindow: 2, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})

	transfersUntilQuiet := func() int {
		n := 0
		for {
			_ = p.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			fr, err := amqpwire.ReadFrame(p.br, 1<<20)
			if err != nil {
				return n
			}
			if _, ok := fr.Body.(*amqpwire.Transfer); ok {
				n++
			}
		}
	}
	require.Equal(t, 2, transfersUntilQuiet(), "the window allows two")
	next := uint32(2)
	p.write(0, &amqpwire.Flow{NextIncomingID: &next, IncomingWindow: 2, OutgoingWindow: 100})
	require.Equal(t, 2, transfersUntilQuiet(), "the session flow opens two more")
	next = 4
	p.write(0, &amqpwire.Flow{NextIncomingID: &next, IncomingWindow: 100, OutgoingWindow: 100})
	require.Equal(t, 1, transfersUntilQuiet(), "the last one")
}
