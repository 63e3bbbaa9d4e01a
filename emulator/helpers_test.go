package emulator_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
)

// testBundle is one emulator with an SDK client connected to it.
type testBundle struct {
	srv    *emulator.Server
	client *azservicebus.Client
}

type setupOpts struct {
	clock          clock.Clock
	maxMessageSize int64
	queues         map[string]broker.EntityProperties
	// topics maps a topic to its subscriptions.
	topics map[string][]string
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := emulator.Config{Clock: o.clock, MaxMessageSize: o.maxMessageSize, HTTPAddr: "-"}
	if os.Getenv("SEQBUS_EMULATOR_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := emulator.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	for name, p := range o.queues {
		require.NoError(t, srv.Broker().CreateQueue(name, p))
	}
	for topic, subs := range o.topics {
		require.NoError(t, srv.Broker().CreateTopic(topic, broker.EntityProperties{}))
		for _, s := range subs {
			require.NoError(t, srv.Broker().CreateSubscription(topic, s, broker.EntityProperties{}))
		}
	}
	return &testBundle{srv: srv, client: newClient(t, srv.ConnectionString())}
}

func newClient(t *testing.T, connStr string) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(connStr, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	})
	return client
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (b *testBundle) sender(t *testing.T, entity string) *azservicebus.Sender {
	t.Helper()
	s, err := b.client.NewSender(entity, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func (b *testBundle) receiver(t *testing.T, queue string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := b.client.NewReceiverForQueue(queue, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// receiveN receives exactly n messages (in several calls if needed).
func receiveN(ctx context.Context, t *testing.T, r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var out []*azservicebus.ReceivedMessage
	for len(out) < n {
		msgs, err := r.ReceiveMessages(ctx, n-len(out), nil)
		require.NoError(t, err)
		out = append(out, msgs...)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
