package sbadapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/memory"
)

// TestDeferredFetchRefusedSkipsNothing runs the engine over the adapter on session queues
// where the broker refuses the stock SDK's receive-deferred (no session-id): a partitioned one,
// and a plain one under the emulator's strict rule. The early messages are deferred; the fetch
// of them fails; the run ends with an error that names the session and the broker's answer;
// nothing is skipped; the stored state still indexes the deferred messages, which are still at
// the broker. A second run fails the same way.
func TestDeferredFetchRefusedSkipsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		queue broker.EntityProperties
		rule  broker.SessionIDRule
	}{
		{"partitioned session queue", broker.EntityProperties{RequiresSession: true, EnablePartitioning: true}, broker.SessionIDOnPartitioned},
		{"session queue, session-id always required", broker.EntityProperties{RequiresSession: true}, broker.SessionIDAlways},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := emulatortest.Start(t, &emulatortest.Options{
				Queues:        map[string]broker.EntityProperties{"pq": tt.queue},
				ClientOptions: clientOptions(),
				SessionIDRule: tt.rule,
			})
			ctx := testCtx(t)
			sender, err := srv.Client.NewSender("pq", nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sender.Close(context.Background()) })
			send(ctx, t, sender, "a", 3, 2, 1)
			source, err := sbadapter.NewSource(srv.Client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "pq"}})
			require.NoError(t, err)

			var mu sync.Mutex
			var handled []int64
			h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
				mu.Lock()
				defer mu.Unlock()
				handled = append(handled, m.Sequence)
				return nil
			})
			store := memory.New()
			engine, err := sequencer.NewEngine(sequencer.EngineConfig{
				WindowMessages: sequencer.NoWindow, ReceiveBatch: 1, IdleTimeout: 300 * time.Millisecond,
			}, sequencer.EngineDeps{Store: store, Handler: h})
			require.NoError(t, err)

			for run := 1; run <= 2; run++ {
				before := sbadapter.DeferredFetchFailures()
				sess, err := source.AcceptNext(ctx)
				require.NoError(t, err, "run %d", run)
				_, err = engine.RunSession(ctx, sess, nil)
				require.Error(t, err, "run %d", run)
				require.ErrorContains(t, err, `session "a"`, "run %d", run)
				require.ErrorContains(t, err, "status code 500 and description: The service was unable to process the request", "run %d", run)
				require.Greater(t, sbadapter.DeferredFetchFailures(), before, "run %d: counted", run)
				require.NoError(t, sess.Close(ctx))

				mu.Lock()
				require.Equal(t, []int64{1}, handled, "run %d: only the message in order was handed over", run)
				mu.Unlock()
				entries, err := store.List(ctx, sessionstate.ListParams{})
				require.NoError(t, err)
				require.Len(t, entries, 1)
				st := entries[0].State
				require.EqualValues(t, 2, st.Next, "run %d: nothing skipped", run)
				require.Len(t, st.Deferred, 2, "run %d: both early messages are still indexed", run)
				require.Empty(t, st.SkippedPoison)
				require.Nil(t, st.Parked)

				// The early messages are at the broker under the broker sequence numbers the
				// state indexes.
				e, err := srv.Broker().Lookup("pq")
				require.NoError(t, err)
				atBroker := map[int64]int64{}
				for _, m := range e.Peek(1, 10, "a") {
					bs, ok := m.Annotations["x-opt-sequence-number"].(int64)
					require.True(t, ok)
					atBroker[seqOf(t, m.ApplicationProperties)] = bs
				}
				for _, n := range []int64{2, 3} {
					require.Contains(t, atBroker, n, "run %d: sequence %d is at the broker", run, n)
					require.Equal(t, atBroker[n], st.Deferred[n], "run %d: sequence %d", run, n)
				}
			}
			require.Zero(t, engine.Stats().Skipped, "nothing skipped")
		})
	}
}

func seqOf(t *testing.T, props map[string]any) int64 {
	t.Helper()
	n, ok := props["Sequence"].(int64)
	require.True(t, ok, "Sequence is %T", props["Sequence"])
	return n
}

// On a partitioned session queue the SDK's peek (no session-id) is refused: Holding says so with
// sequencer.ErrNoPeek once the source knows the entity is partitioned, so the engine goes on
// without it; unmarked, the refusal is an error like any other. Held in the store, the early
// messages of the same queue are handed over in order with no deferral at all.
func TestPartitionedSessionsDoNotPeek(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{"pq": {RequiresSession: true, EnablePartitioning: true}},
		ClientOptions: clientOptions(),
		SessionIDRule: broker.SessionIDOnPartitioned,
	})
	ctx := testCtx(t)
	sender, err := srv.Client.NewSender("pq", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sender.Close(context.Background()) })
	send(ctx, t, sender, "a", 3, 2, 1)

	source, err := sbadapter.NewSource(srv.Client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "pq"}})
	require.NoError(t, err)
	sess, err := source.AcceptNext(ctx)
	require.NoError(t, err)
	_, err = sess.(sequencer.HoldingSession).Holding(ctx, []int64{1})
	require.Error(t, err)
	require.NotErrorIs(t, err, sequencer.ErrNoPeek, "unmarked, a refusal is a failure")
	require.NoError(t, sess.Close(ctx))

	source.MarkPartitioned()
	sess, err = source.AcceptNext(ctx)
	require.NoError(t, err)
	_, err = sess.(sequencer.HoldingSession).Holding(ctx, []int64{1})
	require.ErrorIs(t, err, sequencer.ErrNoPeek)

	var mu sync.Mutex
	var handled []int64
	h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, m.Sequence)
		return nil
	})
	engine, err := sequencer.NewEngine(sequencer.EngineConfig{
		WindowMessages: sequencer.NoWindow, ReceiveBatch: 1, IdleTimeout: 300 * time.Millisecond, EarlyMessages: sequencer.EarlyStore,
	}, sequencer.EngineDeps{Store: memory.New(), Handler: h})
	require.NoError(t, err)
	out, err := engine.RunSession(ctx, sess, nil)
	require.NoError(t, err)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Equal(t, []int64{1, 2, 3}, handled)
	require.Zero(t, engine.Stats().BrokerCalls["defer"])
	require.Zero(t, engine.Stats().BrokerCalls["receive_deferred"])
	require.EqualValues(t, 2, engine.Stats().HeldInStore)
}
