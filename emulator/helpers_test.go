package emulator_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// testBundle is one emulator with an SDK client connected to it.
type testBundle struct {
	srv    *emulatortest.Server
	client *azservicebus.Client
}

type setupOpts struct {
	clock          clock.Clock
	maxMessageSize int64
	queues         map[string]broker.EntityProperties
	// topics maps a topic to its subscriptions.
	topics map[string][]string
}

// testClientOptions are the SDK options of the tests' clients: two quick
// retries, so a failure surfaces in well under a second.
func testClientOptions() *azservicebus.ClientOptions {
	return &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	}
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	topics := make(map[string]emulatortest.Topic, len(o.topics))
	for topic, subs := range o.topics {
		tp := emulatortest.Topic{Subscriptions: make(map[string]emulatortest.Subscription, len(subs))}
		for _, s := range subs {
			tp.Subscriptions[s] = emulatortest.Subscription{}
		}
		topics[topic] = tp
	}
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        o.queues,
		Topics:        topics,
		Config:        emulator.Config{Clock: o.clock, MaxMessageSize: o.maxMessageSize},
		ClientOptions: testClientOptions(),
	})
	return &testBundle{srv: srv, client: srv.Client}
}

// newClient connects a client with testClientOptions to any connection
// string (a wrong key, a pre-built signature, ...); the emulator's own gets
// one from srv.NewClient.
func newClient(t *testing.T, connStr string) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(connStr, testClientOptions())
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
