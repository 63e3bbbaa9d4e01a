package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// uamqp (the Python SDK) names entity links by full URI.
func TestURIAddressesNameTheirNode(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, plain())
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)

	snd, err := s.NewSender(ctx, "amqps://ns.servicebus.windows.net/q1", nil)
	require.NoError(t, err, "a sender to amqps://host/q1 sends to q1")
	require.NoError(t, snd.Send(ctx, amqp.NewMessage([]byte("by uri")), nil))
	rcv, err := s.NewReceiver(ctx, "sb://ns.servicebus.windows.net/q1", &amqp.ReceiverOptions{SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(), Credit: 1})
	require.NoError(t, err, "a receiver from sb://host/q1 receives from q1")
	m, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("by uri"), m.GetData())
	require.NoError(t, rcv.AcceptMessage(ctx, m))

	mgmt := openRPC(ctx, t, s, "amqps://ns.servicebus.windows.net/q1/$management")
	require.Equal(t, int32(204), peek(ctx, t, mgmt), "the management node of q1, named by URI, answers (204: nothing to peek)")

	for bad, named := range map[string]string{
		"amqps://ns.servicebus.windows.net/missing": `"missing"`,
		"http://ns.servicebus.windows.net/q1":       `"http://ns.servicebus.windows.net/q1"`, // not an AMQP URI: taken as given
	} {
		_, err = s.NewSender(ctx, bad, nil)
		var amqpErr *amqp.Error
		require.ErrorAs(t, err, &amqpErr, bad)
		require.Equal(t, amqp.ErrCondNotFound, amqpErr.Condition, bad)
		require.Contains(t, amqpErr.Description, named, "the refusal names the address")
	}
}

// TestResponseFollowsTheRequestsDisposition: the service settles a $cbs or
// $management request before it sends the response. uamqp fails the
// operation ("did not receive send confirmation") when the response comes
// first, and then writes into freed memory when the disposition arrives.
func TestResponseFollowsTheRequestsDisposition(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	_, ok := p.read().Body.(*amqpwire.Begin)
	require.True(t, ok)
	for _, node := range []string{"$cbs", "q1/$management"} {
		t.Run(node, func(t *testing.T) {
			p.t = t
			h := uint32(len(node) % 7 * 2) // two free handles per node
			p.write(0, &amqpwire.Attach{Name: node + "-req", Handle: h, Role: amqpwire.RoleSender, Source: &amqpwire.Source{}, Target: &amqpwire.Target{Address: node}})
			p.write(0, &amqpwire.Attach{Name: node + "-reply", Handle: h + 1, Role: amqpwire.RoleReceiver, Source: &amqpwire.Source{Address: node}, Target: &amqpwire.Target{Address: node + "-reply-to"}})
			dc, credit := uint32(0), uint32(10)
			rh := h + 1
			p.write(0, &amqpwire.Flow{IncomingWindow: 100, OutgoingWindow: 100, Handle: &rh, DeliveryCount: &dc, LinkCredit: &credit})
			attaches := 0
			for attaches < 2 {
				if _, ok := p.read().Body.(*amqpwire.Attach); ok {
					attaches++
				}
			}
			replyTo := node + "-reply-to"
			req := &amqp.Message{
				Properties: &amqp.MessageProperties{MessageID: "req-1", ReplyTo: &replyTo},
				ApplicationProperties: map[string]any{
					"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": "amqp://x/q1",
				},
				Value: "SharedAccessSignature sr=x&sig=y&se=1&skn=k",
			}
			if node != "$cbs" {
				req.ApplicationProperties = map[string]any{"operation": "com.microsoft:peek-message"}
				req.Value = map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)}
			}
			payload, err := req.MarshalBinary()
			require.NoError(t, err)
			id, settled, format := uint32(h), false, uint32(0)
			p.writeTransfer(&amqpwire.Transfer{Handle: h, DeliveryID: &id, DeliveryTag: []byte{byte(h)}, MessageFormat: &format, Settled: &settled}, payload)
			var order []string
			for len(order) < 2 {
				switch b := p.read().Body.(type) {
				case *amqpwire.Disposition:
					require.Equal(t, id, b.First)
					order = append(order, "disposition")
				case *amqpwire.Transfer:
					require.Equal(t, h+1, b.Handle, "the response comes on the reply link")
					order = append(order, "response")
				}
			}
			require.Equal(t, []string{"disposition", "response"}, order)
		})
	}
}

// TestRequestLinksKeepTheirCredit: a client sender to $cbs or $management
// gets credit at attach and again as it uses it, however many requests it
// sends; go-amqp waits for credit and would fail these sends with
// amqp:link:transfer-limit-exceeded once its context ended if none came.
func TestRequestLinksKeepTheirCredit(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, plain())
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)
	for _, node := range []string{"$cbs", "q1/$management"} {
		rpc := openRPC(ctx, t, s, node)
		// Three times the server's credit window (1000 per link).
		for i := range 3000 {
			reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var code int32
			if node == "$cbs" {
				code = putToken(reqCtx, t, rpc, "amqp://x/q1", fmt.Sprintf("SharedAccessSignature sr=x&sig=%d&se=1&skn=k", i))
			} else {
				code = peek(reqCtx, t, rpc)
			}
			cancel()
			require.NotZero(t, code, "request %d on %s answered", i, node)
		}
	}
}

// writeTransfer writes a transfer frame with its payload on channel 0.
func (p *rawPeer) writeTransfer(tr *amqpwire.Transfer, payload []byte) {
	p.t.Helper()
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Body: tr, Payload: payload})
	require.NoError(p.t, err)
	_, err = p.nc.Write(b)
	require.NoError(p.t, err)
}
