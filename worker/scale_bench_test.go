package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// BenchmarkScaleEvaluation measures one evaluation of the scaling signal (time per op, and broker
// calls per op) on the in-process emulator, with N sessions, side by side for both state stores
// and these shapes:
//
//   - fresh: each session holds one message and none has state yet (a burst): the listing
//     alone decides.
//   - tenth-stated: as fresh, but a tenth of the sessions have state that leaves them in doubt
//     (Postgres: on a gap; Service Bus: in progress), so each of those is locked and peeked
//     (and, with Service Bus, its state read).
//   - tenth-ended: as fresh, but a tenth of the sessions are tombstones that received a late
//     copy: the Postgres store rules them out by the query; the Service Bus store reads each
//     once, and after that only lists the states changed since the last evaluation.
//   - idle-ended: every session ended (a tombstone) and no message waits, as between bursts.
//
// Each shape runs twice: "counts", as the worker evaluates (the entity's message counts first:
// none, and nothing is listed), and "listing", without them (as when the credentials may not
// read the counts, and as before they were read). Each op is an evaluation after a first one
// (not timed): the steady state. States are written into the emulator's sessions directly, in
// the encoding of the state store, so that 100,000 tombstones take seconds.
//
//	go test -run '^$' -bench ScaleEvaluation -benchtime 3x ./worker/
func BenchmarkScaleEvaluation(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		for _, shape := range []string{"fresh", "tenth-stated", "tenth-ended", "idle-ended"} {
			for _, store := range []string{"servicebus", "postgres"} {
				for _, mode := range []string{"counts", "listing"} {
					b.Run(fmt.Sprintf("sessions=%d/%s/%s/%s", n, shape, store, mode), func(b *testing.B) {
						benchScale(b, n, shape, store, mode == "counts")
					})
				}
			}
		}
	}
}

func benchScale(b *testing.B, n int, shape, store string, counts bool) {
	ctx := context.Background()
	srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
		benchQueue: {RequiresSession: true, LockDuration: 30 * time.Second},
	}})
	if shape != "idle-ended" {
		benchPublish(b, srv.Client, n)
	}

	cfg := DefaultConfig()
	cfg.ConnectionString, cfg.Entity, cfg.HTTPAddr = srv.ConnectionString(), sbadapter.Entity{Queue: benchQueue}, HTTPOff
	cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	if store == "postgres" {
		pool, _ := pgtest.NewPoolWithSchema(b, &pgtest.Options{Setup: func(ctx context.Context, p *pgxpool.Pool) error {
			_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
			return err
		}})
		cfg.StateStore, cfg.Pool = StateStorePostgres, pool
	}
	cfg = cfg.withDefaults()
	conn, err := Connect(ctx, cfg)
	require.NoError(b, err)
	defer conn.Close(ctx)

	stated, want := 0, n
	st := sequencer.NewState()
	st.Next = 1
	switch {
	case shape == "fresh":
	case shape == "idle-ended":
		stated, want = n, 0
		st.EndedAt = time.Now()
	case shape == "tenth-ended":
		stated, want = n/10, n-n/10
		st.EndedAt = time.Now()
	case store == "postgres":
		stated = n / 10
		st.GapSince, st.Deferred[3] = time.Now(), 1<<40 // a gap: the session is peeked
	default:
		stated = n / 10
	}
	e, err := srv.Broker().Lookup(benchQueue)
	require.NoError(b, err)
	for i := range stated {
		id := benchSession(i)
		var sess sequencer.Session = storetest.NewSession(id)
		if store == "servicebus" {
			l, err := e.AcceptNamedSession(id, "bench")
			require.NoError(b, err)
			sess = lockedState{Session: sess, l: l}
			defer l.Release()
		}
		_, err := conn.Store.Save(ctx, sequencer.SaveParams{Session: sess, State: st})
		require.NoError(b, err)
		if l, ok := sess.(lockedState); ok {
			l.l.Release()
		}
	}

	if !counts {
		conn.Admin = nil
	}
	reg := prometheus.NewRegistry()
	s, err := newScaleSignal(cfg, conn, reg, nil)
	require.NoError(b, err)
	calls := func() float64 {
		sum := 0.0
		for _, op := range []string{"runtime_properties", "list_sessions", "accept", "get_state", "peek", "close"} {
			sum += testutil.ToFloat64(s.m.calls.WithLabelValues(op))
		}
		return sum
	}
	if stated > 0 && store == "servicebus" {
		// States changed within stateMargin of an evaluation's start are read again by the next:
		// let them age past it, as a tombstone does in the hours it is kept.
		time.Sleep(stateMargin + time.Second)
	}
	got, err := s.count(ctx) // the first evaluation, not timed
	require.NoError(b, err)
	require.Equal(b, want, got, "every session but a tombstone holds an active message")
	first := calls()
	b.ResetTimer()
	for range b.N {
		got, err := s.count(ctx)
		require.NoError(b, err)
		require.Equal(b, want, got)
	}
	b.StopTimer()
	b.ReportMetric((calls()-first)/float64(b.N), "calls/op")
	b.ReportMetric(first, "first-calls")
}

// lockedState is a session whose Service Bus session state is read and written straight in the
// emulator's broker, under a lock taken there: the state store encodes it as it does for the SDK.
type lockedState struct {
	sequencer.Session
	l *broker.SessionLock
}

func (s lockedState) GetState(context.Context) ([]byte, error)   { return s.l.State() }
func (s lockedState) SetState(_ context.Context, b []byte) error { return s.l.SetState(b) }

// benchQueue is the benchmark's session-enabled queue.
const benchQueue = "orders"

func benchSession(i int) string { return fmt.Sprintf("s%06d", i) }

// benchPublish sends one message to each of n sessions, in batches.
func benchPublish(b *testing.B, client *azservicebus.Client, n int) {
	b.Helper()
	ctx := context.Background()
	sender, err := client.NewSender(benchQueue, nil)
	require.NoError(b, err)
	defer sender.Close(ctx)
	batch, err := sender.NewMessageBatch(ctx, nil)
	require.NoError(b, err)
	for i := range n {
		sid := benchSession(i)
		m := &azservicebus.Message{SessionID: &sid, Body: []byte("x"), ApplicationProperties: map[string]any{"Sequence": int64(1)}}
		if err := batch.AddMessage(m, nil); err != nil {
			require.NoError(b, sender.SendMessageBatch(ctx, batch, nil))
			batch, err = sender.NewMessageBatch(ctx, nil)
			require.NoError(b, err)
			require.NoError(b, batch.AddMessage(m, nil))
		}
	}
	require.NoError(b, sender.SendMessageBatch(ctx, batch, nil))
}
