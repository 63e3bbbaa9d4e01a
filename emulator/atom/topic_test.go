package atom_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestTopicLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)

	props := admin.TopicProperties{
		MaxSizeInMegabytes:                  ptr[int32](5120),
		RequiresDuplicateDetection:          ptr(true),
		DefaultMessageTimeToLive:            ptr("PT6H"),
		DuplicateDetectionHistoryTimeWindow: ptr("PT30M"),
		EnableBatchedOperations:             ptr(true),
		Status:                              ptr(admin.EntityStatusActive),
		AutoDeleteOnIdle:                    ptr("P7D"),
		EnablePartitioning:                  ptr(false),
		SupportOrdering:                     ptr(false),
		UserMetadata:                        ptr("events"),
		MaxMessageSizeInKilobytes:           ptr[int64](256),
	}
	created, err := tb.client.CreateTopic(c, "events", &admin.CreateTopicOptions{Properties: &props})
	require.NoError(t, err)
	require.Equal(t, props, created.TopicProperties)

	got, err := tb.client.GetTopic(c, "events", nil)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, "events", got.TopicName)
	require.Equal(t, props, got.TopicProperties)
	require.Equal(t, broker.KindTopic, tb.lookup(t, "events").Kind())
	require.Equal(t, 6*time.Hour, tb.lookup(t, "events").Properties().DefaultMessageTimeToLive)

	upd := got.TopicProperties
	upd.Status = ptr(admin.EntityStatusDisabled)
	upd.UserMetadata = nil
	updated, err := tb.client.UpdateTopic(c, "events", upd, nil)
	require.NoError(t, err)
	require.Equal(t, upd, updated.TopicProperties)
	require.Equal(t, broker.StatusDisabled, tb.lookup(t, "events").Properties().Status)

	_, err = tb.client.CreateTopic(c, "events", nil)
	requireStatus(t, err, http.StatusConflict)
	_, err = tb.client.CreateQueue(c, "events", nil)
	requireStatus(t, err, http.StatusConflict)

	_, err = tb.client.DeleteTopic(c, "events", nil)
	require.NoError(t, err)
	gone, err := tb.client.GetTopic(c, "events", nil)
	require.NoError(t, err)
	require.Nil(t, gone)
	_, err = tb.client.DeleteTopic(c, "events", nil)
	requireStatus(t, err, http.StatusNotFound)
	_, err = tb.client.UpdateTopic(c, "events", upd, nil)
	requireStatus(t, err, http.StatusNotFound)
}

func TestTopicRuntimeProperties(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateSubscription(c, "t", "all", nil) // $Default: TrueFilter
	require.NoError(t, err)
	_, err = tb.client.CreateSubscription(c, "t", "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.CorrelationFilter{ApplicationProperties: map[string]any{"color": "red"}}},
	}})
	require.NoError(t, err)
	_, err = tb.client.CreateRule(c, "t", "red", &admin.CreateRuleOptions{Name: ptr("sql"), Filter: &admin.SQLFilter{Expression: "1=0"}})
	require.NoError(t, err)

	_, err = tb.lookup(t, "t").Schedule([]*amqp.Message{amqp.NewMessage([]byte("later"))}, tb.clk.Now().Add(time.Hour))
	require.NoError(t, err)

	rt, err := tb.client.GetTopicRuntimeProperties(c, "t", nil)
	require.NoError(t, err)
	require.NotNil(t, rt)
	require.Equal(t, int32(2), rt.SubscriptionCount)
	require.Equal(t, int32(2), rt.SQLFilterCount)
	require.Equal(t, int32(1), rt.CorrelationFilterCount)
	require.Equal(t, int32(1), rt.ScheduledMessageCount)
	require.Equal(t, tb.clk.Now().UTC(), rt.CreatedAt)

	pager := tb.client.NewListTopicsRuntimePropertiesPager(nil)
	page, err := pager.NextPage(c)
	require.NoError(t, err)
	require.Len(t, page.TopicRuntimeProperties, 1)
	require.Equal(t, int32(2), page.TopicRuntimeProperties[0].SubscriptionCount)
}

func TestListTopicsPages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	want := []string{"a", "b", "c"}
	for _, n := range want {
		_, err := tb.client.CreateTopic(c, n, nil)
		require.NoError(t, err)
	}
	_, err := tb.client.CreateQueue(c, "not-a-topic", nil)
	require.NoError(t, err)

	pager := tb.client.NewListTopicsPager(&admin.ListTopicsOptions{MaxPageSize: 2})
	var names []string
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(c)
		require.NoError(t, err)
		for _, tp := range page.Topics {
			names = append(names, tp.TopicName)
		}
		pages++
		require.Less(t, pages, 10)
	}
	require.Equal(t, want, names)
	require.Equal(t, 2, pages)
}

func TestSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateQueue(c, "fwd", nil)
	require.NoError(t, err)

	props := admin.SubscriptionProperties{
		LockDuration:                                    ptr("PT20S"),
		RequiresSession:                                 ptr(true),
		DefaultMessageTimeToLive:                        ptr("PT1H"),
		DeadLetteringOnMessageExpiration:                ptr(true),
		EnableDeadLetteringOnFilterEvaluationExceptions: ptr(true),
		MaxDeliveryCount:                                ptr[int32](4),
		Status:                                          ptr(admin.EntityStatusActive),
		AutoDeleteOnIdle:                                ptr("PT10M"),
		ForwardDeadLetteredMessagesTo:                   ptr("sb://" + tb.srv.Listener.Addr().String() + "/fwd"),
		EnableBatchedOperations:                         ptr(false),
		UserMetadata:                                    ptr("sub meta"),
	}
	created, err := tb.client.CreateSubscription(c, "t", "s", &admin.CreateSubscriptionOptions{Properties: &props})
	require.NoError(t, err)
	require.Equal(t, "s", created.SubscriptionName)
	require.Equal(t, "t", created.TopicName)
	require.Equal(t, props, created.SubscriptionProperties)

	got, err := tb.client.GetSubscription(c, "t", "s", nil)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, props, got.SubscriptionProperties)
	e := tb.lookup(t, "t/Subscriptions/s")
	require.True(t, e.RequiresSession())
	require.Equal(t, 20*time.Second, e.Properties().LockDuration)
	require.Equal(t, int32(4), e.Properties().MaxDeliveryCount)

	// Without a DefaultRule the subscription gets the $Default TrueFilter rule.
	rule, err := tb.client.GetRule(c, "t", "s", "$Default", nil)
	require.NoError(t, err)
	require.NotNil(t, rule)
	require.Equal(t, &admin.TrueFilter{}, rule.Filter)
	require.Nil(t, rule.Action)

	upd := got.SubscriptionProperties
	upd.MaxDeliveryCount = ptr[int32](9)
	upd.LockDuration = ptr("PT1M")
	updated, err := tb.client.UpdateSubscription(c, "t", "s", upd, nil)
	require.NoError(t, err)
	require.Equal(t, upd, updated.SubscriptionProperties)
	require.Equal(t, int32(9), tb.lookup(t, "t/Subscriptions/s").Properties().MaxDeliveryCount)

	_, err = tb.client.CreateSubscription(c, "t", "s", nil)
	requireStatus(t, err, http.StatusConflict)
	_, err = tb.client.CreateSubscription(c, "missing-topic", "s", nil)
	requireStatus(t, err, http.StatusNotFound)
	_, err = tb.client.CreateSubscription(c, "t", "bad", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		LockDuration: ptr("P1D"),
	}})
	requireStatus(t, err, http.StatusBadRequest)

	_, err = tb.client.DeleteSubscription(c, "t", "s", nil)
	require.NoError(t, err)
	gone, err := tb.client.GetSubscription(c, "t", "s", nil)
	require.NoError(t, err)
	require.Nil(t, gone)
	_, err = tb.client.DeleteSubscription(c, "t", "s", nil)
	requireStatus(t, err, http.StatusNotFound)
	_, err = tb.client.UpdateSubscription(c, "t", "s", upd, nil)
	requireStatus(t, err, http.StatusNotFound)
}

func TestSubscriptionRuntimeProperties(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	for _, s := range []string{"s1", "s2"} {
		_, err = tb.client.CreateSubscription(c, "t", s, nil)
		require.NoError(t, err)
	}
	send(t, tb.lookup(t, "t"), amqp.NewMessage([]byte("1")), amqp.NewMessage([]byte("2")))
	tb.clk.Advance(time.Second)
	s1 := tb.lookup(t, "t/Subscriptions/s1")
	ds, err := s1.TryReceive(1, broker.ReceiveOptions{})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, s1.DeadLetter(ds[0].LockToken, "r", "d", nil))

	rt, err := tb.client.GetSubscriptionRuntimeProperties(c, "t", "s1", nil)
	require.NoError(t, err)
	require.NotNil(t, rt)
	require.Equal(t, int32(1), rt.ActiveMessageCount)
	require.Equal(t, int32(1), rt.DeadLetterMessageCount)
	require.Equal(t, int64(2), rt.TotalMessageCount)
	require.False(t, rt.AccessedAt.IsZero())

	pager := tb.client.NewListSubscriptionsRuntimePropertiesPager("t", &admin.ListSubscriptionsRuntimePropertiesOptions{MaxPageSize: 1})
	got := map[string]int32{}
	for pager.More() {
		page, err := pager.NextPage(c)
		require.NoError(t, err)
		for _, it := range page.SubscriptionRuntimeProperties {
			require.Equal(t, "t", it.TopicName)
			got[it.SubscriptionName] = it.ActiveMessageCount
		}
	}
	require.Equal(t, map[string]int32{"s1": 1, "s2": 2}, got)

	missing, err := tb.client.GetSubscriptionRuntimeProperties(c, "t", "nope", nil)
	require.NoError(t, err)
	require.Nil(t, missing)
}

func TestListSubscriptionsPages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	want := []string{"s0", "s1", "s2", "s3", "s4"}
	for _, n := range want {
		_, err := tb.client.CreateSubscription(c, "t", n, nil)
		require.NoError(t, err)
	}
	for _, size := range []int32{0, 2, 3} {
		pager := tb.client.NewListSubscriptionsPager("t", &admin.ListSubscriptionsOptions{MaxPageSize: size})
		var names []string
		for pages := 0; pager.More(); pages++ {
			require.Less(t, pages, 10)
			page, err := pager.NextPage(c)
			require.NoError(t, err)
			for _, s := range page.Subscriptions {
				names = append(names, s.SubscriptionName)
			}
		}
		require.Equal(t, want, names, "page size %d", size)
	}

	pager := tb.client.NewListSubscriptionsPager("missing", nil)
	_, err = pager.NextPage(c)
	requireStatus(t, err, http.StatusNotFound)
}

// DeadLetteringOnFilterEvaluationExceptions defaults to true, as in Service Bus, and
// reaches the broker: a message whose rule fails to evaluate is dead-lettered in the
// subscription unless the client turned it off.
func TestSubscriptionFilterEvaluationDeadLettering(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	bad := &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{DefaultRule: &admin.RuleProperties{
		Name: "bad", Filter: &admin.SQLFilter{Expression: "color * 2 = 4"},
	}}}
	_, err = tb.client.CreateSubscription(c, "t", "default", bad)
	require.NoError(t, err)
	got, err := tb.client.GetSubscription(c, "t", "default", nil)
	require.NoError(t, err)
	require.Equal(t, ptr(true), got.EnableDeadLetteringOnFilterEvaluationExceptions)

	bad.Properties.EnableDeadLetteringOnFilterEvaluationExceptions = ptr(false)
	_, err = tb.client.CreateSubscription(c, "t", "off", bad)
	require.NoError(t, err)
	got, err = tb.client.GetSubscription(c, "t", "off", nil)
	require.NoError(t, err)
	require.Equal(t, ptr(false), got.EnableDeadLetteringOnFilterEvaluationExceptions)

	m := amqp.NewMessage([]byte("x"))
	m.ApplicationProperties = map[string]any{"color": "red"}
	require.NoError(t, tb.lookup(t, "t").Send(c, []*amqp.Message{m}))
	require.Len(t, tb.lookup(t, "t/Subscriptions/default/$DeadLetterQueue").Peek(1, 10, ""), 1)
	require.Empty(t, tb.lookup(t, "t/Subscriptions/off/$DeadLetterQueue").Peek(1, 10, ""))
}
