package emulator_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
)

// requireHTTPStatus checks that err is the admin client's *azcore.ResponseError with
// the given status.
func requireHTTPStatus(t *testing.T, err error, status int) *azcore.ResponseError {
	t.Helper()
	require.Error(t, err)
	var re *azcore.ResponseError
	require.True(t, errors.As(err, &re), "want *azcore.ResponseError, got %T: %v", err, err)
	require.Equal(t, status, re.StatusCode, "error: %v", err)
	return re
}

func TestDuplicateDetectionOnAQueueCreatedByTheAdminClient(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setupWithAdmin(t, clk)
	ctx := testCtx(t)
	created, err := b.adm.CreateQueue(ctx, "dedup", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresDuplicateDetection:          to.Ptr(true),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT1M"),
	}})
	require.NoError(t, err)
	require.True(t, *created.RequiresDuplicateDetection)
	require.Equal(t, "PT1M", *created.DuplicateDetectionHistoryTimeWindow)

	msg := func(id, body string) *azservicebus.Message {
		return &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(body)}
	}
	b.send(ctx, t, "dedup", msg("order-1", "first"), msg("order-1", "repeat"), msg("order-2", "other"))
	// The same id in one batch is dropped too.
	s, err := b.client.NewSender("dedup", nil)
	require.NoError(t, err)
	defer func() { _ = s.Close(ctx) }()
	batch, err := s.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	for _, m := range []*azservicebus.Message{msg("order-3", "batched"), msg("order-3", "batched repeat"), msg("order-2", "late repeat")} {
		require.NoError(t, batch.AddMessage(m, nil))
	}
	require.NoError(t, s.SendMessageBatch(ctx, batch, nil))

	require.Equal(t, int32(3), b.queueCounts(ctx, t, "dedup").ActiveMessageCount)
	r := b.receiverFor(t, "dedup", nil)
	require.Equal(t, []string{"first", "other", "batched"}, bodies(receiveAll(ctx, t, r, 3)))

	// Within the window a repeat is still dropped, after it the id is new again.
	clk.Advance(50 * time.Second)
	b.send(ctx, t, "dedup", msg("order-1", "still a repeat"))
	require.Zero(t, b.queueCounts(ctx, t, "dedup").ActiveMessageCount)
	clk.Advance(11 * time.Second)
	b.send(ctx, t, "dedup", msg("order-1", "again"))
	require.Equal(t, []string{"again"}, bodies(receiveAll(ctx, t, r, 1)))
}

// TestRuntimePropertiesAfterTheFlows reads every count the admin client reports after
// messages went active, dead-lettered, scheduled and transfer-dead-lettered.
func TestRuntimePropertiesAfterTheFlows(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	for _, q := range []string{"counted", "gone"} {
		_, err := b.adm.CreateQueue(ctx, q, nil)
		require.NoError(t, err)
	}
	_, err := b.adm.CreateQueue(ctx, "relay", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{ForwardTo: to.Ptr("gone")}})
	require.NoError(t, err)
	_, err = b.adm.CreateTopic(ctx, "news", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, "news", "reader", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, "news", "relay-sub", &admin.CreateSubscriptionOptions{
		Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr("gone")},
	})
	require.NoError(t, err)

	// counted: 2 active (one of them deferred), 1 dead-lettered, 1 scheduled.
	b.send(ctx, t, "counted",
		&azservicebus.Message{Body: []byte("stays")},
		&azservicebus.Message{Body: []byte("deferred")},
		&azservicebus.Message{Body: []byte("poison")},
	)
	s, err := b.client.NewSender("counted", nil)
	require.NoError(t, err)
	defer func() { _ = s.Close(ctx) }()
	_, err = s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	r := b.receiverFor(t, "counted", nil)
	got := receiveN(ctx, t, r, 3)
	require.NoError(t, r.AbandonMessage(ctx, got[0], nil))
	require.NoError(t, r.DeferMessage(ctx, got[1], nil))
	require.NoError(t, r.DeadLetterMessage(ctx, got[2], nil))

	// relay and relay-sub: their target is deleted, so what comes next lands in their
	// transfer dead-letter queues.
	_, err = b.adm.DeleteQueue(ctx, "gone", nil)
	require.NoError(t, err)
	b.send(ctx, t, "relay", &azservicebus.Message{Body: []byte("nowhere to go")})

	// reader: 1 active, 1 dead-lettered; relay-sub: 2 transfer-dead-lettered.
	b.send(ctx, t, "news", &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")})
	sr, err := b.client.NewReceiverForSubscription("news", "reader", nil)
	require.NoError(t, err)
	defer func() { _ = sr.Close(ctx) }()
	require.NoError(t, sr.DeadLetterMessage(ctx, receiveN(ctx, t, sr, 1)[0], nil))

	counted := b.queueCounts(ctx, t, "counted")
	require.Equal(t, int32(2), counted.ActiveMessageCount)
	require.Equal(t, int32(1), counted.DeadLetterMessageCount)
	require.Equal(t, int32(1), counted.ScheduledMessageCount)
	require.Zero(t, counted.TransferDeadLetterMessageCount)
	require.Zero(t, counted.TransferMessageCount)
	require.Equal(t, int64(4), counted.TotalMessageCount)
	require.Positive(t, counted.SizeInBytes)

	relay := b.queueCounts(ctx, t, "relay")
	require.Zero(t, relay.ActiveMessageCount)
	require.Equal(t, int32(1), relay.TransferDeadLetterMessageCount)
	require.Equal(t, int64(1), relay.TotalMessageCount)

	reader := b.subscriptionCounts(ctx, t, "news", "reader")
	require.Equal(t, int32(1), reader.ActiveMessageCount)
	require.Equal(t, int32(1), reader.DeadLetterMessageCount)
	require.Equal(t, int64(2), reader.TotalMessageCount)
	relaySub := b.subscriptionCounts(ctx, t, "news", "relay-sub")
	require.Zero(t, relaySub.ActiveMessageCount)
	require.Equal(t, int32(2), relaySub.TransferDeadLetterMessageCount)
	subTDLQ, err := b.client.NewReceiverForSubscription("news", "relay-sub", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	require.NoError(t, err)
	defer func() { _ = subTDLQ.Close(ctx) }()
	require.ElementsMatch(t, []string{"a", "b"}, bodies(receiveAll(ctx, t, subTDLQ, 2)))
	require.Zero(t, b.subscriptionCounts(ctx, t, "news", "relay-sub").TransferDeadLetterMessageCount)

	// The same counts through the list pagers.
	pager := b.adm.NewListQueuesRuntimePropertiesPager(nil)
	byName := map[string]admin.QueueRuntimeProperties{}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, q := range page.QueueRuntimeProperties {
			byName[q.QueueName] = q.QueueRuntimeProperties
		}
	}
	require.Len(t, byName, 2, "counted and relay")
	require.Equal(t, counted.ActiveMessageCount, byName["counted"].ActiveMessageCount)
	require.Equal(t, relay.TransferDeadLetterMessageCount, byName["relay"].TransferDeadLetterMessageCount)

	// The transfer dead-letter queue holds the message with its reason.
	tdlq := b.receiverFor(t, "relay", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	m := receiveAll(ctx, t, tdlq, 1)[0]
	require.Equal(t, "nowhere to go", string(m.Body))
	require.Equal(t, "ForwardingFailed", *m.DeadLetterReason)
	require.Zero(t, b.queueCounts(ctx, t, "relay").TransferDeadLetterMessageCount)
}

func TestAdminErrorsThroughTheRealClient(t *testing.T) {
	t.Parallel()
	b := setupWithAdmin(t, nil)
	ctx := testCtx(t)
	_, err := b.adm.CreateQueue(ctx, "exists", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateTopic(ctx, "topic", nil)
	require.NoError(t, err)
	_, err = b.adm.CreateSubscription(ctx, "topic", "sub", nil)
	require.NoError(t, err)

	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		// Gets answer nil without an error on 404, as the SDK documents.
		q, err := b.adm.GetQueue(ctx, "missing", nil)
		require.NoError(t, err)
		require.Nil(t, q)
		_, err = b.adm.DeleteQueue(ctx, "missing", nil)
		requireHTTPStatus(t, err, http.StatusNotFound)
		_, err = b.adm.UpdateQueue(ctx, "missing", admin.QueueProperties{}, nil)
		requireHTTPStatus(t, err, http.StatusNotFound)
		_, err = b.adm.CreateSubscription(ctx, "no-topic", "sub", nil)
		requireHTTPStatus(t, err, http.StatusNotFound)
		_, err = b.adm.DeleteRule(ctx, "topic", "sub", "no-rule", nil)
		requireHTTPStatus(t, err, http.StatusNotFound)
	})
	t.Run("conflict", func(t *testing.T) {
		t.Parallel()
		_, err := b.adm.CreateQueue(ctx, "exists", nil)
		requireHTTPStatus(t, err, http.StatusConflict)
		_, err = b.adm.CreateTopic(ctx, "exists", nil)
		requireHTTPStatus(t, err, http.StatusConflict) // a topic cannot take a queue's name
		_, err = b.adm.CreateSubscription(ctx, "topic", "sub", nil)
		requireHTTPStatus(t, err, http.StatusConflict)
		_, err = b.adm.CreateRule(ctx, "topic", "sub", &admin.CreateRuleOptions{Name: to.Ptr("$Default")})
		requireHTTPStatus(t, err, http.StatusConflict)
	})
	t.Run("unauthorized", func(t *testing.T) {
		t.Parallel()
		cs := strings.Replace(b.srv.ConnectionString(), "SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=not-the-key", 1)
		require.NotEqual(t, b.srv.ConnectionString(), cs)
		wrong := newAdminClient(t, b.srv, cs)
		_, err := wrong.CreateQueue(ctx, "intruder", nil)
		requireHTTPStatus(t, err, http.StatusUnauthorized)
		_, err = wrong.GetQueue(ctx, "exists", nil)
		requireHTTPStatus(t, err, http.StatusUnauthorized)
		q, err := b.adm.GetQueue(ctx, "intruder", nil)
		require.NoError(t, err)
		require.Nil(t, q, "nothing was created")
	})
	t.Run("invalid SQL", func(t *testing.T) {
		t.Parallel()
		_, err := b.adm.CreateRule(ctx, "topic", "sub", &admin.CreateRuleOptions{
			Name: to.Ptr("bad-filter"), Filter: &admin.SQLFilter{Expression: "user.a = = 1"},
		})
		re := requireHTTPStatus(t, err, http.StatusBadRequest)
		require.Contains(t, re.Error(), "line 1, column 10")
		_, err = b.adm.CreateRule(ctx, "topic", "sub", &admin.CreateRuleOptions{
			Name: to.Ptr("bad-action"), Filter: &admin.TrueFilter{}, Action: &admin.SQLAction{Expression: "SET sys.SequenceNumber = 1"},
		})
		requireHTTPStatus(t, err, http.StatusBadRequest)
		_, err = b.adm.CreateRule(ctx, "topic", "sub", &admin.CreateRuleOptions{
			Name: to.Ptr("missing-param"), Filter: &admin.SQLFilter{Expression: "user.a = @nope"},
		})
		requireHTTPStatus(t, err, http.StatusBadRequest)
		_, err = b.adm.CreateSubscription(ctx, "topic", "bad-sub", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
			DefaultRule: &admin.RuleProperties{Name: "r", Filter: &admin.SQLFilter{Expression: "EXISTS(user.x"}},
		}})
		re = requireHTTPStatus(t, err, http.StatusBadRequest)
		require.Contains(t, re.Error(), "line 1, column 14")
		sub, err := b.adm.GetSubscription(ctx, "topic", "bad-sub", nil)
		require.NoError(t, err)
		require.Nil(t, sub, "nothing was created")
	})
}
