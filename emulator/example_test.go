package emulator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
)

// ExampleStart runs an emulator on free ports and talks to it with the real
// azservicebus SDK.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := emulator.Start(ctx, emulator.Config{
		UserConfig: &broker.UserConfig{Namespaces: []broker.NamespaceConfig{{
			Name:   "sbemulatorns",
			Queues: []broker.QueueConfig{{Name: "orders", Properties: broker.EntityProperties{RequiresSession: true}}},
		}}},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)

	sender, err := client.NewSender("orders", nil)
	if err != nil {
		panic(err)
	}
	for _, body := range []string{"created", "paid"} {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body), SessionID: new("order-1")}, nil); err != nil {
			panic(err)
		}
	}

	session, err := client.AcceptNextSessionForQueue(ctx, "orders", nil)
	if err != nil {
		panic(err)
	}
	defer session.Close(ctx)
	for received := 0; received < 2; {
		msgs, err := session.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			panic(err)
		}
		for _, m := range msgs {
			fmt.Printf("%s #%d: %s\n", session.SessionID(), *m.SequenceNumber, m.Body)
			if err := session.CompleteMessage(ctx, m, nil); err != nil {
				panic(err)
			}
			received++
		}
	}
	// Output:
	// order-1 #1: created
	// order-1 #2: paid
}
