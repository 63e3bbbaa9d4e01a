package emulator_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// settleBatch is how many messages a refill sends: one session's worth for
// the session receiver.
const settleBatch = 50

// BenchmarkSerialSettlement is the latency of one message taken and settled
// at a time, ReceiveMessages(1) then CompleteMessage, by a queue receiver and
// by a session receiver, side by side. One op is one message; receive-ns/op
// and complete-ns/op split it. Refills (a batch of 50, one session each for
// the session receiver, which then accepts the next session) are not timed.
func BenchmarkSerialSettlement(b *testing.B) {
	srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
		"plain":    {},
		"sessions": {RequiresSession: true},
	}})
	b.Run("queue", func(b *testing.B) {
		r, err := srv.Client.NewReceiverForQueue("plain", nil)
		require.NoError(b, err)
		defer func() { _ = r.Close(context.Background()) }()
		benchmarkSerialSettlement(b, srv, "plain", func(context.Context, int) (settler, error) { return r, nil })
	})
	b.Run("session", func(b *testing.B) {
		var cur *azservicebus.SessionReceiver
		defer func() {
			if cur != nil {
				_ = cur.Close(context.Background())
			}
		}()
		benchmarkSerialSettlement(b, srv, "sessions", func(ctx context.Context, _ int) (settler, error) {
			if cur != nil {
				if err := cur.Close(ctx); err != nil {
					return nil, err
				}
			}
			var err error
			cur, err = srv.Client.AcceptNextSessionForQueue(ctx, "sessions", nil)
			return cur, err
		})
	})
}

// settler is what the benchmark needs of a receiver.
type settler interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
}

// benchmarkSerialSettlement receives and completes b.N messages one by one
// from entity; after each refill it asks next for the receiver to use.
func benchmarkSerialSettlement(b *testing.B, srv *emulatortest.Server, entity string, next func(context.Context, int) (settler, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := srv.Client.NewSender(entity, nil)
	require.NoError(b, err)
	defer func() { _ = s.Close(context.Background()) }()
	var (
		r                 settler
		left, refills     int
		receive, complete time.Duration
	)
	for b.Loop() {
		if left == 0 {
			b.StopTimer()
			refills++
			batch, err := s.NewMessageBatch(ctx, nil)
			require.NoError(b, err)
			sid := fmt.Sprintf("s%d", refills)
			for range settleBatch {
				require.NoError(b, batch.AddMessage(&azservicebus.Message{Body: []byte("m"), SessionID: &sid}, nil))
			}
			require.NoError(b, s.SendMessageBatch(ctx, batch, nil))
			r, err = next(ctx, refills)
			require.NoError(b, err)
			left = settleBatch
			b.StartTimer()
		}
		t0 := time.Now()
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			b.Fatalf("receive: %d messages, %v", len(msgs), err)
		}
		t1 := time.Now()
		if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
			b.Fatalf("complete: %v", err)
		}
		receive += t1.Sub(t0)
		complete += time.Since(t1)
		left--
	}
	b.ReportMetric(float64(receive.Nanoseconds())/float64(b.N), "receive-ns/op")
	b.ReportMetric(float64(complete.Nanoseconds())/float64(b.N), "complete-ns/op")
}

// BenchmarkAcceptNextSession is AcceptNextSessionForQueue and Close with a
// number of sessions waiting, each with one message: the cost a session
// worker pays per session, and how it grows with the sessions in the queue.
func BenchmarkAcceptNextSession(b *testing.B) {
	for _, waiting := range []int{10, 10000} {
		b.Run(fmt.Sprintf("waiting=%d", waiting), func(b *testing.B) {
			srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"sessions": {RequiresSession: true}}})
			q, err := srv.Broker().Lookup("sessions")
			require.NoError(b, err)
			for i := range waiting {
				sid := fmt.Sprintf("s%05d", i)
				m := &amqp.Message{Data: [][]byte{[]byte("m")}, Properties: &amqp.MessageProperties{GroupID: &sid}}
				require.NoError(b, q.Send(b.Context(), []*amqp.Message{m}))
			}
			ctx := b.Context()
			for b.Loop() {
				r, err := srv.Client.AcceptNextSessionForQueue(ctx, "sessions", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConcurrentWorkers is the shape of a session worker pool next to a
// pool of queue receivers: 8 workers, each with a client (AMQP connection) of
// its own, receiving one message at a time and completing it. The session
// workers accept the next session, take its 50 messages and close it; the
// queue workers only receive. One op is one message; the messages (batches of
// 50, one session each) are sent before the timer starts. msgs/s counts up to
// the last completion; accept-ns/session is what accepting and closing a
// session cost a worker.
func BenchmarkConcurrentWorkers(b *testing.B) {
	const workers = 8
	for _, sessions := range []bool{false, true} {
		name := map[bool]string{false: "queue", true: "session"}[sessions]
		b.Run(name, func(b *testing.B) {
			srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
				"work": {RequiresSession: sessions},
			}})
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			s, err := srv.Client.NewSender("work", nil)
			require.NoError(b, err)
			total := b.N
			for sent := 0; sent < total; {
				batch, err := s.NewMessageBatch(ctx, nil)
				require.NoError(b, err)
				sid := fmt.Sprintf("s%d", sent)
				for i := 0; i < settleBatch && sent < total; i++ {
					last := i == settleBatch-1 || sent == total-1
					require.NoError(b, batch.AddMessage(&azservicebus.Message{Body: []byte("m"), SessionID: &sid,
						ApplicationProperties: map[string]any{"last": last}}, nil))
					sent++
				}
				require.NoError(b, s.SendMessageBatch(ctx, batch, nil))
			}
			clients := make([]*azservicebus.Client, workers)
			for i := range clients {
				clients[i] = srv.NewClient(b, nil)
			}
			var done, sessionNs, accepted, end atomic.Int64
			completed := func() {
				if done.Add(1) == int64(total) {
					end.Store(time.Now().UnixNano())
					cancel() // workers waiting for a session stop at once
				}
			}
			// settle receives and completes from r until the last message of
			// a session (untilLast) or until cancelled.
			settle := func(r settler, untilLast bool) error {
				for ctx.Err() == nil {
					msgs, err := r.ReceiveMessages(ctx, 1, nil)
					if err != nil {
						return nil // cancelled: all done
					}
					for _, m := range msgs {
						if err := r.CompleteMessage(ctx, m, nil); err != nil {
							return err
						}
						completed()
						if last, _ := m.ApplicationProperties["last"].(bool); last && untilLast {
							return nil
						}
					}
				}
				return nil
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for _, c := range clients {
				wg.Go(func() {
					if !sessions {
						r, err := c.NewReceiverForQueue("work", nil)
						if err == nil {
							err = settle(r, false)
						}
						if err != nil {
							b.Error(err)
						}
						return
					}
					for ctx.Err() == nil {
						t0 := time.Now()
						r, err := c.AcceptNextSessionForQueue(ctx, "work", nil)
						if err != nil {
							return // cancelled: all done
						}
						spent := time.Since(t0)
						if err := settle(r, true); err != nil {
							b.Error(err)
							return
						}
						t1 := time.Now()
						_ = r.Close(context.WithoutCancel(ctx))
						sessionNs.Add(int64(spent + time.Since(t1)))
						accepted.Add(1)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			require.Equal(b, int64(total), done.Load())
			b.ReportMetric(float64(total)/time.Duration(end.Load()-start.UnixNano()).Seconds(), "msgs/s")
			if n := accepted.Load(); n > 0 {
				b.ReportMetric(float64(sessionNs.Load())/float64(n), "accept-ns/session")
			}
		})
	}
}
