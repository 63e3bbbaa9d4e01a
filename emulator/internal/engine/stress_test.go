package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// TestConcurrentSendersAndReceivers moves messages through many connections,
// sessions and links at once, with receivers coming and going, and checks
// that every message is completed exactly once.
func TestConcurrentSendersAndReceivers(t *testing.T) {
	t.Parallel()
	const senders, perSender, receivers = 3, 100, 3
	addr, b := startServer(t, engine.Config{})
	// Messages prefetched by a receiver that closes stay locked until the
	// lock expires (reference §8), so keep locks short here.
	require.NoError(t, b.CreateQueue("stress", broker.EntityProperties{LockDuration: 200 * time.Millisecond, MaxDeliveryCount: 1000}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	for i := range senders {
		c := dialGoAMQP(t, addr, plain())
		wg.Go(func() {
			s, err := c.NewSession(ctx, nil)
			if !assertNoErr(t, err) {
				return
			}
			snd, err := s.NewSender(ctx, "stress", nil)
			if !assertNoErr(t, err) {
				return
			}
			for j := range perSender {
				if !assertNoErr(t, snd.Send(ctx, amqp.NewMessage(fmt.Appendf(nil, "%d-%d", i, j)), nil)) {
					return
				}
			}
		})
	}

	var mu sync.Mutex
	seen := map[string]int{}
	var completed atomic.Int64
	total := int64(senders * perSender)
	for range receivers {
		c := dialGoAMQP(t, addr, plain())
		wg.Go(func() {
			for completed.Load() < total && ctx.Err() == nil {
				// A fresh session and link each round: links come and go
				// while messages flow.
				s, err := c.NewSession(ctx, nil)
				if !assertNoErr(t, err) {
					return
				}
				rcv, err := s.NewReceiver(ctx, "stress", &amqp.ReceiverOptions{SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(), Credit: 10})
				if !assertNoErr(t, err) {
					return
				}
				for range 20 {
					rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
					m, err := rcv.Receive(rctx, nil)
					rcancel()
					if err != nil {
						break
					}
					if rcv.AcceptMessage(ctx, m) == nil {
						mu.Lock()
						seen[string(m.GetData())]++
						mu.Unlock()
						completed.Add(1)
					}
				}
				_ = rcv.Close(ctx)
				_ = s.Close(ctx)
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, int(total))
	for body, n := range seen {
		require.Equal(t, 1, n, "message %s completed %d times", body, n)
	}
	q, err := b.Lookup("stress")
	require.NoError(t, err)
	require.Zero(t, q.Info().Counts.Active)
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
