package worker_test

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
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// With OrderingNone the worker consumes an entity without sessions: messages without a sequence
// are handled as they come, several at once up to MaxConcurrentSessions, a transient failure is
// retried, and a message that keeps failing is dead-lettered without holding up the others.
func TestOrderingNoneHandlesConcurrentlyWithoutState(t *testing.T) {
	t.Parallel()
	const n, slots = 40, 4
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"events": {LockDuration: 5 * time.Second}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sender, err := srv.Client.NewSender("events", nil)
	require.NoError(t, err)
	defer sender.Close(ctx)
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil))
	}

	var (
		mu              sync.Mutex
		seen            = map[string]int{}
		inFlight, peak  atomic.Int32
		done            = make(chan struct{})
		handledDistinct int
	)
	h := sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		seen[m.MessageID]++
		switch {
		case m.MessageID == "m07":
			return errors.New("poison")
		case m.MessageID == "m03" && seen[m.MessageID] == 1:
			return errors.New("transient")
		}
		handledDistinct++
		if handledDistinct == n-1 {
			close(done)
		}
		return nil
	})
	cfg := worker.DefaultConfig()
	cfg.ConnectionString, cfg.Entity, cfg.HTTPAddr = srv.ConnectionString(), sbadapter.Entity{Queue: "events"}, worker.HTTPOff
	cfg.Ordering, cfg.Handler, cfg.MaxConcurrentSessions = worker.OrderingNone, h, slots
	cfg.MaxHandlerAttempts, cfg.RetryBase, cfg.RetryMax = 3, 10*time.Millisecond, 10*time.Millisecond
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("not every message was handled")
	}
	require.Eventually(t, func() bool {
		info, err := srv.Broker().GetQueue("events")
		require.NoError(t, err)
		return info.Counts.Active == 0 && info.Counts.DeadLetter == 1
	}, 10*time.Second, 20*time.Millisecond, "the queue is drained, the poison message dead-lettered")
	require.NoError(t, w.Stop(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, seen["m07"], "the poison message is tried Attempts times")
	require.Equal(t, 2, seen["m03"], "the transient failure is retried once")
	require.LessOrEqual(t, peak.Load(), int32(slots), "never more than MaxConcurrentSessions in flight")
	require.Greater(t, peak.Load(), int32(1), "messages are handled concurrently")
	st := w.Stats()
	require.EqualValues(t, n-1, st.Handled)
	require.EqualValues(t, 1, st.DeadLettered)
	require.EqualValues(t, 3, st.Retries)
}
