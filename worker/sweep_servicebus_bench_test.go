package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// BenchmarkSweepRead measures how fast the sweeper's Watch reads the states of changed sessions
// with Service Bus session state (each a lock, a state read and a release: a session receiver
// the SDK opens with a claim for the entity and one for its management link, both taken under
// one lock per client), on the in-process emulator holding 100,000 ended sessions, 2,000 of them
// changed (one sweep's ReadPerSweep). Side by side: the worker's Concurrency (16) and 64, on one
// scan client (the worker's) and spread over 4 (each with a connection and a claim lock of its
// own). It reports sessions read per second.
//
//	go test -run '^$' -bench SweepRead -benchtime 3x ./worker/
func BenchmarkSweepRead(b *testing.B) {
	const total, changed = 100_000, 2_000
	ctx := context.Background()
	srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
		benchQueue: {RequiresSession: true, LockDuration: 30 * time.Second},
	}})
	e, err := srv.Broker().Lookup(benchQueue)
	require.NoError(b, err)
	store := sbstate.New(nil)
	st := sequencer.NewState()
	st.Next, st.Last, st.EndedAt = 4, 3, time.Now()
	for i := range total {
		l, err := e.AcceptNamedSession(benchSession(i), "bench")
		require.NoError(b, err)
		_, err = store.Save(ctx, sequencer.SaveParams{Session: brokerStateSession{id: benchSession(i), lock: l}, State: st})
		l.Release()
		require.NoError(b, err)
	}
	ids := make([]string, 0, changed)
	for i := range changed {
		ids = append(ids, benchSession(i*(total/changed)))
	}
	// The first sweep of a Watch lists every session with state (zero time): none, so that
	// the next lists what changed.
	listChanged := func(_ context.Context, after time.Time) ([]string, error) {
		if after.IsZero() {
			return nil, nil
		}
		return ids, nil
	}
	for _, clients := range []int{1, 4} {
		src := &spreadSource{}
		for range clients {
			c, err := sbadapter.NewClientFromConnectionString(srv.ConnectionString(), nil)
			require.NoError(b, err)
			b.Cleanup(func() { _ = c.Close(context.WithoutCancel(ctx)) })
			s, err := sbadapter.NewSource(c, sbadapter.Config{Entity: sbadapter.Entity{Queue: benchQueue}})
			require.NoError(b, err)
			src.sources = append(src.sources, s)
		}
		for _, concurrency := range []int{scanConcurrency, 64} {
			b.Run(fmt.Sprintf("clients=%d/concurrency=%d", clients, concurrency), func(b *testing.B) {
				var read int
				start := time.Now()
				for b.Loop() {
					w := sessionstate.NewWatch(sessionstate.WatchConfig{ChangedIDs: listChanged, Source: src, Store: store,
						Concurrency: concurrency, ReadPerSweep: changed})
					_, _, err := w.Sweep(ctx, time.Now())
					require.NoError(b, err)
					_, stats, err := w.Sweep(ctx, time.Now())
					require.NoError(b, err)
					require.Equal(b, changed, stats.Read)
					read += stats.Read
				}
				b.ReportMetric(float64(read)/time.Since(start).Seconds(), "sessions/s")
			})
		}
	}
}

// spreadSource locks sessions on its sources in turn.
type spreadSource struct {
	sources []*sbadapter.Source
	n       atomic.Uint64
}

func (s *spreadSource) AcceptNext(ctx context.Context) (sequencer.Session, error) {
	return s.sources[0].AcceptNext(ctx)
}

func (s *spreadSource) Accept(ctx context.Context, id string) (sequencer.Session, error) {
	return s.sources[s.n.Add(1)%uint64(len(s.sources))].Accept(ctx, id)
}

// brokerStateSession writes a session's state straight into the emulator's broker (seeding).
type brokerStateSession struct {
	sequencer.Session
	id   string
	lock *broker.SessionLock
}

func (s brokerStateSession) ID() string                                 { return s.id }
func (s brokerStateSession) GetState(context.Context) ([]byte, error)   { return s.lock.State() }
func (s brokerStateSession) SetState(_ context.Context, b []byte) error { return s.lock.SetState(b) }
