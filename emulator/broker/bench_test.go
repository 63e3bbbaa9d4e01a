package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/broker"
)

// BenchmarkSendReceiveComplete measures one 1 KiB message through send, peek-lock
// receive and complete on a queue, with the wall clock (so lock timers are real).
func BenchmarkSendReceiveComplete(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(map[int]string{1: "batch=1", 32: "batch=32"}[batch], func(b *testing.B) {
			br := broker.New(broker.Config{})
			defer br.Close()
			if err := br.CreateQueue("q", broker.EntityProperties{}); err != nil {
				b.Fatal(err)
			}
			q, err := br.Lookup("q")
			if err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			msgs := make([]*amqp.Message, batch)
			for i := range msgs {
				msgs[i] = amqp.NewMessage(body)
			}
			ctx := context.Background()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				if err := q.Send(ctx, msgs); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < batch; {
					ds, err := q.Receive(ctx, batch-got, broker.ReceiveOptions{Mode: broker.PeekLock})
					if err != nil {
						b.Fatal(err)
					}
					for _, d := range ds {
						if err := q.Complete(d.LockToken); err != nil {
							b.Fatal(err)
						}
					}
					got += len(ds)
				}
			}
		})
	}
}

// BenchmarkSessionSendReceiveComplete is the same through a session queue.
func BenchmarkSessionSendReceiveComplete(b *testing.B) {
	br := broker.New(broker.Config{})
	defer br.Close()
	if err := br.CreateQueue("q", broker.EntityProperties{RequiresSession: true}); err != nil {
		b.Fatal(err)
	}
	q, err := br.Lookup("q")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	l, err := q.AcceptSession(ctx, "s", "bench")
	if err != nil {
		b.Fatal(err)
	}
	m := sessionMsg("s", string(make([]byte, 1024)))
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := q.Send(ctx, []*amqp.Message{m}); err != nil {
			b.Fatal(err)
		}
		ds, err := q.Receive(ctx, 1, broker.ReceiveOptions{Session: l})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Complete(ds[0].LockToken); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeepQueue measures send+receive+complete with 10,000 messages waiting
// ahead, so per-message costs that grow with the queue show up.
func BenchmarkDeepQueue(b *testing.B) {
	br := broker.New(broker.Config{})
	defer br.Close()
	if err := br.CreateQueue("q", broker.EntityProperties{}); err != nil {
		b.Fatal(err)
	}
	q, err := br.Lookup("q")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m := amqp.NewMessage(make([]byte, 1024))
	for range 10_000 {
		if err := q.Send(ctx, []*amqp.Message{m}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := q.Send(ctx, []*amqp.Message{m}); err != nil {
			b.Fatal(err)
		}
		ds, err := q.Receive(ctx, 1, broker.ReceiveOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Complete(ds[0].LockToken); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGjuraLayoutSend measures one message through the Gjura layout: a source
// topic whose subscription filters with SQL, sets the session id with a rule action and
// forwards to a sequencing topic, fanned out to a session subscription (received and
// deleted to keep the broker small).
func BenchmarkGjuraLayoutSend(b *testing.B) {
	br := broker.New(broker.Config{})
	defer br.Close()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(br.CreateTopic("seq", broker.EntityProperties{}))
	must(br.CreateSubscription("seq", "work", broker.EntityProperties{RequiresSession: true}))
	must(br.CreateTopic("src", broker.EntityProperties{RequiresDuplicateDetection: true}))
	must(br.CreateSubscriptionWithRules("src", "route", broker.EntityProperties{ForwardTo: "seq"}, []broker.Rule{{
		Name: "gjura", FilterType: broker.FilterSQL,
		SQLExpression:       "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)",
		ActionSQLExpression: "SET sys.SessionId = user.SessionName + '_' + user.TransactionId",
	}}))
	src, err := br.Lookup("src")
	must(err)
	work, err := br.Lookup("seq/Subscriptions/work")
	must(err)
	lock, err := work.AcceptNamedSession("cust_7", "bench")
	must(err)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := amqp.NewMessage(make([]byte, 256))
		m.Properties = &amqp.MessageProperties{MessageID: fmt.Sprint(i)}
		m.ApplicationProperties = map[string]any{"SessionName": "cust", "TransactionId": int64(7)}
		must(src.Send(ctx, []*amqp.Message{m}))
		ds, err := work.TryReceive(1, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete, Session: lock})
		must(err)
		if len(ds) != 1 {
			b.Fatalf("got %d messages", len(ds))
		}
	}
}

// BenchmarkManySessions measures, on a session queue that also holds N sessions with state
// and no messages (the tombstones of ended sessions), what a worker asks of the broker: take the
// next session with a message (send, accept-next, receive, complete, release), and list a page
// of the sessions whose state changed recently (one changed session among the N), and a page of
// every session with state from the middle of the list. Neither should grow with N.
func BenchmarkManySessions(b *testing.B) {
	for _, n := range []int{0, 10_000, 100_000} {
		br := broker.New(broker.Config{})
		if err := br.CreateQueue("q", broker.EntityProperties{RequiresSession: true}); err != nil {
			b.Fatal(err)
		}
		q, err := br.Lookup("q")
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for i := range n {
			l, err := q.AcceptSession(ctx, fmt.Sprintf("ended-%06d", i), "setup")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.SetState([]byte("tombstone")); err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
		changedAt := time.Now()
		l, err := q.AcceptSession(ctx, "changed", "setup")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.SetState([]byte("changed")); err != nil {
			b.Fatal(err)
		}
		l.Release()
		m := sessionMsg("s", "x")
		b.Run(fmt.Sprintf("tombstones=%d/accept-next", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := q.Send(ctx, []*amqp.Message{m}); err != nil {
					b.Fatal(err)
				}
				l, err := q.AcceptSession(ctx, "", "bench")
				if err != nil {
					b.Fatal(err)
				}
				ds, err := q.Receive(ctx, 1, broker.ReceiveOptions{Session: l})
				if err != nil || len(ds) != 1 {
					b.Fatal(err, len(ds))
				}
				if err := q.Complete(ds[0].LockToken); err != nil {
					b.Fatal(err)
				}
				l.Release()
			}
		})
		b.Run(fmt.Sprintf("tombstones=%d/list-changed", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				ids, err := q.ListSessions(changedAt, 0, 100)
				if err != nil || len(ids) != 1 {
					b.Fatal(err, ids)
				}
			}
		})
		b.Run(fmt.Sprintf("tombstones=%d/list-all-page", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := q.ListSessions(time.Time{}, n/2, 100); err != nil {
					b.Fatal(err)
				}
			}
		})
		br.Close()
	}
}
