package outbox_test

// Measurements for the outbox: enqueue rate, relay throughput and commit-to-broker latency.
// Run them with a fixed count, for example
//
//	go test -run '^$' -bench . -benchtime=4000x ./outbox/

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/outbox"
)

// BenchmarkEnqueue: transactions per second, each enqueueing one message (a round trip
// for BEGIN, one for the function, one for COMMIT), from 1 and 4 goroutines, over 1,000
// sessions.
func BenchmarkEnqueue(b *testing.B) {
	for _, goroutines := range []int{1, 4} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			ctx := context.Background()
			pool := newPool(b, int32(goroutines))
			body := make([]byte, 256)
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := g; i < b.N; i += goroutines {
						err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders",
								SessionID: fmt.Sprintf("s-%d", i%1000), Body: body})
							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
}

// BenchmarkRelayThroughput: messages per second from a backlog of b.N messages in 100
// sessions to the emulator, with 1 and 4 relays (default BatchSize 100, Concurrency 4).
func BenchmarkRelayThroughput(b *testing.B) {
	for _, relays := range []int{1, 4} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			ctx := context.Background()
			srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-"})
			require.NoError(b, err)
			defer func() { require.NoError(b, srv.Close()) }()
			require.NoError(b, srv.Broker().CreateQueue("orders", sessionQueue))
			client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
			require.NoError(b, err)
			defer client.Close(ctx)
			pool := newPool(b, int32(6*relays+2))
			_, err = pool.Exec(ctx, `SELECT seqbus_outbox_enqueue('orders', 's-' || (i % 100), convert_to(repeat('x', 256), 'UTF8'))
FROM generate_series(1, $1) AS i`, b.N)
			require.NoError(b, err)

			b.ResetTimer()
			rctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range relays {
				r, err := outbox.NewRelay(&outbox.RelayConfig{Pool: pool, Client: client})
				require.NoError(b, err)
				wg.Go(func() {
					if err := r.Run(rctx); err != nil {
						b.Error(err)
					}
				})
			}
			for pending(b, pool) > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

// BenchmarkCommitToSend: the time from a transaction's COMMIT to the broker accepting
// its message, with one relay running and one application goroutine committing one
// message at a time into 50 sessions.
func BenchmarkCommitToSend(b *testing.B) {
	ctx := context.Background()
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-"})
	require.NoError(b, err)
	defer func() { require.NoError(b, srv.Close()) }()
	require.NoError(b, srv.Broker().CreateQueue("orders", sessionQueue))
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	require.NoError(b, err)
	defer client.Close(ctx)
	pool := newPool(b, 8)

	var (
		mu     sync.Mutex
		sentAt = map[string]time.Time{}
	)
	s := newSpy()
	s.after = func(_ context.Context, msgs []*azservicebus.Message) (int, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			sentAt[*m.MessageID] = now
		}
		return len(msgs), nil
	}
	r, err := outbox.NewRelay(&outbox.RelayConfig{Pool: pool, NewSender: s.senders(client)})
	require.NoError(b, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	time.Sleep(200 * time.Millisecond) // the relay's first scan and LISTEN

	committedAt := make(map[string]time.Time, b.N)
	b.ResetTimer()
	for i := range b.N {
		session := fmt.Sprintf("s-%d", i%50)
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		seq, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders", SessionID: session, Body: []byte("x")})
		require.NoError(b, err)
		committedAt[fmt.Sprintf("%s/%d", session, seq)] = time.Now()
		require.NoError(b, tx.Commit(ctx))
	}
	for pending(b, pool) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	cancel()
	require.NoError(b, <-done)

	lat := make([]time.Duration, 0, len(committedAt))
	mu.Lock()
	for id, c := range committedAt {
		sent, ok := sentAt[id]
		require.True(b, ok, id)
		lat = append(lat, sent.Sub(c))
	}
	mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
}
