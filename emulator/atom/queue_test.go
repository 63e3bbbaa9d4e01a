package atom_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)

	props := admin.QueueProperties{
		LockDuration:                        ptr("PT45S"),
		MaxSizeInMegabytes:                  ptr[int32](2048),
		RequiresDuplicateDetection:          ptr(true),
		RequiresSession:                     ptr(true),
		DefaultMessageTimeToLive:            ptr("P1D"),
		DeadLetteringOnMessageExpiration:    ptr(true),
		DuplicateDetectionHistoryTimeWindow: ptr("PT5M"),
		MaxDeliveryCount:                    ptr[int32](7),
		EnableBatchedOperations:             ptr(false),
		Status:                              ptr(admin.EntityStatusActive),
		AutoDeleteOnIdle:                    ptr("PT1H"),
		EnablePartitioning:                  ptr(true),
		UserMetadata:                        ptr("owner=seqbus"),
		MaxMessageSizeInKilobytes:           ptr[int64](1024),
	}
	created, err := tb.client.CreateQueue(c, "orders", &admin.CreateQueueOptions{Properties: &props})
	require.NoError(t, err)
	require.Equal(t, "orders", created.QueueName)
	require.Equal(t, props, created.QueueProperties)

	got, err := tb.client.GetQueue(c, "orders", nil)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, props, got.QueueProperties)

	// The queue is a real broker queue with those properties.
	e := tb.lookup(t, "orders")
	require.True(t, e.RequiresSession())
	bp := e.Properties()
	require.Equal(t, 45*time.Second, bp.LockDuration)
	require.Equal(t, int32(7), bp.MaxDeliveryCount)
	require.Equal(t, 24*time.Hour, bp.DefaultMessageTimeToLive)
	require.True(t, bp.DeadLetteringOnMessageExpiration)

	// Update: PUT with If-Match replaces the properties.
	upd := got.QueueProperties
	upd.LockDuration = ptr("PT2M")
	upd.MaxDeliveryCount = ptr[int32](3)
	upd.Status = ptr(admin.EntityStatusSendDisabled)
	upd.UserMetadata = ptr("changed")
	updated, err := tb.client.UpdateQueue(c, "orders", upd, nil)
	require.NoError(t, err)
	require.Equal(t, upd, updated.QueueProperties)
	bp = tb.lookup(t, "orders").Properties()
	require.Equal(t, 2*time.Minute, bp.LockDuration)
	require.Equal(t, broker.StatusSendDisabled, bp.Status)

	// A disabled-for-send queue refuses sends, as a config-file queue would.
	err = tb.lookup(t, "orders").Send(c, []*amqp.Message{amqp.NewMessage([]byte("x"))})
	require.ErrorIs(t, err, broker.ErrEntityDisabled)

	_, err = tb.client.DeleteQueue(c, "orders", nil)
	require.NoError(t, err)
	gone, err := tb.client.GetQueue(c, "orders", nil)
	require.NoError(t, err)
	require.Nil(t, gone)
	_, err = tb.b.Lookup("orders")
	require.ErrorIs(t, err, broker.ErrNotFound)
}

func TestQueueDefaults(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)

	created, err := tb.client.CreateQueue(c, "plain", nil)
	require.NoError(t, err)
	want := admin.QueueProperties{
		LockDuration:                        ptr("PT1M"),
		MaxSizeInMegabytes:                  ptr[int32](1024),
		RequiresDuplicateDetection:          ptr(false),
		RequiresSession:                     ptr(false),
		DefaultMessageTimeToLive:            ptr("P10675199DT2H48M5.4775807S"),
		DeadLetteringOnMessageExpiration:    ptr(false),
		DuplicateDetectionHistoryTimeWindow: ptr("PT10M"),
		MaxDeliveryCount:                    ptr[int32](10),
		EnableBatchedOperations:             ptr(true),
		Status:                              ptr(admin.EntityStatusActive),
		AutoDeleteOnIdle:                    ptr("P10675199DT2H48M5.4775807S"),
		EnablePartitioning:                  ptr(false),
		MaxMessageSizeInKilobytes:           ptr[int64](256),
	}
	require.Equal(t, want, created.QueueProperties)
	require.Equal(t, time.Duration(0), tb.lookup(t, "plain").Properties().DefaultMessageTimeToLive)

	// Sending "never" explicitly is the same as leaving it out.
	_, err = tb.client.UpdateQueue(c, "plain", want, nil)
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), tb.lookup(t, "plain").Properties().DefaultMessageTimeToLive)
}

func TestQueueFromConfigIsVisible(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	require.NoError(t, tb.b.CreateQueue("from-config", broker.EntityProperties{LockDuration: 30 * time.Second, MaxDeliveryCount: 3}))

	got, err := tb.client.GetQueue(c, "FROM-CONFIG", nil)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, "PT30S", *got.LockDuration)
	require.Equal(t, int32(3), *got.MaxDeliveryCount)
}

func TestQueueRuntimeProperties(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateQueue(c, "q", nil)
	require.NoError(t, err)
	created := tb.clk.Now()

	rt, err := tb.client.GetQueueRuntimeProperties(c, "q", nil)
	require.NoError(t, err)
	require.Equal(t, admin.QueueRuntimeProperties{CreatedAt: created.UTC(), UpdatedAt: created.UTC()}, rt.QueueRuntimeProperties)

	q := tb.lookup(t, "q")
	send(t, q, amqp.NewMessage([]byte("a")), amqp.NewMessage([]byte("b")), amqp.NewMessage([]byte("c")))
	_, err = q.Schedule([]*amqp.Message{amqp.NewMessage([]byte("later"))}, tb.clk.Now().Add(time.Hour))
	require.NoError(t, err)
	tb.clk.Advance(time.Second)
	ds, err := q.TryReceive(1, broker.ReceiveOptions{})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, q.DeadLetter(ds[0].LockToken, "bad", "bad message", nil))

	rt, err = tb.client.GetQueueRuntimeProperties(c, "q", nil)
	require.NoError(t, err)
	require.Equal(t, int32(2), rt.ActiveMessageCount)
	require.Equal(t, int32(1), rt.DeadLetterMessageCount)
	require.Equal(t, int32(1), rt.ScheduledMessageCount)
	require.Equal(t, int32(0), rt.TransferMessageCount)
	require.Equal(t, int32(0), rt.TransferDeadLetterMessageCount)
	require.Equal(t, int64(4), rt.TotalMessageCount)
	require.Positive(t, rt.SizeInBytes)
	require.Equal(t, created.UTC(), rt.CreatedAt)
	require.False(t, rt.AccessedAt.IsZero(), "receiving touches AccessedAt")

	pager := tb.client.NewListQueuesRuntimePropertiesPager(nil)
	require.True(t, pager.More())
	page, err := pager.NextPage(c)
	require.NoError(t, err)
	require.Len(t, page.QueueRuntimeProperties, 1)
	require.Equal(t, "q", page.QueueRuntimeProperties[0].QueueName)
	require.Equal(t, int32(2), page.QueueRuntimeProperties[0].ActiveMessageCount)
}

func TestQueueErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateQueue(c, "taken", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateTopic(c, "topic-taken", nil)
	require.NoError(t, err)

	tests := []struct {
		name   string
		call   func() error
		status int
	}{
		{"create duplicate", func() error { _, err := tb.client.CreateQueue(c, "taken", nil); return err }, http.StatusConflict},
		{"create duplicate other case", func() error { _, err := tb.client.CreateQueue(c, "TAKEN", nil); return err }, http.StatusConflict},
		{"create over a topic", func() error { _, err := tb.client.CreateQueue(c, "topic-taken", nil); return err }, http.StatusConflict},
		{"update missing", func() error {
			_, err := tb.client.UpdateQueue(c, "missing", admin.QueueProperties{}, nil)
			return err
		}, http.StatusNotFound},
		{"delete missing", func() error { _, err := tb.client.DeleteQueue(c, "missing", nil); return err }, http.StatusNotFound},
		{"bad lock duration", createQueue(c, tb, admin.QueueProperties{LockDuration: ptr("thirty seconds")}), http.StatusBadRequest},
		{"lock duration too long", createQueue(c, tb, admin.QueueProperties{LockDuration: ptr("PT10M")}), http.StatusBadRequest},
		{"zero max delivery count", createQueue(c, tb, admin.QueueProperties{MaxDeliveryCount: ptr[int32](0)}), http.StatusBadRequest},
		{"unknown status", createQueue(c, tb, admin.QueueProperties{Status: ptr(admin.EntityStatus("Paused"))}), http.StatusBadRequest},
		{"duplicate window too short", createQueue(c, tb, admin.QueueProperties{DuplicateDetectionHistoryTimeWindow: ptr("PT1S")}), http.StatusBadRequest},
		{"auto delete too short", createQueue(c, tb, admin.QueueProperties{AutoDeleteOnIdle: ptr("PT1M")}), http.StatusBadRequest},
		{"negative size", createQueue(c, tb, admin.QueueProperties{MaxSizeInMegabytes: ptr[int32](-1)}), http.StatusBadRequest},
		{"forward to missing entity", createQueue(c, tb, admin.QueueProperties{ForwardTo: ptr("nowhere")}), http.StatusBadRequest},
		{"forward to itself", func() error {
			_, err := tb.client.UpdateQueue(c, "taken", admin.QueueProperties{ForwardTo: ptr("taken")}, nil)
			return err
		}, http.StatusBadRequest},
		{"session flag cannot change", func() error {
			_, err := tb.client.UpdateQueue(c, "taken", admin.QueueProperties{RequiresSession: ptr(true)}, nil)
			return err
		}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireStatus(t, tt.call(), tt.status)
		})
	}
	// Nothing was created by the refused calls.
	names := listQueueNames(t, tb, 0)
	require.Equal(t, []string{"taken"}, names)
}

func createQueue(c context.Context, tb *bundle, p admin.QueueProperties) func() error {
	return func() error {
		_, err := tb.client.CreateQueue(c, "refused", &admin.CreateQueueOptions{Properties: &p})
		return err
	}
}

func TestQueueForwardTo(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateQueue(c, "target", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateQueue(c, "dlq-target", nil)
	require.NoError(t, err)

	// As Service Bus, the service answers with absolute URIs: a URI as written (the
	// SDK's own live tests write https:// and sb:// URIs and expect them back), a plain
	// name as sb://<namespace host>/<name>.
	host := tb.srv.Listener.Addr().String()
	tests := []struct {
		name, forwardTo, forwardDLQTo string
		wantTo, wantDLQTo             string
	}{
		{"names", "target", "dlq-target", "sb://" + host + "/target", "sb://" + host + "/dlq-target"},
		{"sb uris", "sb://" + host + "/target", "sb://" + host + "/dlq-target", "sb://" + host + "/target", "sb://" + host + "/dlq-target"},
		{"https uri", "https://ns.servicebus.windows.net/Target", "", "https://ns.servicebus.windows.net/Target", ""},
	}
	for i, tt := range tests {
		source := fmt.Sprintf("source-%d", i)
		props := admin.QueueProperties{ForwardTo: optPtr(tt.forwardTo), ForwardDeadLetteredMessagesTo: optPtr(tt.forwardDLQTo)}
		created, err := tb.client.CreateQueue(c, source, &admin.CreateQueueOptions{Properties: &props})
		require.NoError(t, err, tt.name)
		require.Equal(t, optPtr(tt.wantTo), created.ForwardTo, tt.name)
		require.Equal(t, optPtr(tt.wantDLQTo), created.ForwardDeadLetteredMessagesTo, tt.name)
		got, err := tb.client.GetQueue(c, source, nil)
		require.NoError(t, err, tt.name)
		require.Equal(t, created.QueueProperties, got.QueueProperties, tt.name)
		// Writing back what was read keeps the targets.
		updated, err := tb.client.UpdateQueue(c, source, got.QueueProperties, nil)
		require.NoError(t, err, tt.name)
		require.Equal(t, got.QueueProperties, updated.QueueProperties, tt.name)

		p := tb.lookup(t, source).Properties()
		require.Equal(t, "target", strings.ToLower(p.ForwardTo), tt.name)
		if tt.forwardDLQTo != "" {
			require.Equal(t, "dlq-target", p.ForwardDeadLetteredMessagesTo, tt.name)
		}
	}
}

func optPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func TestListQueuesPages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	want := []string{"q0", "q1", "q2", "q3", "q4"}
	for _, n := range want {
		_, err := tb.client.CreateQueue(c, n, nil)
		require.NoError(t, err)
	}
	for _, size := range []int32{0, 1, 2, 5, 7} {
		require.Equal(t, want, listQueueNames(t, tb, size), "page size %d", size)
	}
}

// listQueueNames lists every queue through the pager and checks the page sizes.
func listQueueNames(t *testing.T, tb *bundle, pageSize int32) []string {
	t.Helper()
	pager := tb.client.NewListQueuesPager(&admin.ListQueuesOptions{MaxPageSize: pageSize})
	var names []string
	for pages := 0; pager.More(); pages++ {
		require.Less(t, pages, 20, "pager does not stop")
		page, err := pager.NextPage(ctx(t))
		require.NoError(t, err)
		if pageSize > 0 {
			require.LessOrEqual(t, len(page.Queues), int(pageSize))
		}
		for _, q := range page.Queues {
			names = append(names, q.QueueName)
		}
	}
	return names
}

// Service Bus fixes RequiresSession and RequiresDuplicateDetection when a queue is
// created: an update that changes either is refused and changes nothing.
func TestQueueImmutablePropertiesAreRefusedOnUpdate(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	created, err := tb.client.CreateQueue(c, "q", nil)
	require.NoError(t, err)
	for _, change := range []func(p *admin.QueueProperties){
		func(p *admin.QueueProperties) { p.RequiresSession = ptr(true) },
		func(p *admin.QueueProperties) { p.RequiresDuplicateDetection = ptr(true) },
	} {
		p := created.QueueProperties
		change(&p)
		_, err = tb.client.UpdateQueue(c, "q", p, nil)
		requireStatus(t, err, http.StatusBadRequest)
	}
	got, err := tb.client.GetQueue(c, "q", nil)
	require.NoError(t, err)
	require.Equal(t, created.QueueProperties, got.QueueProperties)
}

// TestPartitioningReachesTheBroker: EnablePartitioning set through the admin client is the
// broker's (it changes which $management requests a session entity refuses), for a queue
// and for a topic's subscriptions; like the service, an update cannot change it.
func TestPartitioningReachesTheBroker(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)

	_, err := tb.client.CreateQueue(c, "pq", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: ptr(true), EnablePartitioning: ptr(true)}})
	require.NoError(t, err)
	pq := tb.lookup(t, "pq")
	require.True(t, pq.Partitioned())
	require.True(t, pq.NeedsSessionID())

	_, err = tb.client.CreateTopic(c, "pt", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{EnablePartitioning: ptr(true)}})
	require.NoError(t, err)
	_, err = tb.client.CreateSubscription(c, "pt", "s", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{RequiresSession: ptr(true)}})
	require.NoError(t, err)
	require.True(t, tb.lookup(t, "pt/Subscriptions/s").NeedsSessionID())

	got, err := tb.client.GetQueue(c, "pq", nil)
	require.NoError(t, err)
	require.True(t, *got.EnablePartitioning)
	upd := got.QueueProperties
	upd.EnablePartitioning = ptr(false)
	_, err = tb.client.UpdateQueue(c, "pq", upd, nil)
	requireStatus(t, err, http.StatusBadRequest)
	require.True(t, tb.lookup(t, "pq").Partitioned())

	_, err = tb.client.CreateQueue(c, "sq", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: ptr(true)}})
	require.NoError(t, err)
	require.False(t, tb.lookup(t, "sq").NeedsSessionID())
}
