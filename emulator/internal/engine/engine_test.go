package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	keyName = "k"
	key     = "secret"
)

// startServer serves a broker with queue "q1" on a free port.
func startServer(t testing.TB, cfg engine.Config) (string, *broker.Broker) {
	t.Helper()
	b := broker.New(broker.Config{})
	require.NoError(t, b.CreateQueue("q1", broker.EntityProperties{}))
	return serveBroker(t, cfg, b), b
}

// serveBroker serves b on a free port and returns the address.
func serveBroker(t testing.TB, cfg engine.Config, b *broker.Broker) string {
	t.Helper()
	cfg.Broker = b
	cfg.Keys = map[string]string{keyName: key}
	srv := engine.New(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		b.Close()
	})
	return l.Addr().String()
}

func dialGoAMQP(t *testing.T, addr string, opts *amqp.ConnOptions) *amqp.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := amqp.Dial(ctx, "amqp://"+addr, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func plain() *amqp.ConnOptions {
	return &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(keyName, key)}
}

func TestSASLPlainAuthenticatesAndGrantsAccess(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err := amqp.Dial(ctx, "amqp://"+addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(keyName, "wrong")})
	require.Error(t, err, "a wrong PLAIN password fails SASL")

	c := dialGoAMQP(t, addr, plain())
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)
	snd, err := s.NewSender(ctx, "q1", nil)
	require.NoError(t, err)
	require.NoError(t, snd.Send(ctx, amqp.NewMessage([]byte("raw")), nil))
	rcv, err := s.NewReceiver(ctx, "q1", &amqp.ReceiverOptions{SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(), Credit: 10})
	require.NoError(t, err)
	m, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("raw"), m.GetData())
	require.Len(t, m.DeliveryTag, 16, "the lock token is the delivery tag")
	require.NoError(t, rcv.AcceptMessage(ctx, m))
}

func TestAnonymousWithoutTokenIsRefused(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)
	_, err = s.NewSender(ctx, "q1", nil)
	var amqpErr *amqp.Error
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp.ErrCondUnauthorizedAccess, amqpErr.Condition)

	_, err = s.NewReceiver(ctx, "missing", nil)
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp.ErrCondNotFound, amqpErr.Condition)
}

func TestTransfersAreSplitByThePeersMaxFrameSize(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := plain()
	opts.MaxFrameSize = 512
	c := dialGoAMQP(t, addr, opts)
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)
	snd, err := s.NewSender(ctx, "q1", nil)
	require.NoError(t, err)
	body := bytes.Repeat([]byte("abcdefgh"), 4096) // 32 KiB: 60+ frames each way
	require.NoError(t, snd.Send(ctx, amqp.NewMessage(body), nil))
	rcv, err := s.NewReceiver(ctx, "q1", &amqp.ReceiverOptions{Credit: 1})
	require.NoError(t, err)
	m, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, body, m.GetData())
}

func TestHeartbeatsKeepAShortIdleTimeoutAlive(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	opts := plain()
	opts.IdleTimeout = 400 * time.Millisecond // the client drops the connection after 400 ms of silence
	c := dialGoAMQP(t, addr, opts)
	time.Sleep(1200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.NewSession(ctx, nil)
	require.NoError(t, err, "the connection survived idle periods longer than the client's idle timeout")
}

func TestServerDropsSilentClients(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{IdleTimeout: 100 * time.Millisecond})
	nc := rawHandshake(t, addr)
	// Never send anything: the server gives up after twice its idle timeout,
	// saying why.
	_ = nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(nc)
	var closeErr *amqpwire.Error
	for {
		fr, err := amqpwire.ReadFrame(br, 1<<20)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if cl, ok := fr.Body.(*amqpwire.Close); ok {
			closeErr = cl.Error
		}
	}
	require.NotNil(t, closeErr)
	require.Equal(t, amqpwire.Symbol("amqp:resource-limit-exceeded"), closeErr.Condition)
}

func TestBadProtocolHeaderIsAnsweredAndClosed(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write([]byte("AMQP\x02\x01\x00\x00")) // TLS upgrade: not supported
	require.NoError(t, err)
	h, err := amqpwire.ReadProtocolHeader(nc)
	require.NoError(t, err)
	require.Equal(t, amqpwire.ProtocolAMQP, h.ProtocolID)
	_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = nc.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

// rawHandshake opens a connection without SASL and exchanges open frames.
func rawHandshake(t testing.TB, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_, err = nc.Write(amqpwire.AppendProtocolHeader(nil, amqpwire.ProtocolHeader{ProtocolID: amqpwire.ProtocolAMQP, Major: 1}))
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	_, err = amqpwire.ReadProtocolHeader(br)
	require.NoError(t, err)
	open, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Body: &amqpwire.Open{ContainerID: "raw", MaxFrameSize: 65536}})
	require.NoError(t, err)
	_, err = nc.Write(open)
	require.NoError(t, err)
	fr, err := amqpwire.ReadFrame(br, 1<<20)
	require.NoError(t, err)
	reply, ok := fr.Body.(*amqpwire.Open)
	require.True(t, ok, "got %T", fr.Body)
	require.NotEmpty(t, reply.ContainerID)
	require.NotZero(t, reply.IdleTimeout)
	return nc
}

func TestSessionFlowsCarryNextIncomingID(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	nc := rawHandshake(t, addr)
	br := bufio.NewReader(nc)
	write := func(ch uint16, body any) {
		b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Channel: ch, Body: body})
		require.NoError(t, err)
		_, err = nc.Write(b)
		require.NoError(t, err)
	}
	read := func() amqpwire.Frame {
		for {
			_ = nc.SetReadDeadline(time.Now().Add(3 * time.Second))
			fr, err := amqpwire.ReadFrame(br, 1<<20)
			require.NoError(t, err)
			if fr.Body != nil {
				return fr
			}
		}
	}
	write(3, &amqpwire.Begin{NextOutgoingID: 7, IncomingWindow: 100, OutgoingWindow: 100})
	fr := read()
	begin, ok := fr.Body.(*amqpwire.Begin)
	require.True(t, ok, "got %T", fr.Body)
	require.NotNil(t, begin.RemoteChannel)
	require.Equal(t, uint16(3), *begin.RemoteChannel)

	// A $cbs sender needs no token and gets credit at once.
	write(3, &amqpwire.Attach{Name: "cbs", Handle: 0, Role: amqpwire.RoleSender, Target: &amqpwire.Target{Address: "$cbs"}, Source: &amqpwire.Source{}})
	attach, ok := read().Body.(*amqpwire.Attach)
	require.True(t, ok)
	require.NotNil(t, attach.Target)
	flow, ok := read().Body.(*amqpwire.Flow)
	require.True(t, ok)
	require.NotNil(t, flow.NextIncomingID)
	require.Equal(t, uint32(7), *flow.NextIncomingID)
	require.NotNil(t, flow.LinkCredit)
	require.NotZero(t, *flow.LinkCredit)

	// A transfer on an unknown handle ends the session with an error.
	write(3, &amqpwire.Transfer{Handle: 9, DeliveryID: new(uint32), DeliveryTag: []byte{1}})
	end, ok := read().Body.(*amqpwire.End)
	require.True(t, ok)
	require.NotNil(t, end.Error)
	require.Equal(t, amqpwire.Symbol("amqp:session:unattached-handle"), end.Error.Condition)

	// Frames in flight and the client's end are absorbed; the connection
	// stays usable and the channel can begin again.
	write(3, &amqpwire.Flow{IncomingWindow: 1, OutgoingWindow: 1})
	write(3, &amqpwire.End{})
	write(3, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	begin, ok = read().Body.(*amqpwire.Begin)
	require.True(t, ok)
	require.Equal(t, uint16(3), *begin.RemoteChannel)
}
