package amqpwire

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

// TestSplitSectionsOfGoAMQPMessage parses what go-amqp's public
// Message.MarshalBinary produces, the bytes a real client sends.
func TestSplitSectionsOfGoAMQPMessage(t *testing.T) {
	t.Parallel()
	to, subject := "q1", "subj"
	enqueued := time.UnixMilli(1700000000000).UTC()
	msg := &amqp.Message{
		Header:              &amqp.MessageHeader{Durable: true, Priority: 4, TTL: time.Minute, DeliveryCount: 2},
		DeliveryAnnotations: amqp.Annotations{"x-opt-lock-token": amqp.UUID(testUUID)},
		Annotations: amqp.Annotations{
			"x-opt-sequence-number": int64(77),
			"x-opt-enqueued-time":   enqueued,
		},
		Properties:            &amqp.MessageProperties{MessageID: "m-1", To: &to, Subject: &subject},
		ApplicationProperties: map[string]any{"seq": int64(5), "name": "x"},
		Data:                  [][]byte{[]byte("hello"), []byte("world")},
		Footer:                amqp.Annotations{"f": "v"},
	}
	payload, err := msg.MarshalBinary()
	require.NoError(t, err)

	sections, err := SplitSections(payload)
	require.NoError(t, err)
	var codes []uint64
	decoded := map[uint64][]any{}
	for _, s := range sections {
		codes = append(codes, s.Code)
		v, n, err := DecodeValue(s.Bytes(payload))
		require.NoError(t, err)
		require.Equal(t, s.End-s.Start, n, "section %#x", s.Code)
		d := v.(Described)
		require.Equal(t, s.Code, d.Descriptor)
		decoded[s.Code] = append(decoded[s.Code], d.Value)

		// Re-encoding a section (compactly: go-amqp always writes list32
		// and map32) decodes to the same value.
		again, err := AppendValue(nil, v)
		require.NoError(t, err)
		require.LessOrEqual(t, len(again), n)
		v2, _, err := DecodeValue(again)
		require.NoError(t, err)
		require.Equal(t, v, v2, "section %#x", s.Code)
	}
	require.Equal(t, []uint64{
		SectionHeader, SectionDeliveryAnnotations, SectionMessageAnnotations, SectionProperties,
		SectionApplicationProperties, SectionData, SectionData, SectionFooter,
	}, codes)
	require.Equal(t, sections[len(sections)-1].End, len(payload))

	require.Equal(t, []any{true, nil, uint32(60000), nil, uint32(2)}, decoded[SectionHeader][0]) // priority 4 is the default, omitted
	require.Equal(t, map[any]any{Symbol("x-opt-lock-token"): testUUID}, decoded[SectionDeliveryAnnotations][0])
	require.Equal(t, map[any]any{
		Symbol("x-opt-sequence-number"): int64(77),
		Symbol("x-opt-enqueued-time"):   enqueued,
	}, decoded[SectionMessageAnnotations][0])
	require.Equal(t, []any{"m-1", nil, "q1", "subj"}, decoded[SectionProperties][0])
	require.Equal(t, map[any]any{"seq": int64(5), "name": "x"}, decoded[SectionApplicationProperties][0])
	require.Equal(t, []any{[]byte("hello"), []byte("world")}, decoded[SectionData])
}

// TestGoAMQPUnmarshalsOurMessage checks that sections encoded here are what
// go-amqp (and so the SDK) expects to receive, typed annotations included.
func TestGoAMQPUnmarshalsOurMessage(t *testing.T) {
	t.Parallel()
	payload := encodeTestMessage(t, "hello")
	var msg amqp.Message
	require.NoError(t, msg.UnmarshalBinary(payload))
	require.Equal(t, &amqp.MessageHeader{Durable: true, Priority: 4, DeliveryCount: 3}, msg.Header)
	require.Equal(t, amqp.UUID(testUUID), msg.DeliveryAnnotations["x-opt-lock-token"])
	require.Equal(t, int64(12), msg.Annotations["x-opt-sequence-number"])
	require.Equal(t, time.UnixMilli(1700000000000).UTC(), msg.Annotations["x-opt-locked-until"].(time.Time).UTC())
	require.Equal(t, "m-1", msg.Properties.MessageID)
	require.Equal(t, "s-1", *msg.Properties.GroupID)
	require.Equal(t, map[string]any{"seq": int64(3)}, msg.ApplicationProperties)
	require.Equal(t, [][]byte{[]byte("hello")}, msg.Data)
}

// encodeTestMessage builds a message the way the broker will: each section a
// described value appended with AppendValue.
func encodeTestMessage(t *testing.T, body string) []byte {
	t.Helper()
	var b []byte
	var err error
	for _, s := range []Described{
		{Descriptor: SectionHeader, Value: []any{true, nil, nil, nil, uint32(3)}},
		{Descriptor: SectionDeliveryAnnotations, Value: map[Symbol]any{"x-opt-lock-token": testUUID}},
		{Descriptor: SectionMessageAnnotations, Value: map[Symbol]any{
			"x-opt-sequence-number": int64(12),
			"x-opt-locked-until":    time.UnixMilli(1700000000000).UTC(),
		}},
		{Descriptor: SectionProperties, Value: []any{"m-1", nil, nil, nil, nil, nil, nil, nil, nil, nil, "s-1"}},
		{Descriptor: SectionApplicationProperties, Value: map[string]any{"seq": int64(3)}},
		{Descriptor: SectionData, Value: []byte(body)},
	} {
		b, err = AppendValue(b, s)
		require.NoError(t, err)
	}
	return b
}

// scriptedServer plays the broker side of a connection with this package's
// codec, one frame at a time, from the test goroutine.
type scriptedServer struct {
	t    *testing.T
	conn net.Conn
}

func (s *scriptedServer) readHeader(want ProtocolHeader) {
	s.t.Helper()
	require.NoError(s.t, s.conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	h, err := ReadProtocolHeader(s.conn)
	require.NoError(s.t, err)
	require.Equal(s.t, want, h)
	_, err = s.conn.Write(AppendProtocolHeader(nil, h))
	require.NoError(s.t, err)
}

// expect reads the next non-empty frame and checks its body type.
func expect[T any](s *scriptedServer) (T, Frame) {
	s.t.Helper()
	for {
		require.NoError(s.t, s.conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		f, err := ReadFrame(s.conn, 65536)
		require.NoError(s.t, err)
		if f.Body == nil {
			continue // heartbeat
		}
		body, ok := f.Body.(T)
		require.True(s.t, ok, "want %T, got %T", body, f.Body)
		return body, f
	}
}

func (s *scriptedServer) send(f Frame) {
	s.t.Helper()
	b, err := AppendFrame(nil, f)
	require.NoError(s.t, err)
	require.NoError(s.t, s.conn.SetWriteDeadline(time.Now().Add(5*time.Second)))
	_, err = s.conn.Write(b)
	require.NoError(s.t, err)
}

func async[T any](fn func() (T, error)) <-chan struct {
	v   T
	err error
} {
	ch := make(chan struct {
		v   T
		err error
	}, 1)
	go func() {
		v, err := fn()
		ch <- struct {
			v   T
			err error
		}{v, err}
	}()
	return ch
}

// TestGoAMQPClientConversation runs the real go-amqp client (the SDK's
// transport) against frames produced and parsed by this package: SASL
// ANONYMOUS, open, begin, a sender with a transfer settled by disposition, a
// receiver fed a message, a refused attach, detach, end and close.
func TestGoAMQPClientConversation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clientSide, serverSide := net.Pipe()
	defer serverSide.Close()
	srv := &scriptedServer{t: t, conn: serverSide}

	// SASL and open.
	connCh := async(func() (*amqp.Conn, error) {
		return amqp.NewConn(ctx, clientSide, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), ContainerID: "client-1"})
	})
	srv.readHeader(ProtocolHeader{ProtocolID: ProtocolSASL, Major: 1})
	srv.send(Frame{Type: FrameTypeSASL, Body: &SASLMechanisms{Mechanisms: []Symbol{"MSSBCBS", "ANONYMOUS"}}})
	initBody, _ := expect[*SASLInit](srv)
	require.Equal(t, Symbol("ANONYMOUS"), initBody.Mechanism)
	srv.send(Frame{Type: FrameTypeSASL, Body: &SASLOutcome{Code: SASLCodeOK}})
	srv.readHeader(ProtocolHeader{ProtocolID: ProtocolAMQP, Major: 1})
	open, _ := expect[*Open](srv)
	require.Equal(t, "client-1", open.ContainerID)
	srv.send(Frame{Body: &Open{ContainerID: "broker", MaxFrameSize: 65536, ChannelMax: 4999}})
	res := <-connCh
	require.NoError(t, res.err)
	conn := res.v
	defer conn.Close()

	// Session.
	sessCh := async(func() (*amqp.Session, error) { return conn.NewSession(ctx, nil) })
	begin, bf := expect[*Begin](srv)
	require.Nil(t, begin.RemoteChannel)
	srv.send(Frame{Channel: 0, Body: &Begin{
		RemoteChannel: ptr(bf.Channel), NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 255,
	}})
	sres := <-sessCh
	require.NoError(t, sres.err)
	sess := sres.v
	nextIncoming := uint32(0)

	// Sender: attach, credit, one transfer settled by disposition.
	sndCh := async(func() (*amqp.Sender, error) { return sess.NewSender(ctx, "q1", nil) })
	att, _ := expect[*Attach](srv)
	require.Equal(t, RoleSender, att.Role)
	require.Equal(t, "q1", att.Target.Address)
	srv.send(Frame{Body: &Attach{
		Name: att.Name, Handle: 0, Role: RoleReceiver, SndSettleMode: att.SndSettleMode, RcvSettleMode: att.RcvSettleMode,
		Source: att.Source, Target: att.Target, MaxMessageSize: 1 << 20,
	}})
	srv.send(Frame{Body: &Flow{
		NextIncomingID: ptr(nextIncoming), IncomingWindow: 5000, NextOutgoingID: 0, OutgoingWindow: 5000,
		Handle: ptr[uint32](0), DeliveryCount: ptr[uint32](0), LinkCredit: ptr[uint32](10),
	}})
	sndRes := <-sndCh
	require.NoError(t, sndRes.err)
	sender := sndRes.v
	require.Equal(t, uint64(1<<20), sender.MaxMessageSize())

	sendCh := async(func() (struct{}, error) {
		return struct{}{}, sender.Send(ctx, &amqp.Message{
			Properties:            &amqp.MessageProperties{MessageID: "m-9"},
			ApplicationProperties: map[string]any{"seq": int64(1)},
			Data:                  [][]byte{[]byte("payload")},
		}, nil)
	})
	tr, tf := expect[*Transfer](srv)
	require.NotNil(t, tr.DeliveryID)
	require.Equal(t, uint32(0), *tr.MessageFormat)
	sections, err := SplitSections(tf.Payload)
	require.NoError(t, err)
	require.Equal(t, SectionData, sections[len(sections)-1].Code)
	var sent amqp.Message
	require.NoError(t, sent.UnmarshalBinary(tf.Payload))
	require.Equal(t, "m-9", sent.Properties.MessageID)
	srv.send(Frame{Body: &Disposition{Role: RoleReceiver, First: *tr.DeliveryID, Settled: true, State: &Accepted{}}})
	require.NoError(t, (<-sendCh).err)

	// Receiver: attach, client credit, a transfer from the broker.
	rcvCh := async(func() (*amqp.Receiver, error) {
		return sess.NewReceiver(ctx, "q1", &amqp.ReceiverOptions{Credit: 5})
	})
	ratt, _ := expect[*Attach](srv)
	require.Equal(t, RoleReceiver, ratt.Role)
	require.Equal(t, "q1", ratt.Source.Address)
	srv.send(Frame{Body: &Attach{
		Name: ratt.Name, Handle: 1, Role: RoleSender, SndSettleMode: ratt.SndSettleMode, RcvSettleMode: ratt.RcvSettleMode,
		Source: ratt.Source, Target: ratt.Target, InitialDeliveryCount: 0,
	}})
	rres := <-rcvCh
	require.NoError(t, rres.err)
	receiver := rres.v
	flow, _ := expect[*Flow](srv)
	require.Equal(t, ratt.Handle, *flow.Handle)
	require.Equal(t, uint32(5), *flow.LinkCredit)

	recvCh := async(func() (*amqp.Message, error) { return receiver.Receive(ctx, nil) })
	srv.send(Frame{Body: &Transfer{
		Handle: 1, DeliveryID: ptr[uint32](0), DeliveryTag: testUUID[:], MessageFormat: ptr[uint32](0), Settled: ptr(false),
	}, Payload: encodeTestMessage(t, "from broker")})
	recv := <-recvCh
	require.NoError(t, recv.err)
	require.Equal(t, [][]byte{[]byte("from broker")}, recv.v.Data)
	require.Equal(t, int64(12), recv.v.Annotations["x-opt-sequence-number"])
	require.Equal(t, testUUID[:], recv.v.DeliveryTag)

	acceptCh := async(func() (struct{}, error) { return struct{}{}, receiver.AcceptMessage(ctx, recv.v) })
	disp, _ := expect[*Disposition](srv)
	require.Equal(t, RoleReceiver, disp.Role)
	require.Equal(t, uint32(0), disp.First)
	require.IsType(t, &Accepted{}, disp.State)
	require.NoError(t, (<-acceptCh).err)

	// Refused attach: null source, then detach with an error.
	refusedCh := async(func() (*amqp.Receiver, error) { return sess.NewReceiver(ctx, "missing", nil) })
	fatt, _ := expect[*Attach](srv)
	srv.send(Frame{Body: &Attach{Name: fatt.Name, Handle: 2, Role: RoleSender, SndSettleMode: fatt.SndSettleMode, RcvSettleMode: fatt.RcvSettleMode}})
	srv.send(Frame{Body: &Detach{Handle: 2, Closed: true, Error: &Error{Condition: "amqp:not-found", Description: "no entity missing"}}})
	ack, _ := expect[*Detach](srv)
	require.True(t, ack.Closed)
	refused := <-refusedCh
	var amqpErr *amqp.Error
	require.True(t, errors.As(refused.err, &amqpErr), "got %v", refused.err)
	require.Equal(t, amqp.ErrCondNotFound, amqpErr.Condition)
	require.Equal(t, "no entity missing", amqpErr.Description)

	// Detach the sender, end the session, close the connection.
	closeSnd := async(func() (struct{}, error) { return struct{}{}, sender.Close(ctx) })
	det, _ := expect[*Detach](srv)
	require.True(t, det.Closed)
	srv.send(Frame{Body: &Detach{Handle: 0, Closed: true}})
	require.NoError(t, (<-closeSnd).err)

	endCh := async(func() (struct{}, error) { return struct{}{}, sess.Close(ctx) })
	for { // the receiver link is closed by the session end or detached first
		_, f := expect[any](srv)
		if d, ok := f.Body.(*Detach); ok {
			srv.send(Frame{Body: &Detach{Handle: 1, Closed: d.Closed}})
			continue
		}
		require.IsType(t, &End{}, f.Body)
		break
	}
	srv.send(Frame{Body: &End{}})
	require.NoError(t, (<-endCh).err)

	closeCh := async(func() (struct{}, error) { return struct{}{}, conn.Close() })
	expect[*Close](srv)
	srv.send(Frame{Body: &Close{}})
	require.NoError(t, (<-closeCh).err)
}

// TestArraysInterop checks the management-body arrays the SDK relies on
// (array<long>, array<timestamp>, array<uuid>, array<symbol>) in both
// directions against go-amqp.
func TestArraysInterop(t *testing.T) {
	t.Parallel()
	ts := time.UnixMilli(1700000000000).UTC()

	// Ours → go-amqp.
	body := map[string]any{
		"sequence-numbers": LongArray(1, 1<<40),
		"expirations":      Array{Code: 0x83, Items: []any{ts}},
		"lock-tokens":      UUIDArray(testUUID),
		"names":            SymbolArray("a", "b"),
		"status-code":      int32(200),
	}
	payload, err := AppendValue(nil, Described{Descriptor: SectionAMQPValue, Value: body})
	require.NoError(t, err)
	var msg amqp.Message
	require.NoError(t, msg.UnmarshalBinary(payload))
	got := msg.Value.(map[string]any)
	require.Equal(t, []int64{1, 1 << 40}, got["sequence-numbers"])
	require.Len(t, got["expirations"], 1)
	require.True(t, ts.Equal(got["expirations"].([]time.Time)[0]))
	require.Equal(t, []amqp.UUID{amqp.UUID(testUUID)}, got["lock-tokens"])
	require.Equal(t, []amqp.Symbol{"a", "b"}, got["names"])
	require.Equal(t, int32(200), got["status-code"])

	// go-amqp → ours.
	out := &amqp.Message{Value: map[string]any{
		"sequence-numbers": []int64{5, -1},
		"lock-tokens":      []amqp.UUID{amqp.UUID(testUUID)},
		"when":             []time.Time{ts},
		"symbols":          []amqp.Symbol{"x"},
	}}
	enc, err := out.MarshalBinary()
	require.NoError(t, err)
	v, n, err := DecodeValue(enc)
	require.NoError(t, err)
	require.Equal(t, len(enc), n)
	m := v.(Described).Value.(map[any]any)
	require.Equal(t, []any{int64(5), int64(-1)}, m["sequence-numbers"].(Array).Items)
	require.Equal(t, []any{testUUID}, m["lock-tokens"].(Array).Items)
	require.Equal(t, []any{ts}, m["when"].(Array).Items)
	require.Equal(t, []any{Symbol("x")}, m["symbols"].(Array).Items)
}
