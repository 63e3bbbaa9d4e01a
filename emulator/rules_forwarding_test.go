package emulator_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// adminBundle is one emulator with an admin client (through admintransport, on the
// AMQP port) and a data-plane client, both built from the same connection string.
// Entities are created with the admin client.
type adminBundle struct {
	srv    *emulatortest.Server
	adm    *admin.Client
	client *azservicebus.Client
}

// setupWithAdmin starts an emulator (clk may be nil for the real clock) and connects
// both clients; the admin client has no retries, so that errors surface at once.
func setupWithAdmin(t *testing.T, clk clock.Clock) *adminBundle {
	t.Helper()
	srv := emulatortest.Start(t, &emulatortest.Options{Config: emulator.Config{Clock: clk}, ClientOptions: testClientOptions()})
	return &adminBundle{srv: srv, adm: srv.NewAdminClient(t), client: srv.Client}
}

// newAdminClient builds an admin client for any connection string (a wrong key, ...)
// with srv's admin client options.
func newAdminClient(t *testing.T, srv *emulatortest.Server, connStr string) *admin.Client {
	t.Helper()
	adm, err := admintransport.NewAdminClient(connStr, srv.AdminClientOptions(t))
	require.NoError(t, err)
	return adm
}

func (b *adminBundle) send(ctx context.Context, t *testing.T, entity string, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := b.client.NewSender(entity, nil)
	require.NoError(t, err)
	defer func() { _ = s.Close(context.Background()) }()
	for _, m := range msgs {
		require.NoError(t, s.SendMessage(ctx, m, nil), "send %s to %s", m.MessageID, entity)
	}
}

// receiveAll receives n messages from r, completes them and returns them.
func receiveAll(ctx context.Context, t *testing.T, r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
}, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	msgs := receiveN(ctx, t, r, n)
	for _, m := range msgs {
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
	}
	return msgs
}

func bodies(msgs []*azservicebus.ReceivedMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	return out
}

func (b *adminBundle) subscriptionCounts(ctx context.Context, t *testing.T, topic, sub string) admin.SubscriptionRuntimeProperties {
	t.Helper()
	p, err := b.adm.GetSubscriptionRuntimeProperties(ctx, topic, sub, nil)
	require.NoError(t, err)
	require.NotNil(t, p, "subscription %s/%s", topic, sub)
	return p.SubscriptionRuntimeProperties
}

func (b *adminBundle) queueCounts(ctx context.Context, t *testing.T, queue string) admin.QueueRuntimeProperties {
	t.Helper()
	p, err := b.adm.GetQueueRuntimeProperties(ctx, queue, nil)
	require.NoError(t, err)
	require.NotNil(t, p, "queue %s", queue)
	return p.QueueRuntimeProperties
}

// The Gjura layout: every source topic has a subscription that stamps a session id
// on the messages carrying the session properties and forwards them to one
// sequencing topic, whose session subscription a worker reads.
const (
	gjuraFilter = "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)"
	gjuraAction = "SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId"
)

func gjuraMessage(id, session, tx, instance string) *azservicebus.Message {
	props := map[string]any{}
	for k, v := range map[string]string{"SessionName": session, "TransactionId": tx, "InstanceId": instance} {
		if v != "" {
			props[k] = v
		}
	}
	return &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id), ApplicationProperties: props}
}

func TestGjuraLayoutBuiltWithTheAdminClient(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	const seqTopic, seqSub, fwdSub = "sequencing", "worker", "to-sequencing"
	sources := []string{"orders", "payments"}

	_, err := b.adm.CreateTopic(ctx, seqTopic, nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, seqTopic, seqSub, &admin.CreateSubscriptionOptions{
		Properties: &admin.SubscriptionProperties{RequiresSession: to.Ptr(true)},
	})
	require.NoError(t, err)
	for _, src := range sources {
		_, err := b.adm.CreateTopic(ctx, src, nil)
		require.NoError(t, err)
		created, err := b.adm.CreateSubscription(ctx, src, fwdSub, &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr(seqTopic)},
		})
		require.NoError(t, err)
		require.NotNil(t, created.ForwardTo)
		require.True(t, strings.HasSuffix(*created.ForwardTo, "/"+seqTopic), "ForwardTo %q", *created.ForwardTo)
		_, err = b.adm.CreateRule(ctx, src, fwdSub, &admin.CreateRuleOptions{
			Name:   to.Ptr("gjura"),
			Filter: &admin.SQLFilter{Expression: gjuraFilter},
			Action: &admin.SQLAction{Expression: gjuraAction},
		})
		require.NoError(t, err)
		_, err = b.adm.DeleteRule(ctx, src, fwdSub, "$Default", nil)
		require.NoError(t, err)

		var names []string
		pager := b.adm.NewListRulesPager(src, fwdSub, nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, r := range page.Rules {
				names = append(names, r.Name)
				require.Equal(t, &admin.SQLFilter{Expression: gjuraFilter}, r.Filter)
				require.Equal(t, &admin.SQLAction{Expression: gjuraAction}, r.Action)
			}
		}
		require.Equal(t, []string{"gjura"}, names)
	}

	// Interleaved sends to both source topics; only those with both properties go on.
	b.send(ctx, t, "orders", gjuraMessage("1", "checkout", "tx-7", "i-1"))
	b.send(ctx, t, "payments", gjuraMessage("2", "checkout", "tx-7", "i-1"))
	b.send(ctx, t, "orders", gjuraMessage("no-tx", "checkout", "", "i-1"))
	b.send(ctx, t, "payments", gjuraMessage("other-instance", "checkout", "tx-7", "i-2"))
	b.send(ctx, t, "orders", gjuraMessage("3", "checkout", "tx-7", "i-1"))
	b.send(ctx, t, "payments", &azservicebus.Message{MessageID: to.Ptr("plain"), Body: []byte("plain")})
	b.send(ctx, t, "payments", gjuraMessage("4", "checkout", "tx-7", "i-1"))
	// Without InstanceId the action's expression is NULL: the message is forwarded
	// without a session id, and the session subscription dead-letters it.
	b.send(ctx, t, "orders", gjuraMessage("no-instance", "checkout", "tx-7", ""))

	counts := b.subscriptionCounts(ctx, t, seqTopic, seqSub)
	require.Equal(t, int32(5), counts.ActiveMessageCount, "the messages without the session properties were not forwarded")
	require.Equal(t, int32(1), counts.DeadLetterMessageCount)
	dlq, err := b.client.NewReceiverForSubscription(seqTopic, seqSub, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	require.NoError(t, err)
	defer func() { _ = dlq.Close(context.Background()) }()
	dead := receiveAll(ctx, t, dlq, 1)[0]
	require.Equal(t, "no-instance", dead.MessageID)
	require.Nil(t, dead.SessionID)
	require.Equal(t, broker.ReasonSessionIDIsNull, *dead.DeadLetterReason)
	for _, src := range sources {
		c := b.subscriptionCounts(ctx, t, src, fwdSub)
		require.Zero(t, c.ActiveMessageCount, "%s: forwarding subscriptions keep nothing", src)
		require.Zero(t, c.DeadLetterMessageCount, src)
		require.Zero(t, c.TransferDeadLetterMessageCount, src)
	}

	sr, err := b.client.AcceptSessionForSubscription(ctx, seqTopic, seqSub, "checkout_tx-7_i-1", nil)
	require.NoError(t, err)
	defer func() { _ = sr.Close(context.Background()) }()
	got := receiveAll(ctx, t, sr, 4)
	require.Equal(t, []string{"1", "2", "3", "4"}, bodies(got), "broker order across both source topics")
	for i, m := range got {
		require.Equal(t, "checkout_tx-7_i-1", *m.SessionID)
		require.Equal(t, "checkout", m.ApplicationProperties["SessionName"], "application properties travel along")
		if i > 0 {
			require.Greater(t, *m.SequenceNumber, *got[i-1].SequenceNumber)
		}
	}

	other, err := b.client.AcceptSessionForSubscription(ctx, seqTopic, seqSub, "checkout_tx-7_i-2", nil)
	require.NoError(t, err)
	defer func() { _ = other.Close(context.Background()) }()
	require.Equal(t, []string{"other-instance"}, bodies(receiveAll(ctx, t, other, 1)))

	require.Zero(t, b.subscriptionCounts(ctx, t, seqTopic, seqSub).ActiveMessageCount)
}

// receivedCopy is what a test checks of a message a subscription delivered.
type receivedCopy struct {
	ID, Rule, Subject, To, CorrelationID string
	Props                                map[string]any
}

func copiesOf(msgs []*azservicebus.ReceivedMessage) []receivedCopy {
	out := make([]receivedCopy, 0, len(msgs))
	for _, m := range msgs {
		c := receivedCopy{ID: m.MessageID, Props: map[string]any{}}
		for k, v := range m.ApplicationProperties {
			if k == "RuleName" {
				c.Rule, _ = v.(string)
				continue
			}
			c.Props[k] = v
		}
		if m.Subject != nil {
			c.Subject = *m.Subject
		}
		if m.To != nil {
			c.To = *m.To
		}
		if m.CorrelationID != nil {
			c.CorrelationID = *m.CorrelationID
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return out[i].ID < out[j].ID
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

func TestSQLAndCorrelationRulesThroughTheAdminClient(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	const topic = "events"
	_, err := b.adm.CreateTopic(ctx, topic, nil)
	require.NoError(t, err)

	// "routed": a parameterized SQL rule with an action, and two correlation rules
	// (system properties, typed application properties) without one.
	_, err = b.adm.CreateSubscription(ctx, topic, "routed", nil)
	require.NoError(t, err)
	for _, r := range []admin.CreateRuleOptions{
		{
			Name: to.Ptr("big"),
			Filter: &admin.SQLFilter{
				Expression: "user.amount > @min AND sys.Label = @label",
				Parameters: map[string]any{"@min": int64(100), "@label": "order"},
			},
			Action: &admin.SQLAction{
				Expression: "SET sys.Label = 'big-' + sys.Label; SET user.tier = @tier",
				Parameters: map[string]any{"@tier": "gold"},
			},
		},
		{Name: to.Ptr("by-correlation"), Filter: &admin.CorrelationFilter{CorrelationID: to.Ptr("c-1"), Subject: to.Ptr("order")}},
		{Name: to.Ptr("by-props"), Filter: &admin.CorrelationFilter{ApplicationProperties: map[string]any{"region": "eu", "priority": int64(1)}}},
	} {
		_, err := b.adm.CreateRule(ctx, topic, "routed", &r)
		require.NoError(t, err, *r.Name)
	}
	_, err = b.adm.DeleteRule(ctx, topic, "routed", "$Default", nil)
	require.NoError(t, err)

	// "stamped": created with its rule as the default rule; the action rewrites
	// system and application properties.
	_, err = b.adm.CreateSubscription(ctx, topic, "stamped", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{
			Name:   "stamp",
			Filter: &admin.SQLFilter{Expression: "sys.MessageId IN (@a, @b)", Parameters: map[string]any{"a": "m1", "b": "m5"}},
			Action: &admin.SQLAction{
				Expression: "SET sys.To = @to; SET sys.CorrelationId = 'corr-' + sys.MessageId; SET sys.Label = 'stamped'; " +
					"SET user.stamp = @stamp; REMOVE user.region",
				Parameters: map[string]any{"to": "dest", "stamp": int64(7)},
			},
		},
	}})
	require.NoError(t, err)

	// Reads return the rules as written, parameters included.
	rule, err := b.adm.GetRule(ctx, topic, "routed", "big", nil)
	require.NoError(t, err)
	require.Equal(t, &admin.SQLFilter{
		Expression: "user.amount > @min AND sys.Label = @label",
		Parameters: map[string]any{"@min": int64(100), "@label": "order"},
	}, rule.Filter)
	require.Equal(t, &admin.SQLAction{
		Expression: "SET sys.Label = 'big-' + sys.Label; SET user.tier = @tier",
		Parameters: map[string]any{"@tier": "gold"},
	}, rule.Action)

	msg := func(id, subject, corr string, props map[string]any) *azservicebus.Message {
		m := &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id), ApplicationProperties: props}
		if subject != "" {
			m.Subject = to.Ptr(subject)
		}
		if corr != "" {
			m.CorrelationID = to.Ptr(corr)
		}
		return m
	}
	b.send(ctx, t, topic,
		// big (with its action) and both correlation rules: two copies.
		msg("m1", "order", "c-1", map[string]any{"amount": int64(500), "region": "eu", "priority": int64(1)}),
		// by-props only.
		msg("m2", "order", "c-2", map[string]any{"amount": int64(50), "region": "eu", "priority": int64(1)}),
		// "1" is a string: correlation properties compare with their types.
		msg("m3", "order", "", map[string]any{"amount": int64(50), "region": "eu", "priority": "1"}),
		// neither the label nor the subject fits.
		msg("m4", "invoice", "c-1", map[string]any{"amount": int64(500)}),
		// big only.
		msg("m5", "order", "", map[string]any{"amount": int64(101)}),
	)

	require.Equal(t, int32(4), b.subscriptionCounts(ctx, t, topic, "routed").ActiveMessageCount)
	r, err := b.client.NewReceiverForSubscription(topic, "routed", nil)
	require.NoError(t, err)
	defer func() { _ = r.Close(context.Background()) }()
	require.Equal(t, []receivedCopy{
		{ID: "m1", Subject: "order", CorrelationID: "c-1", Props: map[string]any{"amount": int64(500), "region": "eu", "priority": int64(1)}},
		{ID: "m1", Rule: "big", Subject: "big-order", CorrelationID: "c-1", Props: map[string]any{"amount": int64(500), "region": "eu", "priority": int64(1), "tier": "gold"}},
		{ID: "m2", Subject: "order", CorrelationID: "c-2", Props: map[string]any{"amount": int64(50), "region": "eu", "priority": int64(1)}},
		{ID: "m5", Rule: "big", Subject: "big-order", Props: map[string]any{"amount": int64(101), "tier": "gold"}},
	}, copiesOf(receiveAll(ctx, t, r, 4)))

	require.Equal(t, int32(2), b.subscriptionCounts(ctx, t, topic, "stamped").ActiveMessageCount)
	sr, err := b.client.NewReceiverForSubscription(topic, "stamped", nil)
	require.NoError(t, err)
	defer func() { _ = sr.Close(context.Background()) }()
	require.Equal(t, []receivedCopy{
		{ID: "m1", Rule: "stamp", Subject: "stamped", To: "dest", CorrelationID: "corr-m1", Props: map[string]any{"amount": int64(500), "priority": int64(1), "stamp": int64(7)}},
		{ID: "m5", Rule: "stamp", Subject: "stamped", To: "dest", CorrelationID: "corr-m5", Props: map[string]any{"amount": int64(101), "stamp": int64(7)}},
	}, copiesOf(receiveAll(ctx, t, sr, 2)))

	topicProps, err := b.adm.GetTopicRuntimeProperties(ctx, topic, nil)
	require.NoError(t, err)
	require.Equal(t, int32(2), topicProps.SubscriptionCount)
}

func TestQueueForwardToSetThroughUpdateQueue(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	for _, q := range []string{"fwd-target", "fwd-source"} {
		_, err := b.adm.CreateQueue(ctx, q, nil)
		require.NoError(t, err)
	}
	b.send(ctx, t, "fwd-source", &azservicebus.Message{Body: []byte("before")})

	got, err := b.adm.GetQueue(ctx, "fwd-source", nil)
	require.NoError(t, err)
	require.Nil(t, got.ForwardTo)
	props := got.QueueProperties
	props.ForwardTo = to.Ptr("fwd-target")
	updated, err := b.adm.UpdateQueue(ctx, "fwd-source", props, nil)
	require.NoError(t, err)
	require.NotNil(t, updated.ForwardTo)
	require.True(t, strings.HasPrefix(*updated.ForwardTo, "sb://") && strings.HasSuffix(*updated.ForwardTo, "/fwd-target"),
		"returned as an absolute URI: %q", *updated.ForwardTo)

	b.send(ctx, t, "fwd-source", &azservicebus.Message{Body: []byte("after")})
	require.Zero(t, b.queueCounts(ctx, t, "fwd-source").ActiveMessageCount, "the backlog moved on when ForwardTo was set")
	r := b.receiverFor(t, "fwd-target", nil)
	require.Equal(t, []string{"before", "after"}, bodies(receiveAll(ctx, t, r, 2)))

	// Clearing ForwardTo stops forwarding.
	props = updated.QueueProperties
	props.ForwardTo = nil
	updated, err = b.adm.UpdateQueue(ctx, "fwd-source", props, nil)
	require.NoError(t, err)
	require.Nil(t, updated.ForwardTo)
	b.send(ctx, t, "fwd-source", &azservicebus.Message{Body: []byte("stays")})
	require.Equal(t, int32(1), b.queueCounts(ctx, t, "fwd-source").ActiveMessageCount)
}

func (b *adminBundle) receiverFor(t *testing.T, queue string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := b.client.NewReceiverForQueue(queue, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func TestForwardDeadLetteredMessagesTo(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	_, err := b.adm.CreateQueue(ctx, "poison-sink", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateQueue(ctx, "work", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		ForwardDeadLetteredMessagesTo: to.Ptr("poison-sink"),
	}})
	require.NoError(t, err)

	b.send(ctx, t, "work", &azservicebus.Message{MessageID: to.Ptr("p1"), Body: []byte("poison")})
	work := b.receiverFor(t, "work", nil)
	m := receiveN(ctx, t, work, 1)[0]
	require.NoError(t, work.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{
		Reason: to.Ptr("BadInput"), ErrorDescription: to.Ptr("cannot parse"),
	}))

	sink := b.receiverFor(t, "poison-sink", nil)
	got := receiveAll(ctx, t, sink, 1)[0]
	require.Equal(t, "poison", string(got.Body))
	require.Equal(t, "p1", got.MessageID)
	require.Equal(t, "BadInput", *got.DeadLetterReason)
	require.Equal(t, "cannot parse", *got.DeadLetterErrorDescription)

	c := b.queueCounts(ctx, t, "work")
	require.Zero(t, c.ActiveMessageCount)
	require.Zero(t, c.DeadLetterMessageCount, "the dead-lettered message moved on")
}

// TestForwardingLoopsAndLongChainsEndInTheTransferDeadLetterQueue: after four
// transfers a message stops in the transfer dead-letter queue of the entity where it
// is, which the SDK reads with SubQueueTransfer.
func TestForwardingLoopsAndLongChainsEndInTheTransferDeadLetterQueue(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)

	// A loop: loop-a ⇄ loop-b, closed with UpdateQueue.
	for _, q := range []string{"loop-a", "loop-b"} {
		_, err := b.adm.CreateQueue(ctx, q, nil)
		require.NoError(t, err)
	}
	for from, target := range map[string]string{"loop-a": "loop-b", "loop-b": "loop-a"} {
		got, err := b.adm.GetQueue(ctx, from, nil)
		require.NoError(t, err)
		props := got.QueueProperties
		props.ForwardTo = to.Ptr(target)
		_, err = b.adm.UpdateQueue(ctx, from, props, nil)
		require.NoError(t, err)
	}
	b.send(ctx, t, "loop-a", &azservicebus.Message{MessageID: to.Ptr("looping"), Body: []byte("round and round")})
	// a→b, b→a, a→b, b→a: four hops, then it stops in loop-a.
	require.Equal(t, int32(1), b.queueCounts(ctx, t, "loop-a").TransferDeadLetterMessageCount)
	require.Zero(t, b.queueCounts(ctx, t, "loop-b").TransferDeadLetterMessageCount)
	tdlq := b.receiverFor(t, "loop-a", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	first := receiveN(ctx, t, tdlq, 1)[0]
	require.Equal(t, "looping", first.MessageID)
	// Locks taken on a transfer dead-letter queue are found by the fault hook too.
	require.NoError(t, b.srv.ExpireMessageLock(first.LockToken))
	m := receiveAll(ctx, t, tdlq, 1)[0]
	require.Equal(t, "looping", m.MessageID)
	require.Equal(t, uint32(2), m.DeliveryCount, "redelivered after the lock expired")
	require.Equal(t, broker.ReasonMaxTransferHopCountExceeded, *m.DeadLetterReason)
	require.Zero(t, b.queueCounts(ctx, t, "loop-a").TransferDeadLetterMessageCount, "completed from the transfer dead-letter queue")

	// A chain of five forwarding queues: hop 4 ends at chain-4, whose transfer to chain-5 is refused.
	names := []string{"chain-0", "chain-1", "chain-2", "chain-3", "chain-4", "chain-5"}
	for i := len(names) - 1; i >= 0; i-- {
		var props *admin.QueueProperties
		if i < len(names)-1 {
			props = &admin.QueueProperties{ForwardTo: to.Ptr(names[i+1])}
		}
		_, err := b.adm.CreateQueue(ctx, names[i], &admin.CreateQueueOptions{Properties: props})
		require.NoError(t, err)
	}
	b.send(ctx, t, "chain-0", &azservicebus.Message{MessageID: to.Ptr("far"), Body: []byte("too far")})
	for _, q := range names {
		c := b.queueCounts(ctx, t, q)
		require.Zero(t, c.ActiveMessageCount, q)
		if q == "chain-4" {
			require.Equal(t, int32(1), c.TransferDeadLetterMessageCount, q)
			require.Equal(t, int64(1), c.TotalMessageCount, q)
		} else {
			require.Zero(t, c.TransferDeadLetterMessageCount, q)
		}
	}
	far := receiveN(ctx, t, b.receiverFor(t, "chain-4", &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueTransfer, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
	}), 1)[0]
	require.Equal(t, "far", far.MessageID)
	require.Equal(t, broker.ReasonMaxTransferHopCountExceeded, *far.DeadLetterReason)
	require.NotNil(t, far.DeadLetterSource)
	require.Equal(t, "chain-4", *far.DeadLetterSource)
}

// BenchmarkGjuraForwardingSend is one SDK send to a source topic of the Gjura layout:
// rule evaluation, the session-id action and the forward to the sequencing topic's
// session subscription.
func BenchmarkGjuraForwardingSend(b *testing.B) {
	ctx := b.Context()
	srv := emulatortest.Start(b, &emulatortest.Options{Topics: map[string]emulatortest.Topic{
		"sequencing": {Subscriptions: map[string]emulatortest.Subscription{"worker": {Properties: broker.EntityProperties{RequiresSession: true}}}},
		"orders": {Subscriptions: map[string]emulatortest.Subscription{"to-sequencing": {
			Properties: broker.EntityProperties{ForwardTo: "sequencing"},
			Rules:      []broker.Rule{{Name: "gjura", FilterType: broker.FilterSQL, SQLExpression: gjuraFilter, ActionSQLExpression: gjuraAction}},
		}}},
	}})
	s, err := srv.Client.NewSender("orders", nil)
	require.NoError(b, err)
	defer func() { _ = s.Close(context.Background()) }()
	m := gjuraMessage("m", "checkout", "tx-1", "i-1")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.SendMessage(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	info, err := srv.Broker().GetSubscription("sequencing", "worker")
	require.NoError(b, err)
	require.Positive(b, info.Counts.Active)
}

// TestSubscriptionForwardingAndRulesChangedAtRuntime: forwarding and rules set with
// UpdateSubscription and UpdateRule apply to the backlog and to what comes next,
// scheduled messages included, and MaxDeliveryCount dead-letters go to
// ForwardDeadLetteredMessagesTo.
func TestSubscriptionForwardingAndRulesChangedAtRuntime(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setupWithAdmin(t, clk)
	ctx := testCtx(t)
	for _, q := range []string{"archive", "dead-archive"} {
		_, err := b.adm.CreateQueue(ctx, q, nil)
		require.NoError(t, err)
	}
	_, err := b.adm.CreateTopic(ctx, "feed", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, "feed", "tap", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, "feed", "fragile", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		MaxDeliveryCount: to.Ptr(int32(1)), ForwardDeadLetteredMessagesTo: to.Ptr("dead-archive"),
	}})
	require.NoError(t, err)
	keep := func(body string, keep bool) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"keep": keep}}
	}

	b.send(ctx, t, "feed", keep("a", true))
	require.Equal(t, int32(1), b.subscriptionCounts(ctx, t, "feed", "tap").ActiveMessageCount)

	got, err := b.adm.GetSubscription(ctx, "feed", "tap", nil)
	require.NoError(t, err)
	props := got.SubscriptionProperties
	props.ForwardTo = to.Ptr("archive")
	_, err = b.adm.UpdateSubscription(ctx, "feed", "tap", props, nil)
	require.NoError(t, err)
	require.Zero(t, b.subscriptionCounts(ctx, t, "feed", "tap").ActiveMessageCount, "the backlog moved on")

	_, err = b.adm.UpdateRule(ctx, "feed", "tap", admin.RuleProperties{
		Name: "$Default", Filter: &admin.SQLFilter{Expression: "user.keep = @yes", Parameters: map[string]any{"@yes": true}},
	})
	require.NoError(t, err)
	b.send(ctx, t, "feed", keep("b", true), keep("c", false))

	s, err := b.client.NewSender("feed", nil)
	require.NoError(t, err)
	defer func() { _ = s.Close(context.Background()) }()
	_, err = s.ScheduleMessages(ctx, []*azservicebus.Message{keep("d", true)}, clk.Now().Add(time.Minute), nil)
	require.NoError(t, err)
	topic, err := b.adm.GetTopicRuntimeProperties(ctx, "feed", nil)
	require.NoError(t, err)
	require.Equal(t, int32(1), topic.ScheduledMessageCount)
	require.Equal(t, int32(2), b.queueCounts(ctx, t, "archive").ActiveMessageCount, "d is not due yet")
	clk.Advance(time.Minute)

	archive := b.receiverFor(t, "archive", nil)
	require.Equal(t, []string{"a", "b", "d"}, bodies(receiveAll(ctx, t, archive, 3)))

	// fragile: every message so far, one delivery each, then the dead-letter
	// queue, forwarded.
	fr, err := b.client.NewReceiverForSubscription("feed", "fragile", nil)
	require.NoError(t, err)
	defer func() { _ = fr.Close(context.Background()) }()
	for _, m := range receiveN(ctx, t, fr, 4) {
		require.NoError(t, fr.AbandonMessage(ctx, m, nil))
	}
	dead := receiveAll(ctx, t, b.receiverFor(t, "dead-archive", nil), 4)
	require.Equal(t, []string{"a", "b", "c", "d"}, bodies(dead))
	require.Equal(t, "MaxDeliveryCountExceeded", *dead[0].DeadLetterReason)
	c := b.subscriptionCounts(ctx, t, "feed", "fragile")
	require.Zero(t, c.ActiveMessageCount)
	require.Zero(t, c.DeadLetterMessageCount)
}
