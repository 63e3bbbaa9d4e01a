package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/internal/engine"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

// replyShape is how one SDK shapes its request/response link pair.
type replyShape struct {
	name string
	// rcv is the reply link's receiver options (name and target address).
	rcv amqp.ReceiverOptions
	// replyTo is what requests carry in reply-to; nil for none.
	replyTo *string
	// messageID is the request's message-id.
	messageID any
	// presettled sends requests settled (Microsoft.Azure.Amqp's SettleOnSend).
	presettled bool
}

// replyShapes are the shapes of the official SDKs, for node ($cbs or
// "<entity>/$management").
func replyShapes(node string) []replyShape {
	return []replyShape{
		{
			name:      "go-amqp: target address in reply-to",
			rcv:       amqp.ReceiverOptions{TargetAddress: node + "$reply-1"},
			replyTo:   ptrTo(node + "$reply-1"),
			messageID: "3e3c8a7e-5d9f-4b27-9c1e-1b8f1f0b2f6a",
		},
		{
			name:      "rhea: no target address, link name in reply-to",
			rcv:       amqp.ReceiverOptions{Name: "cbs-6f1d2a8e"},
			replyTo:   ptrTo("cbs-6f1d2a8e"),
			messageID: "6f1d2a8e-0000-4000-8000-000000000001",
		},
		{
			name:       ".NET: GUID target, pre-settled requests",
			rcv:        amqp.ReceiverOptions{Name: "duplex1:2:3:receiver", TargetAddress: "9b2c3f0d4a5e4f6a8b7c9d0e1f2a3b4c"},
			replyTo:    ptrTo("9b2c3f0d4a5e4f6a8b7c9d0e1f2a3b4c"),
			messageID:  "RequestResponseAmqpLink1",
			presettled: true,
		},
		{
			name:      "Java: <node>-client-reply-to target, ulong message-id",
			rcv:       amqp.ReceiverOptions{Name: "mgmt:receiver", TargetAddress: "node-client-reply-to"},
			replyTo:   ptrTo("node-client-reply-to"),
			messageID: uint64(7),
		},
		{
			name:      "Python: the node's own address as target, no reply-to",
			rcv:       amqp.ReceiverOptions{TargetAddress: node},
			messageID: int64(0),
		},
	}
}

// request sends one request in shape sh and returns the response.
func (sh replyShape) request(ctx context.Context, t *testing.T, snd *amqp.Sender, rcv *amqp.Receiver, req *amqp.Message) *amqp.Message {
	t.Helper()
	req.Properties = &amqp.MessageProperties{MessageID: sh.messageID, ReplyTo: sh.replyTo}
	require.NoError(t, snd.Send(ctx, req, nil))
	resp, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rcv.AcceptMessage(ctx, resp))
	require.NotNil(t, resp.Properties)
	require.Equal(t, sh.messageID, resp.Properties.CorrelationID, "the response is correlated with the request's message-id, type and all")
	return resp
}

func (sh replyShape) open(ctx context.Context, t *testing.T, s *amqp.Session, node string) (*amqp.Sender, *amqp.Receiver) {
	t.Helper()
	opts := sh.rcv
	opts.Credit = 10
	rcv, err := s.NewReceiver(ctx, node, &opts)
	require.NoError(t, err, "the reply link is accepted")
	var sopts *amqp.SenderOptions
	if sh.presettled {
		sopts = &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeSettled.Ptr()}
	}
	snd, err := s.NewSender(ctx, node, sopts)
	require.NoError(t, err)
	return snd, rcv
}

func statusCode(t *testing.T, resp *amqp.Message) int32 {
	t.Helper()
	code, ok := resp.ApplicationProperties["status-code"].(int32)
	require.True(t, ok, "status-code is %T", resp.ApplicationProperties["status-code"])
	require.Equal(t, code, resp.ApplicationProperties["statusCode"], ".NET and Python read statusCode")
	return code
}

// TestEveryReplyLinkShapeGetsItsResponses: put-token on $cbs and a
// management request both answer every SDK's reply-link shape.
func TestEveryReplyLinkShapeGetsItsResponses(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	audience := "amqp://" + addr + "/q1"
	for _, node := range []string{"$cbs", "q1/$management"} {
		for _, sh := range replyShapes(node) {
			t.Run(node+"/"+sh.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c := dialGoAMQP(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
				s, err := c.NewSession(ctx, nil)
				require.NoError(t, err)
				if node != "$cbs" {
					cbsSnd, cbsRcv := replyShapes("$cbs")[0].open(ctx, t, s, "$cbs")
					put := &amqp.Message{Value: sas.Sign(keyName, key, audience, time.Now().Add(time.Minute)),
						ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}}
					require.Equal(t, int32(202), statusCode(t, replyShapes("$cbs")[0].request(ctx, t, cbsSnd, cbsRcv, put)))
				}
				snd, rcv := sh.open(ctx, t, s, node)
				var req *amqp.Message
				want := int32(204) // nothing to peek
				if node == "$cbs" {
					req = &amqp.Message{Value: sas.Sign(keyName, key, audience, time.Now().Add(time.Minute)),
						ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}}
					want = 202
				} else {
					req = &amqp.Message{
						Value:                 map[string]any{"from-sequence-number": int64(1), "message-count": int32(1)},
						ApplicationProperties: map[string]any{"operation": "com.microsoft:peek-message"},
					}
				}
				require.Equal(t, want, statusCode(t, sh.request(ctx, t, snd, rcv, req)))
			})
		}
	}
}

// TestSharedReplyAddressesStayApart: two reply links of one connection with
// the same target address (pyamqp names it after the node) each get the
// responses to the requests of their own session.
func TestSharedReplyAddressesStayApart(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, plain())
	type pair struct {
		snd *amqp.Sender
		rcv *amqp.Receiver
	}
	var pairs []pair
	for range 2 {
		s, err := c.NewSession(ctx, nil)
		require.NoError(t, err)
		rcv, err := s.NewReceiver(ctx, "q1/$management", &amqp.ReceiverOptions{TargetAddress: "q1/$management", Credit: 10})
		require.NoError(t, err)
		snd, err := s.NewSender(ctx, "q1/$management", nil)
		require.NoError(t, err)
		pairs = append(pairs, pair{snd, rcv})
	}
	peekReq := func(id string) *amqp.Message {
		return &amqp.Message{
			Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: ptrTo("q1/$management")},
			Value:                 map[string]any{"from-sequence-number": int64(1), "message-count": int32(1)},
			ApplicationProperties: map[string]any{"operation": "com.microsoft:peek-message"},
		}
	}
	// The first session asks first: were responses routed by address
	// alone, the second link (attached last) would get both.
	require.NoError(t, pairs[0].snd.Send(ctx, peekReq("first"), nil))
	require.NoError(t, pairs[1].snd.Send(ctx, peekReq("second"), nil))
	for i, want := range []string{"first", "second"} {
		resp, err := pairs[i].rcv.Receive(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, want, resp.Properties.CorrelationID, "session %d gets its own response", i)
	}
}
