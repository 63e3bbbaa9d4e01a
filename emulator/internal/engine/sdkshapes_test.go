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

// Tests of what the emulator does for SDKs other than Go's (rhea, the
// JavaScript SDK's AMQP library, above all).

// TestDrainSendsWhatIsThereAndEndsTheCredit: a drain is answered at once
// with the messages available and a flow that uses up the rest of the
// credit; rhea (the JavaScript SDK) drains at the end of every
// receiveMessages call and closes the link when no answer comes in 200 ms.
func TestDrainSendsWhatIsThereAndEndsTheCredit(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	q := enqueue(t, b, "q1", 2)
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	p.read()
	p.write(0, &amqpwire.Attach{Name: "r", Handle: 0, Role: amqpwire.RoleReceiver, RcvSettleMode: amqpwire.ReceiverSettleModeSecond,
		Source: &amqpwire.Source{Address: "q1"}, Target: &amqpwire.Target{}})
	_, ok := p.read().Body.(*amqpwire.Attach)
	require.True(t, ok)

	// rhea's drain: its whole credit, with drain set, in one flow.
	drain := func(deliveryCount, credit uint32) (transfers int, answer *amqpwire.Flow) {
		h := uint32(0)
		p.write(0, &amqpwire.Flow{NextIncomingID: new(uint32), IncomingWindow: 100, OutgoingWindow: 100,
			Handle: &h, DeliveryCount: &deliveryCount, LinkCredit: &credit, Drain: true})
		for {
			switch fr := p.read().Body.(type) {
			case *amqpwire.Transfer:
				transfers++
			case *amqpwire.Flow:
				if fr.Handle != nil {
					return transfers, fr
				}
			}
		}
	}
	n, answer := drain(0, 5)
	require.Equal(t, 2, n, "both available messages are sent before the drain ends")
	require.True(t, answer.Drain)
	require.Equal(t, uint32(0), *answer.LinkCredit, "the rest of the credit is used up")
	require.Equal(t, uint32(5), *answer.DeliveryCount, "delivery-count advanced by the whole credit")
	require.Equal(t, int64(2), q.Info().Counts.Active, "the two messages are locked to the receiver, not lost")

	n, answer = drain(5, 3)
	require.Zero(t, n)
	require.True(t, answer.Drain, "a drain with nothing to send is answered too")
	require.Equal(t, uint32(8), *answer.DeliveryCount)
}

// TestFirstDeliveryCarriesDeliveryCountZero: the header of a delivered
// message states delivery-count 0 instead of leaving it out (rhea reports a
// missing one as an undefined deliveryCount).
func TestFirstDeliveryCarriesDeliveryCountZero(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	enqueue(t, b, "q1", 1)
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	p.read()
	p.write(0, &amqpwire.Attach{Name: "r", Handle: 0, Role: amqpwire.RoleReceiver, RcvSettleMode: amqpwire.ReceiverSettleModeSecond,
		Source: &amqpwire.Source{Address: "q1"}, Target: &amqpwire.Target{}})
	_, ok := p.read().Body.(*amqpwire.Attach)
	require.True(t, ok)
	h, dc, credit := uint32(0), uint32(0), uint32(1)
	p.write(0, &amqpwire.Flow{NextIncomingID: new(uint32), IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit})
	var payload []byte
	for payload == nil {
		fr := p.read()
		if _, ok := fr.Body.(*amqpwire.Transfer); ok {
			payload = fr.Payload
		}
	}
	sections, err := amqpwire.SplitSections(payload)
	require.NoError(t, err)
	require.Equal(t, amqpwire.SectionHeader, sections[0].Code)
	v, _, err := amqpwire.DecodeValue(sections[0].Bytes(payload))
	require.NoError(t, err)
	header, ok := v.(amqpwire.Described)
	require.True(t, ok, "header is %T", v)
	fields, ok := header.Value.([]any)
	require.True(t, ok)
	require.Len(t, fields, 5, "every header field is written, delivery-count last")
	require.Equal(t, uint32(0), fields[4])
	require.Equal(t, uint8(4), fields[1], "a message sent without a header gets the default priority")

	var m amqp.Message
	require.NoError(t, m.UnmarshalBinary(payload), "go-amqp still decodes the message")
	require.NotNil(t, m.Properties.MessageID, "the broker gave the message an id")
}

// TestSessionFilterComesBackInTheFormItWasSent: go-amqp sends the session
// filter as a described value and wants one back; the JavaScript SDK sends a
// bare string (or null for the next available session) and compares the
// answer with ===.
func TestSessionFilterComesBackInTheFormItWasSent(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	require.NoError(t, b.CreateQueue("sq", broker.EntityProperties{RequiresSession: true}))
	sq, err := b.Lookup("sq")
	require.NoError(t, err)
	for _, sid := range []string{"a", "b"} {
		m := amqp.NewMessage([]byte(sid))
		m.Properties = &amqp.MessageProperties{GroupID: &sid}
		require.NoError(t, sq.Send(t.Context(), []*amqp.Message{m}))
	}
	tests := []struct {
		name   string
		filter any
		want   any
	}{
		{"bare named session", "a", "a"},
		{"bare null: next available", nil, "b"},
		{"described named session", amqpwire.Described{Descriptor: uint64(0x137000000c), Value: "c"},
			amqpwire.Described{Descriptor: uint64(0x137000000c), Value: "c"}},
	}
	p := dialPlain(t, addr)
	p.write(0, &amqpwire.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	p.read()
	for i, tt := range tests {
		p.write(0, &amqpwire.Attach{Name: tt.name, Handle: uint32(i), Role: amqpwire.RoleReceiver, RcvSettleMode: amqpwire.ReceiverSettleModeSecond,
			Source: &amqpwire.Source{Address: "sq", Filter: map[amqpwire.Symbol]any{"com.microsoft:session-filter": tt.filter}},
			Target: &amqpwire.Target{}})
		attach, ok := p.read().Body.(*amqpwire.Attach)
		require.True(t, ok, tt.name)
		require.NotNil(t, attach.Source, "%s: the session was accepted", tt.name)
		require.Equal(t, tt.want, attach.Source.Filter["com.microsoft:session-filter"], tt.name)
	}
}

// TestRuleOperationsOnTheManagementNode: add-rule, enumerate-rules and
// remove-rule, as the rule managers of the JavaScript, .NET, Java and Python
// SDKs use them, change what the subscription receives.
func TestRuleOperationsOnTheManagementNode(t *testing.T) {
	t.Parallel()
	addr, b := startServer(t, engine.Config{})
	require.NoError(t, b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, b.CreateSubscription("t", "s", broker.EntityProperties{}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := dialGoAMQP(t, addr, plain()).NewSession(ctx, nil)
	require.NoError(t, err)
	mgmt := openRPC(ctx, t, s, "t/Subscriptions/s/$management")
	call := func(op string, body map[string]any) (int32, *amqp.Message) {
		t.Helper()
		mgmt.n++
		req := &amqp.Message{Value: body, ApplicationProperties: map[string]any{"operation": op}}
		req.Properties = &amqp.MessageProperties{MessageID: mgmt.n, ReplyTo: ptrTo(mgmt.node + "-reply")}
		require.NoError(t, mgmt.snd.Send(ctx, req, nil))
		resp, err := mgmt.rcv.Receive(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, mgmt.rcv.AcceptMessage(ctx, resp))
		return resp.ApplicationProperties["statusCode"].(int32), resp
	}
	add := func(name string, desc map[string]any) int32 {
		code, _ := call("com.microsoft:add-rule", map[string]any{"rule-name": name, "rule-description": desc})
		return code
	}
	require.Equal(t, int32(200), add("red", map[string]any{
		"sql-filter":      map[string]any{"expression": "color = 'red'"},
		"sql-rule-action": map[string]any{"expression": "SET shade = 'dark'"},
	}))
	require.Equal(t, int32(200), add("order-7", map[string]any{
		"correlation-filter": map[string]any{"correlation-id": "order-7", "message-id": nil, "properties": map[string]any{"region": "eu"}},
	}))
	require.Equal(t, int32(409), add("red", map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}), "a taken name is a conflict")
	require.Equal(t, int32(400), add("broken", map[string]any{"sql-filter": map[string]any{"expression": "color = "}}), "a bad expression is refused")
	// What the emulator cannot read is refused by name, never widened into a match-all rule.
	for field, desc := range map[string]map[string]any{
		`"false-filter"`: {"false-filter": map[string]any{}},
		`"collation"`:    {"sql-filter": map[string]any{"expression": "1=1", "collation": "x"}},
		`"subject"`:      {"correlation-filter": map[string]any{"subject": "x"}},
		`"label"`:        {"correlation-filter": map[string]any{"label": int32(7)}},
		`sql-filter`:     {"sql-filter": "color = 'red'"},
	} {
		code, resp := call("com.microsoft:add-rule", map[string]any{"rule-name": "unread", "rule-description": desc})
		require.Equal(t, int32(400), code, "%v", desc)
		require.Contains(t, resp.ApplicationProperties["statusDescription"], field)
	}
	code, _ := call("com.microsoft:remove-rule", map[string]any{"rule-name": "$Default"})
	require.Equal(t, int32(200), code)
	code, _ = call("com.microsoft:remove-rule", map[string]any{"rule-name": "$Default"})
	require.Equal(t, int32(404), code, "removing a missing rule")

	rules, err := b.ListRules("t", "s")
	require.NoError(t, err)
	require.Len(t, rules, 2)
	require.Equal(t, "SET shade = 'dark'", rules[0].ActionSQLExpression)
	require.Equal(t, "eu", rules[1].Correlation.Properties["region"])

	// go-amqp decodes described values into its own opaque type, so the
	// listing is checked by its effect on a JavaScript client in the
	// conformance test; here, that it answers and pages.
	code, resp := call("com.microsoft:enumerate-rules", map[string]any{"top": int32(1), "skip": int32(1)})
	require.Equal(t, int32(200), code)
	body, ok := resp.Value.(map[string]any)
	require.True(t, ok, "body is %T", resp.Value)
	require.Len(t, body["rules"], 1, "top and skip page the rules")
	code, _ = call("com.microsoft:enumerate-rules", map[string]any{"top": int32(10), "skip": int32(2)})
	require.Equal(t, int32(204), code, "past the last rule")

	// The rules route messages.
	topic, err := b.Lookup("t")
	require.NoError(t, err)
	red := amqp.NewMessage([]byte("red"))
	red.ApplicationProperties = map[string]any{"color": "red"}
	blue := amqp.NewMessage([]byte("blue"))
	blue.ApplicationProperties = map[string]any{"color": "blue"}
	require.NoError(t, topic.Send(ctx, []*amqp.Message{red, blue}))
	sub, err := b.Lookup("t/Subscriptions/s")
	require.NoError(t, err)
	ds, err := sub.TryReceive(10, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, []byte("red"), ds[0].Message.GetData())
	require.Equal(t, "dark", ds[0].Message.ApplicationProperties["shade"], "the rule's action ran")
}
