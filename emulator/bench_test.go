package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// BenchmarkSendReceiveComplete measures end-to-end throughput through the
// real SDK: 4 senders and 4 peek-lock receivers on one queue, 1 KiB
// messages, each received message completed. One op is one message.
func BenchmarkSendReceiveComplete(b *testing.B) {
	b.Run("single", func(b *testing.B) { benchmarkThroughput(b, 1, emulatortest.Options{}) })
	b.Run("batch100", func(b *testing.B) { benchmarkThroughput(b, 100, emulatortest.Options{}) })
}

// BenchmarkTransports is BenchmarkSendReceiveComplete (single sends) over
// each transport, side by side: plain AMQP, AMQPS (TLS) and AMQP over
// WebSockets over TLS.
func BenchmarkTransports(b *testing.B) {
	b.Run("amqp", func(b *testing.B) { benchmarkThroughput(b, 1, emulatortest.Options{}) })
	b.Run("amqps", func(b *testing.B) { benchmarkThroughput(b, 1, emulatortest.Options{TLS: true}) })
	b.Run("wss", func(b *testing.B) { benchmarkThroughput(b, 1, emulatortest.Options{TLS: true, WebSocket: true}) })
}

// benchmarkThroughput sends in batches of batchSize (1: SendMessage) to an
// emulator started with opts and a queue.
func benchmarkThroughput(b *testing.B, batchSize int, opts emulatortest.Options) {
	const senders, receivers = 4, 4
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts.Queues = map[string]broker.EntityProperties{"bench": {}}
	srv := emulatortest.Start(b, &opts)
	// A client (an AMQP connection) per sender and receiver.
	newBenchClient := func() *azservicebus.Client { return srv.NewClient(b, nil) }
	body := make([]byte, 1024)
	total := int64(b.N)
	var sent, received atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range senders {
		c := newBenchClient()
		s, err := c.NewSender("bench", nil)
		require.NoError(b, err)
		wg.Go(func() {
			for {
				n := min(int64(batchSize), total-(sent.Add(int64(batchSize))-int64(batchSize)))
				if n <= 0 {
					return
				}
				if batchSize == 1 {
					if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				batch, err := s.NewMessageBatch(ctx, nil)
				if err != nil {
					b.Error(err)
					return
				}
				for range n {
					if err := batch.AddMessage(&azservicebus.Message{Body: body}, nil); err != nil {
						b.Error(err)
						return
					}
				}
				if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for range receivers {
		c := newBenchClient()
		r, err := c.NewReceiverForQueue("bench", nil)
		require.NoError(b, err)
		wg.Go(func() {
			for received.Load() < total {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				msgs, err := r.ReceiveMessages(rctx, 100, nil)
				rcancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					b.Error(err)
					return
				}
				for _, m := range msgs {
					if err := r.CompleteMessage(ctx, m, nil); err != nil {
						b.Error(err)
						return
					}
					received.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSessionChurnOneClient measures what a session worker pays per
// session on a shared client: 8 goroutines on one client each accept a
// session by name, receive and complete its one message, and close the
// session receiver (an AMQP session, links and claims each time). One op is
// one session.
func BenchmarkSessionChurnOneClient(b *testing.B) {
	const workers = 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"bench": {RequiresSession: true}}})
	client := srv.Client
	s, err := client.NewSender("bench", nil)
	require.NoError(b, err)
	for n := 0; n < b.N; {
		batch, err := s.NewMessageBatch(ctx, nil)
		require.NoError(b, err)
		for ; n < b.N; n++ {
			sid := fmt.Sprintf("s%d", n)
			if err := batch.AddMessage(&azservicebus.Message{SessionID: &sid}, nil); err != nil {
				break
			}
		}
		require.NoError(b, s.SendMessageBatch(ctx, batch, nil))
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for n := next.Add(1) - 1; n < int64(b.N); n = next.Add(1) - 1 {
				sr, err := client.AcceptSessionForQueue(ctx, "bench", fmt.Sprintf("s%d", n), nil)
				if err != nil {
					b.Error(err)
					return
				}
				msgs, err := sr.ReceiveMessages(ctx, 1, nil)
				if err == nil && len(msgs) == 1 {
					err = sr.CompleteMessage(ctx, msgs[0], nil)
				}
				_ = sr.Close(ctx)
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sessions/s")
}
