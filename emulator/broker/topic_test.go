package broker_test

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestTopicFanOutNumbersPerSubscription(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "early", broker.EntityProperties{}))
	topic := tb.lookup(t, "t")
	send(t, topic, msg("before-late"))
	require.NoError(t, tb.b.CreateSubscription("t", "late", broker.EntityProperties{}))
	send(t, topic, msg("a"), msg("b"))

	early := tb.lookup(t, "t/Subscriptions/early")
	late := tb.lookup(t, "T/subscriptions/LATE")
	e := receiveNow(t, early, 10, peekLock)
	l := receiveNow(t, late, 10, peekLock)
	require.Equal(t, []string{"before-late", "a", "b"}, bodies(e))
	require.Equal(t, []int64{1, 2, 3}, seqs(e))
	require.Equal(t, []string{"a", "b"}, bodies(l))
	require.Equal(t, []int64{1, 2}, seqs(l), "each subscription numbers its copies")

	// Settling one subscription's copy leaves the other alone.
	require.NoError(t, early.Complete(e[1].LockToken))
	require.NoError(t, late.Abandon(l[0].LockToken, map[string]any{"only": "late"}))
	require.Nil(t, early.Peek(1, 10, "")[0].ApplicationProperties["only"])

	_, err := topic.TryReceive(1, peekLock)
	require.ErrorIs(t, err, broker.ErrNotAllowed, "topics cannot be received from")
	require.ErrorIs(t, early.Send(t.Context(), []*amqp.Message{msg("x")}), broker.ErrNotAllowed)
}

func TestRulesDecideWhichSubscriptionsGetACopy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "all", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "none", broker.EntityProperties{},
		[]broker.Rule{{Name: "never", FilterType: broker.FilterFalse}}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "red", broker.EntityProperties{},
		[]broker.Rule{{Name: "red", FilterType: broker.FilterCorrelation,
			Correlation: &broker.CorrelationFilter{Label: "paint", Properties: map[string]any{"color": "red"}}}}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "sqlconst", broker.EntityProperties{},
		[]broker.Rule{{Name: "yes", FilterType: broker.FilterSQL, SQLExpression: " 1 = 1 "}}))

	subject := "paint"
	red := msg("red")
	red.Properties = &amqp.MessageProperties{Subject: &subject}
	red.ApplicationProperties = map[string]any{"color": "red"}
	blue := msg("blue")
	blue.Properties = &amqp.MessageProperties{Subject: &subject}
	blue.ApplicationProperties = map[string]any{"color": "blue"}
	send(t, tb.lookup(t, "t"), red, blue)

	for sub, want := range map[string][]string{
		"all": {"red", "blue"}, "none": {}, "red": {"red"}, "sqlconst": {"red", "blue"},
	} {
		require.Equal(t, want, peekBodies(tb.lookup(t, "t/Subscriptions/"+sub).Peek(1, 10, "")), sub)
	}

	// Rules can be changed at run time.
	require.NoError(t, tb.b.CreateRule("t", "none", broker.Rule{Name: "now-yes"}))
	send(t, tb.lookup(t, "t"), msg("third"))
	require.Equal(t, []string{"third"}, peekBodies(tb.lookup(t, "t/Subscriptions/none").Peek(1, 10, "")))
	require.ErrorIs(t, tb.b.CreateRule("t", "none", broker.Rule{Name: "NOW-YES"}), broker.ErrEntityExists)
	rules, err := tb.b.ListRules("t", "none")
	require.NoError(t, err)
	require.Len(t, rules, 2)
	require.NoError(t, tb.b.DeleteRule("t", "none", "now-yes"))
	require.ErrorIs(t, tb.b.DeleteRule("t", "none", "now-yes"), broker.ErrNotFound)
	r, err := tb.b.GetRule("t", "all", broker.DefaultRuleName)
	require.NoError(t, err)
	require.Equal(t, broker.FilterTrue, r.FilterType)
}

type fakeSQL struct{}

func (fakeSQL) CompileFilter(expr string) (broker.Filter, error) {
	return broker.FilterFunc(func(m *amqp.Message) (bool, error) { return m.ApplicationProperties["sql"] == expr, nil }), nil
}

func (fakeSQL) CompileAction(expr string) (broker.Action, error) {
	return actionFunc(func(m *amqp.Message) error { m.ApplicationProperties["action"] = expr; return nil }), nil
}

type actionFunc func(m *amqp.Message) error

func (f actionFunc) Apply(m *amqp.Message) error { return f(m) }

func TestSQLCompilerHook(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{SQL: fakeSQL{}})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{}, []broker.Rule{
		{Name: "r", FilterType: broker.FilterSQL, SQLExpression: "match-me", ActionSQLExpression: "SET x = 1"},
	}))
	topic, err := b.Lookup("t")
	require.NoError(t, err)
	m1, m2 := msg("yes"), msg("no")
	m1.ApplicationProperties = map[string]any{"sql": "match-me"}
	m2.ApplicationProperties = map[string]any{"sql": "other"}
	send(t, topic, m1, m2)
	sub, err := b.Lookup("t/Subscriptions/s")
	require.NoError(t, err)
	got := sub.Peek(1, 10, "")
	require.Equal(t, []string{"yes"}, peekBodies(got))
	require.Equal(t, "SET x = 1", got[0].ApplicationProperties["action"])
	require.Nil(t, m1.ApplicationProperties["action"], "actions change the subscription's copy only")
}

func TestTopicScheduledMessagesFanOutWhenDue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
	topic := tb.lookup(t, "t")
	nums, err := topic.Schedule([]*amqp.Message{msg("a"), msg("b")}, epoch.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, nums)
	require.NoError(t, topic.CancelScheduled([]int64{1}))
	info, err := tb.b.GetTopic("t")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Counts.Scheduled)

	sub := tb.lookup(t, "t/Subscriptions/s")
	require.Empty(t, sub.Peek(1, 10, ""))
	tb.clk.Advance(time.Hour)
	require.Equal(t, []string{"b"}, bodies(receiveNow(t, sub, 10, peekLock)))
	info, err = tb.b.GetTopic("t")
	require.NoError(t, err)
	require.Equal(t, int64(0), info.Counts.Scheduled)
}

func TestSubscriptionDeadLetterQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
	send(t, tb.lookup(t, "t"), msg("x"))
	sub := tb.lookup(t, "t/Subscriptions/s")
	d := receiveOne(t, sub, peekLock)
	require.NoError(t, sub.DeadLetter(d.LockToken, "r", "d", nil))
	dlq := tb.lookup(t, "t/Subscriptions/s/$DeadLetterQueue")
	got := receiveOne(t, dlq, peekLock)
	require.Equal(t, "t/Subscriptions/s", got.Message.Annotations[broker.AnnotationDeadLetterSource])
	info, err := tb.b.GetSubscription("t", "s")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Counts.DeadLetter)
}

func TestTopicTTLCapsSubscriptionCopies(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{DefaultMessageTimeToLive: 5 * time.Second}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{DefaultMessageTimeToLive: time.Hour}))
	send(t, tb.lookup(t, "t"), msg("x"))
	sub := tb.lookup(t, "t/Subscriptions/s")
	require.Equal(t, 5*time.Second, sub.Peek(1, 1, "")[0].Header.TTL, "the SDK derives ExpiresAt from the header TTL")
	tb.clk.Advance(5 * time.Second)
	require.Empty(t, sub.Peek(1, 10, ""))
}
