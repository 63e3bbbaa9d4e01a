package emulatortest_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// TestHandlerInOrder is how an application tests its handler against a Service Bus in its own
// tests: emulatortest.Start runs the in-process emulator with a session-enabled queue for the
// test (closed when it ends), the worker consumes the queue, and the test sends a session's
// messages out of order and checks what the handler got.
func TestHandlerInOrder(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}},
	})

	got := make(chan string, 3)
	cfg := worker.DefaultConfig()
	cfg.ConnectionString = srv.ConnectionString()
	cfg.Queue = "orders"
	cfg.HTTPAddr = worker.HTTPOff
	cfg.Handler = sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		got <- string(m.Body) // the application's handler would act on the order here
		return nil
	})
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})

	sender, err := srv.Client.NewSender("orders", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sender.Close(context.Background()) })
	session := "order-42"
	for _, m := range []struct {
		seq  int64
		last bool
		body string
	}{{2, false, "paid"}, {3, true, "shipped"}, {1, false, "created"}} {
		require.NoError(t, sender.SendMessage(t.Context(), &azservicebus.Message{
			SessionID: &session, Body: []byte(m.body),
			ApplicationProperties: map[string]any{"Sequence": m.seq, "IsLast": m.last},
		}, nil))
	}

	for _, want := range []string{"created", "paid", "shipped"} {
		select {
		case body := <-got:
			require.Equal(t, want, body)
		case <-time.After(30 * time.Second):
			t.Fatalf("the handler did not get %q", want)
		}
	}
}
