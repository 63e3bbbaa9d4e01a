package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// TestConcurrentProducersAndConsumers checks that every message is completed exactly
// once when several goroutines send, receive and settle at the same time.
func TestConcurrentProducersAndConsumers(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue("q", broker.EntityProperties{}))
	q, err := b.Lookup("q")
	require.NoError(t, err)

	const producers, consumers, perProducer = 4, 4, 250
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				if err := q.Send(ctx, []*amqp.Message{msg(fmt.Sprintf("%d-%d", p, i))}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	done := make(chan struct{})
	for c := range consumers {
		wg.Go(func() {
			for {
				ds, err := q.Receive(ctx, 7, peekLock)
				if err != nil {
					select {
					case <-done:
					default:
						t.Errorf("consumer %d: %v", c, err)
					}
					return
				}
				for i, d := range ds {
					// Abandon a few to exercise redelivery.
					if d.Message.Header.DeliveryCount == 0 && i%5 == 0 {
						if err := q.Abandon(d.LockToken, nil); err != nil {
							t.Errorf("abandon: %v", err)
						}
						continue
					}
					if err := q.Complete(d.LockToken); err != nil {
						t.Errorf("complete: %v", err)
						continue
					}
					mu.Lock()
					seen[string(d.Message.GetData())]++
					total++
					if total == producers*perProducer {
						close(done)
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, producers*perProducer)
	for body, n := range seen {
		require.Equal(t, 1, n, body)
	}
	require.Equal(t, int64(0), q.Info().Counts.Total)
}

// TestConcurrentAcceptNextSessionIsExclusive checks that racing acceptors never get the
// same session.
func TestConcurrentAcceptNextSessionIsExclusive(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue("q", broker.EntityProperties{RequiresSession: true}))
	q, err := b.Lookup("q")
	require.NoError(t, err)
	const sessions = 20
	for i := range sessions {
		send(t, q, sessionMsg(fmt.Sprintf("s%02d", i), "x"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := make(chan string, sessions)
	var wg sync.WaitGroup
	for range sessions {
		wg.Go(func() {
			l, err := q.AcceptSession(ctx, "", "racer")
			if err != nil {
				t.Errorf("accept: %v", err)
				return
			}
			ids <- l.ID()
		})
	}
	wg.Wait()
	close(ids)
	got := map[string]bool{}
	for id := range ids {
		require.False(t, got[id], "session %s handed out twice", id)
		got[id] = true
	}
	require.Len(t, got, sessions)
}

// TestConcurrentForwardingDeliversEachMessageOnce sends concurrently into a topic whose
// subscription forwards to a duplicate-detecting queue, while consumers drain it and
// abandon some messages; every distinct MessageId arrives exactly once.
func TestConcurrentForwardingDeliversEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue("out", broker.EntityProperties{RequiresDuplicateDetection: true}))
	require.NoError(t, b.CreateTopic("in", broker.EntityProperties{}))
	require.NoError(t, b.CreateSubscriptionWithRules("in", "fwd", broker.EntityProperties{ForwardTo: "out"},
		[]broker.Rule{{Name: "tag", FilterType: broker.FilterSQL, SQLExpression: "EXISTS(n)", ActionSQLExpression: "SET seen = TRUE"}}))
	in, err := b.Lookup("in")
	require.NoError(t, err)
	out, err := b.Lookup("out")
	require.NoError(t, err)

	const producers, perProducer = 4, 100
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				m := withProps("", map[string]any{"n": int64(i)})
				m.Properties = &amqp.MessageProperties{MessageID: fmt.Sprintf("%d-%d", p, i)}
				// Each message is sent twice; the second copy is a duplicate.
				if err := in.Send(ctx, []*amqp.Message{m, m}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		})
	}
	seen := map[any]int{}
	var mu sync.Mutex
	recvCtx, allSeen := context.WithCancel(ctx)
	defer allSeen()
	for range 2 {
		wg.Go(func() {
			for {
				ds, err := out.Receive(recvCtx, 8, peekLock)
				if err != nil {
					if ctx.Err() != nil {
						t.Errorf("receive: %v", err)
					}
					return // recvCtx ended: everything was seen
				}
				for i, d := range ds {
					if d.Message.Header.DeliveryCount == 0 && i%3 == 0 {
						if err := out.Abandon(d.LockToken, nil); err != nil {
							t.Errorf("abandon: %v", err)
						}
						continue
					}
					if err := out.Complete(d.LockToken); err != nil {
						t.Errorf("complete: %v", err)
					}
					mu.Lock()
					seen[d.Message.Properties.MessageID]++
					if len(seen) == producers*perProducer {
						allSeen()
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, producers*perProducer)
	for id, n := range seen {
		require.Equal(t, 1, n, "message %v", id)
	}
	require.Equal(t, int64(0), out.Info().Counts.Total)
}
