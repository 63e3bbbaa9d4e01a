package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// A program embeds the worker with a handler of its own. The three messages of session
// order-42 reach the queue out of order; the handler gets them in their application order.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A Service Bus with a session-enabled queue "orders": the in-process emulator here, a
	// namespace in production.
	sb, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-", UserConfig: &broker.UserConfig{
		Namespaces: []broker.NamespaceConfig{{Name: "example", Queues: []broker.QueueConfig{
			{Name: "orders", Properties: broker.EntityProperties{RequiresSession: true}},
		}}},
	}})
	if err != nil {
		panic(err)
	}
	defer sb.Close()

	last := make(chan struct{})
	cfg := worker.DefaultConfig()
	cfg.ConnectionString = sb.ConnectionString()
	cfg.Queue = "orders"
	cfg.HTTPAddr = worker.HTTPOff // no /metrics, /healthz, /readyz in this example
	cfg.Handler = sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		fmt.Println(m.SessionID, m.Sequence, string(m.Body))
		if m.IsLast {
			close(last)
		}
		return nil
	})
	w, err := worker.New(cfg)
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	publish(ctx, sb.ConnectionString(), "orders", "order-42", []event{{2, false, "paid"}, {1, false, "created"}, {3, true, "shipped"}})

	<-last
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// order-42 1 created
	// order-42 2 paid
	// order-42 3 shipped
}

// event is one message of a session: its sequence, whether it is the last, its body.
type event struct {
	sequence int64
	last     bool
	body     string
}

// publish sends the events of a session in the order given, each with the application
// properties of the message contract (Sequence, IsLast).
func publish(ctx context.Context, connectionString, queue, session string, events []event) {
	client, err := azservicebus.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(queue, nil)
	if err != nil {
		panic(err)
	}
	defer sender.Close(ctx)
	for _, e := range events {
		err := sender.SendMessage(ctx, &azservicebus.Message{
			SessionID:             &session,
			Body:                  []byte(e.body),
			ApplicationProperties: map[string]any{"Sequence": e.sequence, "IsLast": e.last},
		}, nil)
		if err != nil {
			panic(err)
		}
	}
}
