package operator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// The operator commands' measurements (a replay of 10,000 dead letters, listings of 10,000
// sessions with each store), one run each on the in-process emulator and the local Postgres:
//
//	go test ./operator -run '^$' -bench . -benchtime 1x

const (
	benchSessions = 100
	benchPer      = 100 // 10,000 dead letters
	benchStates   = 10_000
)

// BenchmarkReplay replays a dead-letter queue of 10,000 messages (100 sessions of 100) to the
// queue with one DLQReplay --all: plan (peek), receive, send the copies in order and complete.
func BenchmarkReplay(b *testing.B) {
	for range b.N {
		b.StopTimer()
		bb := setup(b, "servicebus", nil)
		fillDLQ(b, bb)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		b.StartTimer()
		start := time.Now()
		res, err := bb.op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
		took := time.Since(start)
		b.StopTimer()
		cancel()
		require.NoError(b, err)
		sent := 0
		for _, s := range res.Sessions {
			sent += s.Sent
		}
		require.Equal(b, benchSessions*benchPer, sent)
		info, err := bb.srv.Broker().GetQueue(queue)
		require.NoError(b, err)
		require.Zero(b, info.Counts.DeadLetter, "every dead letter completed")
		require.EqualValues(b, benchSessions*benchPer, info.Counts.Active, "every copy in the queue")
		b.ReportMetric(float64(sent)/took.Seconds(), "msgs/s")
	}
}

// fillDLQ publishes benchSessions × benchPer messages and dead-letters them all.
func fillDLQ(b *testing.B, bb *bundle) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for s := range benchSessions {
		id := fmt.Sprintf("s-%03d", s)
		batch, err := bb.sender.NewMessageBatch(ctx, nil)
		require.NoError(b, err)
		for n := 1; n <= benchPer; n++ {
			mid := fmt.Sprintf("%s/%d", id, n)
			require.NoError(b, batch.AddMessage(&azservicebus.Message{
				SessionID: &id, MessageID: &mid, Body: make([]byte, 256),
				ApplicationProperties: map[string]any{"Sequence": int64(n), "IsLast": n == benchPer},
			}, nil))
		}
		require.NoError(b, bb.sender.SendMessageBatch(ctx, batch, nil))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for s := range benchSessions {
		id := fmt.Sprintf("s-%03d", s)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := bb.srv.Client.AcceptSessionForQueue(ctx, queue, id, nil)
			require.NoError(b, err)
			defer r.Close(ctx)
			for left := benchPer; left > 0; {
				msgs, err := r.ReceiveMessages(ctx, left, nil)
				require.NoError(b, err)
				for _, m := range msgs {
					require.NoError(b, r.DeadLetterMessage(ctx, m, nil))
				}
				left -= len(msgs)
			}
		})
	}
	wg.Wait()
}

// BenchmarkList lists 10,000 sessions with stored state, through each store's Lister: one
// query with Postgres, a brief lock of each session with Service Bus session state.
func BenchmarkList(b *testing.B) {
	for _, store := range stores {
		b.Run(store, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				bb := setup(b, store, nil)
				fillStates(b, bb, store)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				b.StartTimer()
				start := time.Now()
				res, err := bb.op.List(ctx, operator.ListParams{})
				took := time.Since(start)
				b.StopTimer()
				cancel()
				require.NoError(b, err)
				require.Len(b, res.Sessions, benchStates)
				b.ReportMetric(took.Seconds(), "s/list")
			}
		})
	}
}

// fillStates saves a state for benchStates sessions: through a locked session with Service Bus
// (session state lives in the session), through the store alone with Postgres (keyed by id).
func fillStates(b *testing.B, bb *bundle, store string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st := sequencer.NewState()
	st.Next, st.Deferred[9] = 4, 90
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range benchStates {
		id := fmt.Sprintf("s-%05d", i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var sess sequencer.Session = storetest.NewSession(id)
			if store == "servicebus" {
				var err error
				sess, err = bb.worker.Accept(ctx, id)
				require.NoError(b, err)
				defer sess.Close(ctx)
			}
			_, err := bb.store.Save(ctx, sequencer.SaveParams{Session: sess, State: st})
			require.NoError(b, err)
		})
	}
	wg.Wait()
}
