package broker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
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

// The Gjura layout: a subscription of the source topic picks the messages that carry
// the sequencing properties, gives each its session id with a SQL rule action and
// forwards it to the sequencing topic, whose session subscription the workers read.
func Example_forwarding() {
	b := broker.New(broker.Config{})
	defer b.Close()
	_ = b.CreateTopic("sequencing", broker.EntityProperties{})
	_ = b.CreateSubscription("sequencing", "work", broker.EntityProperties{RequiresSession: true})
	_ = b.CreateTopic("source", broker.EntityProperties{})
	err := b.CreateSubscriptionWithRules("source", "route", broker.EntityProperties{ForwardTo: "sequencing"},
		[]broker.Rule{{
			Name:                "gjura",
			FilterType:          broker.FilterSQL,
			SQLExpression:       "EXISTS(SessionName) AND EXISTS(TransactionId)",
			ActionSQLExpression: "SET sys.SessionId = SessionName + '_' + TransactionId",
		}})
	fmt.Println("rule:", err)

	m := amqp.NewMessage([]byte("debit 10"))
	m.ApplicationProperties = map[string]any{"SessionName": "account-9", "TransactionId": int64(17)}
	src, _ := b.Lookup("source")
	_ = src.Send(context.Background(), []*amqp.Message{m})

	work, _ := b.Lookup("sequencing/Subscriptions/work")
	lock, _ := work.AcceptSession(context.Background(), "", "worker")
	ds, _ := work.TryReceive(10, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete, Session: lock})
	fmt.Println(lock.ID(), string(ds[0].Message.GetData()), ds[0].Message.Annotations[broker.AnnotationEnqueueSequenceNumber])

	err = b.CreateRule("source", "route", broker.Rule{Name: "bad", FilterType: broker.FilterSQL, SQLExpression: "TransactionId >"})
	fmt.Println(err)
	// Output:
	// rule: <nil>
	// account-9_17 debit 10 1
	// create rule on "source"/"route": invalid configuration: rule "bad" filter "TransactionId >": sqlrule: 1:16: expected expression after '>', found EOF
}
