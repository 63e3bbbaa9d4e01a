package broker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/clock"
)

// A peek-lock round trip: an abandoned message comes back with its delivery count
// raised, and a lock that runs out makes the message available again.
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := broker.New(broker.Config{Clock: clk})
	defer b.Close()
	_ = b.CreateQueue("orders", broker.EntityProperties{LockDuration: 30 * time.Second})
	q, _ := b.Lookup("orders")

	ctx := context.Background()
	_ = q.Send(ctx, []*amqp.Message{amqp.NewMessage([]byte("order 1"))})

	d, _ := q.Receive(ctx, 10, broker.ReceiveOptions{Mode: broker.PeekLock})
	fmt.Println(string(d[0].Message.GetData()), d[0].SequenceNumber, d[0].LockedUntil.Format(time.TimeOnly))
	_ = q.Abandon(d[0].LockToken, nil)

	d, _ = q.Receive(ctx, 10, broker.ReceiveOptions{Mode: broker.PeekLock})
	fmt.Println("delivery count", d[0].Message.Header.DeliveryCount+1)
	clk.Advance(30 * time.Second) // the lock runs out
	fmt.Println("complete after expiry:", q.Complete(d[0].LockToken) != nil)

	d, _ = q.Receive(ctx, 10, broker.ReceiveOptions{Mode: broker.PeekLock})
	fmt.Println("delivery count", d[0].Message.Header.DeliveryCount+1, "complete:", q.Complete(d[0].LockToken))
	// Output:
	// order 1 1 00:00:30
	// delivery count 2
	// complete after expiry: true
	// delivery count 3 complete: <nil>
}
