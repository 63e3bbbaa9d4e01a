package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// counts returns an entity's runtime counts.
func counts(t *testing.T, e *broker.Entity) broker.Counts {
	t.Helper()
	return e.Info().Counts
}

func TestForwardQueueToQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	dst := tb.queue(t, "dst", broker.EntityProperties{})
	src := tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"})
	send(t, dst, msg("direct-1"), msg("direct-2"))
	send(t, src, msg("pre")) // src number 1
	m := withProps("fwd", map[string]any{"k": "v"})
	id := "id-1"
	m.Properties = &amqp.MessageProperties{MessageID: id}
	send(t, src, m) // src number 2

	require.Equal(t, broker.Counts{}, counts(t, src), "nothing stays in the source")
	ds := receiveNow(t, dst, 10, peekLock)
	require.Equal(t, []string{"direct-1", "direct-2", "pre", "fwd"}, bodies(ds))
	require.Equal(t, []int64{1, 2, 3, 4}, seqs(ds), "forwarded messages get the destination's numbers")
	fwd := ds[3].Message
	require.Equal(t, int64(2), fwd.Annotations[broker.AnnotationEnqueueSequenceNumber], "the source's number is kept")
	require.Nil(t, ds[0].Message.Annotations[broker.AnnotationEnqueueSequenceNumber])
	require.Equal(t, "v", fwd.ApplicationProperties["k"])
	require.Equal(t, id, fwd.Properties.MessageID)
}

func TestForwardTargetChecks(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.queue(t, "q", broker.EntityProperties{})
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	tests := []struct {
		name   string
		create func() error
		want   string
	}{
		{"queue to missing entity", func() error { return tb.b.CreateQueue("a", broker.EntityProperties{ForwardTo: "nowhere"}) },
			`ForwardTo: no queue or topic named "nowhere"`},
		{"dead letters to missing entity", func() error {
			return tb.b.CreateQueue("b", broker.EntityProperties{ForwardDeadLetteredMessagesTo: "nowhere"})
		}, `ForwardDeadLetteredMessagesTo: no queue or topic named "nowhere"`},
		{"subscription to missing entity", func() error {
			return tb.b.CreateSubscription("t", "s", broker.EntityProperties{ForwardTo: "nowhere"})
		}, `no queue or topic named "nowhere"`},
		{"queue to itself", func() error { return tb.b.UpdateQueue("q", broker.EntityProperties{ForwardTo: "Q"}) },
			"cannot forward to itself"},
	}
	for _, tt := range tests {
		require.ErrorIs(t, tt.create(), broker.ErrInvalidConfig, tt.name)
		require.ErrorContains(t, tt.create(), tt.want, tt.name)
	}
	require.Len(t, tb.b.ListQueues(), 1, "refused queues are not created")

	// An absolute URI names the entity.
	require.NoError(t, tb.b.CreateQueue("c", broker.EntityProperties{ForwardTo: "sb://ns.servicebus.windows.net/t"}))
	info, err := tb.b.GetQueue("c")
	require.NoError(t, err)
	require.Equal(t, "t", info.Properties.ForwardTo)
}

func TestForwardSetByUpdateMovesTheBacklog(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	dst := tb.queue(t, "dst", broker.EntityProperties{})
	src := tb.queue(t, "src", broker.EntityProperties{})
	send(t, src, msg("a"), msg("b"), msg("c"))
	locked := receiveOne(t, src, peekLock) // "a" stays locked
	require.NoError(t, tb.b.UpdateQueue("src", broker.EntityProperties{ForwardTo: "dst"}))
	require.Equal(t, []string{"b", "c"}, peekBodies(dst.Peek(1, 10, "")))

	// The locked message moves on when it is abandoned.
	require.NoError(t, src.Abandon(locked.LockToken, nil))
	require.Equal(t, []string{"b", "c", "a"}, peekBodies(dst.Peek(1, 10, "")))
	require.Equal(t, int64(0), counts(t, src).Active)
}

func TestForwardScheduledMessageWhenDue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	dst := tb.queue(t, "dst", broker.EntityProperties{})
	src := tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"})
	nums, err := src.Schedule([]*amqp.Message{msg("later")}, epoch.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(1), counts(t, src).Scheduled, "the source holds it until due")
	require.Empty(t, dst.Peek(1, 10, ""))
	tb.clk.Advance(time.Minute)
	ds := receiveNow(t, dst, 10, peekLock)
	require.Equal(t, []string{"later"}, bodies(ds))
	require.Equal(t, nums[0], ds[0].Message.Annotations[broker.AnnotationEnqueueSequenceNumber])
	require.Equal(t, broker.Counts{}, counts(t, src))
}

// TestForwardGjuraLayout builds the layout seqbus deploys: messages arrive on a source
// topic; a subscription whose SQL filter requires the sequencing properties gives each
// message its session id with a rule action and forwards it to the sequencing topic,
// whose session-enabled subscription the workers read session by session.
func TestForwardGjuraLayout(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("sequencing", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("sequencing", "work", broker.EntityProperties{RequiresSession: true}))
	require.NoError(t, tb.b.CreateTopic("source", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("source", "route", broker.EntityProperties{ForwardTo: "sequencing"},
		[]broker.Rule{{
			Name: "gjura", FilterType: broker.FilterSQL,
			SQLExpression:       "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)",
			ActionSQLExpression: "SET sys.SessionId = user.SessionName + '_' + user.TransactionId",
		}}))

	tx := func(body, session string, txID int64) *amqp.Message {
		return withProps(body, map[string]any{"SessionName": session, "TransactionId": txID})
	}
	lacking := withProps("no-tx", map[string]any{"SessionName": "cust"})
	send(t, tb.lookup(t, "source"), tx("a1", "cust", 7), lacking, tx("b1", "cust", 8), tx("a2", "cust", 7))

	route := tb.lookup(t, "source/Subscriptions/route")
	require.Equal(t, broker.Counts{}, counts(t, route), "matching messages moved on; the rest never entered")
	work := tb.lookup(t, "sequencing/Subscriptions/work")
	require.Equal(t, broker.Counts{Active: 3, Total: 3, SizeBytes: counts(t, work).SizeBytes}, counts(t, work))

	lock, err := work.AcceptNamedSession("cust_7", "worker-1")
	require.NoError(t, err)
	ds := receiveNow(t, work, 10, broker.ReceiveOptions{Session: lock})
	require.Equal(t, []string{"a1", "a2"}, bodies(ds))
	for _, d := range ds {
		require.Equal(t, "cust_7", *d.Message.Properties.GroupID)
		require.Equal(t, int64(7), d.Message.ApplicationProperties["TransactionId"])
		require.Equal(t, "gjura", d.Message.ApplicationProperties[broker.PropertyRuleName])
	}
	require.Equal(t, []int64{1, 3}, seqs(ds), "the sequencing subscription numbers its arrivals")
	lock.Release()

	lock, err = work.AcceptNamedSession("cust_8", "worker-1")
	require.NoError(t, err)
	require.Equal(t, []string{"b1"}, bodies(receiveNow(t, work, 10, broker.ReceiveOptions{Session: lock})))
	lock.Release()
}

// chain creates queues q1..qn where each forwards to the next, and returns them.
func chain(t *testing.T, tb *bundle, n int) []*broker.Entity {
	t.Helper()
	out := make([]*broker.Entity, n)
	for i := n; i >= 1; i-- {
		p := broker.EntityProperties{}
		if i < n {
			p.ForwardTo = fmt.Sprintf("q%d", i+1)
		}
		out[i-1] = tb.queue(t, fmt.Sprintf("q%d", i), p)
	}
	return out
}

func TestForwardHopLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		transfers int
		// arrives is the index of the entity that holds the message; dead says whether
		// it is in that entity's transfer dead-letter queue.
		arrives int
		dead    bool
	}{
		{transfers: 1, arrives: 1},
		{transfers: 4, arrives: 4},
		{transfers: 5, arrives: 4, dead: true},
		{transfers: 7, arrives: 4, dead: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d transfers", tt.transfers), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			qs := chain(t, tb, tt.transfers+1)
			send(t, qs[0], msg("m"))
			for i, q := range qs {
				c := counts(t, q)
				if i != tt.arrives {
					require.Equal(t, int64(0), c.Total, "q%d", i+1)
					continue
				}
				if !tt.dead {
					require.Equal(t, int64(1), c.Active, "q%d", i+1)
					continue
				}
				require.Equal(t, int64(1), c.TransferDeadLetter, "q%d", i+1)
				require.Equal(t, int64(1), c.Total, "q%d", i+1)
				d := receiveOne(t, tb.lookup(t, q.Path()+"/$Transfer/$DeadLetterQueue"), peekLock)
				require.Equal(t, broker.ReasonMaxTransferHopCountExceeded, d.Message.ApplicationProperties[broker.PropertyDeadLetterReason])
				require.Contains(t, d.Message.ApplicationProperties[broker.PropertyDeadLetterErrorDescription], "set to 4")
				require.Equal(t, int64(1), d.Message.Annotations[broker.AnnotationEnqueueSequenceNumber], "q1's number")
			}
		})
	}
}

func TestForwardLoopEndsInTransferDeadLetterQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	a := tb.queue(t, "a", broker.EntityProperties{})
	b := tb.queue(t, "b", broker.EntityProperties{ForwardTo: "a"})
	require.NoError(t, tb.b.UpdateQueue("a", broker.EntityProperties{ForwardTo: "b"}))
	send(t, a, msg("from-a")) // a→b→a→b→a: four transfers, stops in a
	send(t, b, msg("from-b"))
	require.Equal(t, int64(1), counts(t, a).TransferDeadLetter)
	require.Equal(t, int64(1), counts(t, b).TransferDeadLetter)
	require.Equal(t, []string{"from-a"}, peekBodies(tb.lookup(t, "a/$Transfer/$DeadLetterQueue").Peek(1, 10, "")))
	require.Equal(t, []string{"from-b"}, peekBodies(tb.lookup(t, "B/$transfer/$deadletterqueue").Peek(1, 10, "")))
}

func TestForwardSubscriptionIntoOwnTopicIsLoopSafe(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "echo", broker.EntityProperties{ForwardTo: "t"}))
	require.NoError(t, tb.b.CreateSubscription("t", "keep", broker.EntityProperties{}))
	send(t, tb.lookup(t, "t"), msg("m"))
	require.Equal(t, int64(5), counts(t, tb.lookup(t, "t/Subscriptions/keep")).Active, "the original and four echoes")
	require.Equal(t, int64(1), counts(t, tb.lookup(t, "t/Subscriptions/echo")).TransferDeadLetter)
}

func TestForwardDeadLetteredMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sink := tb.queue(t, "sink", broker.EntityProperties{})
	q := tb.queue(t, "q", broker.EntityProperties{MaxDeliveryCount: 1, ForwardDeadLetteredMessagesTo: "sink",
		DeadLetteringOnMessageExpiration: true})
	expiring := msg("expired")
	expiring.Header = &amqp.MessageHeader{TTL: time.Minute}
	send(t, q, msg("explicit"), msg("exhausted"), expiring)
	ds := receiveNow(t, q, 2, peekLock)
	require.NoError(t, q.DeadLetter(ds[0].LockToken, "Bad", "bad input", nil))
	require.NoError(t, q.Abandon(ds[1].LockToken, nil))
	tb.clk.Advance(time.Minute)

	require.Equal(t, int64(0), counts(t, q).Total, "nothing stays in the source or its dead-letter queue")
	got := receiveNow(t, sink, 10, peekLock)
	require.Equal(t, []string{"explicit", "exhausted", "expired"}, bodies(got))
	reasons := []any{}
	for _, d := range got {
		reasons = append(reasons, d.Message.ApplicationProperties[broker.PropertyDeadLetterReason])
		require.Equal(t, "q", d.Message.Annotations[broker.AnnotationDeadLetterSource])
	}
	require.Equal(t, []any{"Bad", broker.ReasonMaxDeliveryCountExceeded, broker.ReasonTTLExpired}, reasons)
}

func TestForwardFailuresDeadLetter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup returns the entity sent to and the dead-letter queue the message ends in.
		setup  func(t *testing.T, tb *bundle) (src, dlq *broker.Entity)
		reason string
	}{
		{"target deleted", func(t *testing.T, tb *bundle) (*broker.Entity, *broker.Entity) {
			tb.queue(t, "dst", broker.EntityProperties{})
			src := tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"})
			require.NoError(t, tb.b.DeleteQueue("dst"))
			return src, tb.lookup(t, "src/$Transfer/$DeadLetterQueue")
		}, broker.ReasonForwardingFailed},
		{"target send-disabled", func(t *testing.T, tb *bundle) (*broker.Entity, *broker.Entity) {
			tb.queue(t, "dst", broker.EntityProperties{Status: broker.StatusSendDisabled})
			src := tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"})
			return src, tb.lookup(t, "src/$Transfer/$DeadLetterQueue")
		}, broker.ReasonForwardingFailed},
		{"no session id for a session queue", func(t *testing.T, tb *bundle) (*broker.Entity, *broker.Entity) {
			dst := tb.queue(t, "dst", broker.EntityProperties{RequiresSession: true})
			return tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"}), tb.lookup(t, dst.Path()+"/$DeadLetterQueue")
		}, broker.ReasonSessionIDIsNull},
		{"no session id for a session subscription", func(t *testing.T, tb *bundle) (*broker.Entity, *broker.Entity) {
			require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
			require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{RequiresSession: true}))
			return tb.queue(t, "src", broker.EntityProperties{ForwardTo: "t"}), tb.lookup(t, "t/Subscriptions/s/$DeadLetterQueue")
		}, broker.ReasonSessionIDIsNull},
		{"dead-letter forwarding target deleted", func(t *testing.T, tb *bundle) (*broker.Entity, *broker.Entity) {
			tb.queue(t, "sink", broker.EntityProperties{})
			src := tb.queue(t, "src", broker.EntityProperties{ForwardDeadLetteredMessagesTo: "sink", MaxDeliveryCount: 1})
			require.NoError(t, tb.b.DeleteQueue("sink"))
			send(t, src, msg("m"))
			require.NoError(t, src.Abandon(receiveOne(t, src, peekLock).LockToken, nil))
			return src, tb.lookup(t, "src/$Transfer/$DeadLetterQueue")
		}, broker.ReasonForwardingFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			src, dlq := tt.setup(t, tb)
			if src.Info().Counts.Total == 0 {
				send(t, src, msg("m"))
			}
			d := receiveOne(t, dlq, peekLock)
			require.Equal(t, tt.reason, d.Message.ApplicationProperties[broker.PropertyDeadLetterReason])
			require.NotEmpty(t, d.Message.ApplicationProperties[broker.PropertyDeadLetterErrorDescription])
		})
	}
}

func TestConfigForwardingToLaterEntities(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	uc, err := broker.ParseUserConfig([]byte(`{"UserConfig": {"Namespaces": [{"Name": "ns",
	  "Queues": [{"Name": "first", "Properties": {"ForwardTo": "second"}}, {"Name": "second"}],
	  "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": "first"}}]}]}]}}`))
	require.NoError(t, err)
	require.NoError(t, tb.b.ApplyUserConfig(uc))
	send(t, tb.lookup(t, "t"), msg("m"))
	require.Equal(t, []string{"m"}, peekBodies(tb.lookup(t, "second").Peek(1, 10, "")))

	for target, want := range map[string]string{"missing": `forwarding target "missing"`, "X": "cannot forward to itself"} {
		bad := &broker.UserConfig{Namespaces: []broker.NamespaceConfig{{Name: "ns",
			Queues: []broker.QueueConfig{{Name: "y"}, {Name: "x", Properties: broker.EntityProperties{ForwardTo: target}}}}}}
		err = tb.b.ApplyUserConfig(bad)
		require.ErrorIs(t, err, broker.ErrInvalidConfig)
		require.ErrorContains(t, err, `UserConfig.Namespaces[0].Queues[1].Properties.ForwardTo`)
		require.ErrorContains(t, err, want)
		_, err = tb.b.GetQueue("y")
		require.ErrorIs(t, err, broker.ErrNotFound, "a refused config creates nothing")
	}
}

func TestConfigRuleCompileErrorNamesPathAndPosition(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	uc, err := broker.ParseUserConfig([]byte(`{"UserConfig": {"Namespaces": [{"Name": "ns",
	  "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r", "Properties": {
	    "FilterType": "Sql", "SqlFilter": {"SqlExpression": "a = 1 AND"}}}]}]}]}]}}`))
	require.NoError(t, err)
	err = tb.b.ApplyUserConfig(uc)
	require.ErrorIs(t, err, broker.ErrInvalidConfig)
	require.ErrorContains(t, err, "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0]")
	require.ErrorContains(t, err, "sqlrule: 1:")
	require.Empty(t, tb.b.ListTopics(), "a refused config creates nothing")
}
