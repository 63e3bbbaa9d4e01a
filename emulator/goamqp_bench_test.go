package emulator_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// BenchmarkGoAMQP measures raw AMQP 1.0 throughput with go-amqp, no Service Bus SDK: 4 senders
// waiting for each message's disposition and 4 receivers with 100 credits accepting each message,
// 1 KiB bodies. One op is one message sent, received and settled.
//
// The emulator case always runs. The rabbitmq case is the anchor: the same client against
// RabbitMQ's AMQP 1.0 plugin, run only when SEQBUS_BENCH_RABBITMQ_URL is set (for example
// amqp://guest:guest@127.0.0.1:5672; scripts/bench-emulator.sh enables the plugin and sets it).
func BenchmarkGoAMQP(b *testing.B) {
	b.Run("emulator", func(b *testing.B) {
		srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"bench": {}}})
		addr := "amqp://" + srv.AMQPAddr()
		opts := &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(emulator.DefaultKeyName, emulator.DefaultKey)}
		benchmarkGoAMQP(b, addr, opts, "bench", "bench")
	})
	b.Run("rabbitmq", func(b *testing.B) {
		raw := os.Getenv("SEQBUS_BENCH_RABBITMQ_URL")
		if raw == "" {
			b.Skip("SEQBUS_BENCH_RABBITMQ_URL not set: run scripts/bench-emulator.sh for the RabbitMQ anchor")
		}
		u, err := url.Parse(raw)
		require.NoError(b, err)
		pass, _ := u.User.Password()
		opts := &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(u.User.Username(), pass)}
		q := fmt.Sprintf("seqbus-bench-%d", time.Now().UnixNano())
		// RabbitMQ 3.x's AMQP 1.0 plugin: "/queue/NAME" declares and addresses a queue.
		benchmarkGoAMQP(b, "amqp://"+u.Host, opts, "/queue/"+q, "/queue/"+q)
	})
}

func benchmarkGoAMQP(b *testing.B, addr string, opts *amqp.ConnOptions, target, source string) {
	const senders, receivers, credit = 4, 4, 100
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dial := func() *amqp.Session {
		conn, err := amqp.Dial(ctx, addr, opts)
		require.NoError(b, err)
		b.Cleanup(func() { _ = conn.Close() })
		s, err := conn.NewSession(ctx, nil)
		require.NoError(b, err)
		return s
	}
	body := make([]byte, 1024)
	total := int64(b.N)
	var sent, received atomic.Int64
	var wg sync.WaitGroup

	// Attach every link before the clock starts.
	sendLinks := make([]*amqp.Sender, senders)
	for i := range sendLinks {
		s, err := dial().NewSender(ctx, target, nil)
		require.NoError(b, err)
		sendLinks[i] = s
	}
	recvLinks := make([]*amqp.Receiver, receivers)
	for i := range recvLinks {
		r, err := dial().NewReceiver(ctx, source, &amqp.ReceiverOptions{Credit: credit})
		require.NoError(b, err)
		recvLinks[i] = r
	}

	b.ResetTimer()
	for _, s := range sendLinks {
		wg.Go(func() {
			for sent.Add(1) <= total {
				if err := s.Send(ctx, amqp.NewMessage(body), nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for _, r := range recvLinks {
		wg.Go(func() {
			for received.Load() < total {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				m, err := r.Receive(rctx, nil)
				rcancel()
				if err != nil {
					if ctx.Err() != nil {
						b.Error(err)
						return
					}
					continue // idle: check whether everything arrived
				}
				if err := r.AcceptMessage(ctx, m); err != nil {
					b.Error(err)
					return
				}
				received.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
