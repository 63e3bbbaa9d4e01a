package publisher_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/sbadmin"
)

// TestPublishThroughTheExampleTopology provisions topology/examples/two-sources.yaml on
// the emulator, publishes one transaction's messages to both source topics, and
// receives them from the worker subscription in one session, numbered 1..3.
func TestPublishThroughTheExampleTopology(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := emulatortest.Start(t, nil)

	data, err := os.ReadFile("../topology/examples/two-sources.yaml")
	require.NoError(t, err)
	want, _, err := topology.Load("two-sources.yaml", data)
	require.NoError(t, err)
	ac, err := sbadmin.Connect(sbadmin.Config{ConnectionString: srv.ConnectionString(), ClientOptions: srv.AdminClientOptions(t)})
	require.NoError(t, err)
	a := sbadmin.New(ac)
	live, err := topology.Fetch(ctx, a, want)
	require.NoError(t, err)
	_, err = topology.Apply(ctx, a, topology.Diff(want, live), nil)
	require.NoError(t, err)

	client := srv.Client
	orders, err := client.NewSender("orders-api", nil)
	require.NoError(t, err)
	defer orders.Close(ctx)
	payments, err := client.NewSender("payments-api", nil)
	require.NoError(t, err)
	defer payments.Close(ctx)

	// One counter shared by the publishers of both topics numbers the whole session.
	counter := publisher.NewMemoryCounter()
	pubOrders, err := publisher.New(orders, &publisher.Config{Strategy: publisher.Gjura(), Counter: counter})
	require.NoError(t, err)
	pubPayments, err := publisher.New(payments, &publisher.Config{Strategy: publisher.Gjura(), Counter: counter})
	require.NoError(t, err)
	props := func() map[string]any {
		return map[string]any{"SessionName": "checkout", "TransactionId": "tx-7", "InstanceId": int64(1)}
	}
	for i, step := range []struct {
		p    *publisher.Publisher
		body string
	}{{pubOrders, "order placed"}, {pubPayments, "payment captured"}, {pubOrders, "order shipped"}} {
		res, err := step.p.Publish(ctx, &azservicebus.Message{Body: []byte(step.body), ApplicationProperties: props()},
			&publisher.PublishOptions{Last: i == 2})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), res.Sequence)
	}

	r, err := client.AcceptNextSessionForSubscription(ctx, "checkout-seq", "workers", nil)
	require.NoError(t, err)
	defer r.Close(ctx)
	require.Equal(t, "checkout_tx-7_1", r.SessionID())
	type got struct {
		seq  int64
		body string
		last bool
	}
	var msgs []got
	for len(msgs) < 3 {
		batch, err := r.ReceiveMessages(ctx, 3, nil)
		require.NoError(t, err)
		for _, m := range batch {
			last, _ := m.ApplicationProperties["IsLast"].(bool)
			msgs = append(msgs, got{m.ApplicationProperties["Sequence"].(int64), string(m.Body), last})
			require.NoError(t, r.CompleteMessage(ctx, m, nil))
		}
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].seq < msgs[j].seq })
	require.Equal(t, []got{{1, "order placed", false}, {2, "payment captured", false}, {3, "order shipped", true}}, msgs)
}
