package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/bench"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	memstore "github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

const (
	benchSessions    = 20
	benchMessages    = 100
	benchConcurrency = 8
)

// benchEnv is one emulator shared by every variant of a benchmark run. Publishing and each
// consumer use a connection of their own, as separate processes would.
type benchEnv struct {
	srv    *emulatortest.Server
	queues int
}

// newClient opens a client (one AMQP connection), closed when the benchmark ends.
func (e *benchEnv) newClient(b *testing.B) *azservicebus.Client {
	b.Helper()
	return e.srv.NewClient(b, nil)
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	return &benchEnv{srv: emulatortest.Start(b, nil)}
}

// freshQueue creates a new session-enabled queue and publishes benchSessions × benchMessages to
// it, each session's sequences ascending or descending.
func (e *benchEnv) freshQueue(b *testing.B, reversed bool) string {
	b.Helper()
	e.queues++
	name := fmt.Sprintf("bench-%d", e.queues)
	if err := e.srv.Broker().CreateQueue(name, broker.EntityProperties{RequiresSession: true, LockDuration: 30 * time.Second}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := e.newClient(b)
	defer client.Close(ctx)
	sender, err := client.NewSender(name, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sender.Close(ctx)
	for s := range benchSessions {
		batch, err := sender.NewMessageBatch(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		sid := fmt.Sprintf("s-%03d", s)
		for i := 1; i <= benchMessages; i++ {
			seq := int64(i)
			if reversed {
				seq = int64(benchMessages + 1 - i)
			}
			mid := sid + "/" + strconv.FormatInt(seq, 10)
			if err := batch.AddMessage(&azservicebus.Message{
				SessionID: &sid, MessageID: &mid, Body: fmt.Appendf(nil, `{"step":%d}`, seq),
				ApplicationProperties: map[string]any{"Sequence": seq, "IsLast": seq == benchMessages},
			}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	return name
}

// drained fails the benchmark unless queue is empty.
func (e *benchEnv) drained(b *testing.B, queue string) {
	b.Helper()
	info, err := e.srv.Broker().GetQueue(queue)
	if err != nil {
		b.Fatal(err)
	}
	if info.Counts.Total != 0 {
		b.Fatalf("queue %s not drained: %+v", queue, info.Counts)
	}
}

// plainConsume is the baseline: bench.PlainConsumer (the cmd/bench matrix's), benchConcurrency
// sessions at once on one connection, each receiving its next batch while up to 16 completions
// are in flight; no sequencing and no state. It returns the time to consume the queue and the
// broker calls made.
func (e *benchEnv) plainConsume(b *testing.B, queue string) (time.Duration, uint64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	expect := make(map[string]int, benchSessions)
	for s := range benchSessions {
		expect[fmt.Sprintf("s-%03d", s)] = benchMessages
	}
	p := &bench.PlainConsumer{
		Clients: []*azservicebus.Client{e.newClient(b)}, SessionsPerClient: benchConcurrency,
		Entity: sbadapter.Entity{Queue: queue}, Expect: expect,
	}
	start := time.Now()
	st, err := p.Run(ctx)
	elapsed := time.Since(start)
	if err != nil {
		b.Fatalf("plain consumer: %d of %d messages: %v", st.Completed, benchSessions*benchMessages, err)
	}
	return elapsed, st.BrokerCalls
}

// workerConsume runs the worker's pipeline in-process (sbadapter Source → sequencer.Runner with
// store) until every message was handled in order, and returns the time it took and the runner's
// stats.
func (e *benchEnv) workerConsume(b *testing.B, queue string, store sequencer.StateStore) (time.Duration, sequencer.Stats) {
	b.Helper()
	return e.workerConsumeWith(b, queue, store, sequencer.EngineConfig{})
}

// workerConsumeWith is workerConsume with engine settings on top of the benchmark's own.
func (e *benchEnv) workerConsumeWith(b *testing.B, queue string, store sequencer.StateStore, cfg sequencer.EngineConfig) (time.Duration, sequencer.Stats) {
	b.Helper()
	const total = benchSessions * benchMessages
	source, err := sbadapter.NewSource(e.srv.NewClient(b, sbadapter.ClientOptions(nil)), sbadapter.Config{Entity: sbadapter.Entity{Queue: queue}})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	next := make(map[string]int64, benchSessions)
	var mu sync.Mutex
	allDone := make(chan struct{})
	h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		mu.Lock()
		want := next[m.SessionID] + 1
		next[m.SessionID] = m.Sequence
		mu.Unlock()
		if m.Sequence != want {
			return fmt.Errorf("session %s: sequence %d handed over, want %d", m.SessionID, m.Sequence, want)
		}
		if handled.Add(1) == total {
			close(allDone)
		}
		return nil
	})
	cfg.IdleTimeout, cfg.Retry = time.Second, sequencer.RetryPolicy{Attempts: 1}
	runner, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source:                source,
		Store:                 store,
		Handler:               h,
		Engine:                cfg,
		MaxConcurrentSessions: benchConcurrency,
		AcceptTimeout:         time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := runner.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		_ = runner.StopAndCancel(context.Background())
		b.Fatalf("worker: %d of %d handled before the deadline", handled.Load(), total)
	}
	elapsed := time.Since(start)
	if err := runner.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	st := runner.Stats()
	if st.Handled != total || st.DeadLettered != 0 {
		b.Fatalf("worker: handled %d of %d, %d dead-lettered", st.Handled, total, st.DeadLettered)
	}
	return elapsed, st
}

// BenchmarkWorkerVsPlainConsumer measures, on one in-process emulator and in the same run, the
// throughput of 20 sessions × 100 messages through a plain pipelined SDK session consumer
// (plainConsume) and through the
// worker's pipeline (Runner + sbadapter + Service Bus session-state store) with each session
// published in order and fully reversed, in order with one state save per message
// (EngineConfig.SaveEachMessage, completions pipelined; fully reversed sessions always take that
// path, their broker order being the opposite of theirs), and in order with the in-memory store
// (no state writes: the cost of the pipeline alone). Metrics: msgs/s of each, the worker/plain
// ratios and broker calls per message (session and source calls; the state calls, which the
// Service Bus store also makes to the broker, separately).
func BenchmarkWorkerVsPlainConsumer(b *testing.B) {
	e := newBenchEnv(b)
	store := sbstate.New(nil)
	var plain, inOrder, reversed, memory, perMessage time.Duration
	var plainCalls, inOrderCalls, reversedCalls uint64
	// With the Service Bus store every state load, save and delete is a broker call too.
	var inOrderStore, reversedStore uint64
	for b.Loop() {
		q := e.freshQueue(b, false)
		d, calls := e.plainConsume(b, q)
		plain += d
		plainCalls += calls
		e.drained(b, q)

		q = e.freshQueue(b, false)
		d, st := e.workerConsume(b, q, store)
		inOrder += d
		inOrderCalls += st.TotalBrokerCalls()
		inOrderStore += st.StoreCalls
		e.drained(b, q)

		q = e.freshQueue(b, true)
		d, st = e.workerConsume(b, q, store)
		reversed += d
		reversedCalls += st.TotalBrokerCalls()
		reversedStore += st.StoreCalls
		e.drained(b, q)

		// One save per message in order: what recording runs saves.
		q = e.freshQueue(b, false)
		d, _ = e.workerConsumeWith(b, q, store, sequencer.EngineConfig{SaveEachMessage: true})
		perMessage += d
		e.drained(b, q)

		// The same pipeline with the in-memory store: what the state writes cost.
		q = e.freshQueue(b, false)
		d, _ = e.workerConsume(b, q, memstore.New())
		memory += d
		e.drained(b, q)
	}
	msgs := float64(b.N * benchSessions * benchMessages)
	b.ReportMetric(msgs/plain.Seconds(), "plain_msgs/s")
	b.ReportMetric(msgs/inOrder.Seconds(), "inorder_msgs/s")
	b.ReportMetric(msgs/reversed.Seconds(), "reversed_msgs/s")
	b.ReportMetric(plain.Seconds()/inOrder.Seconds(), "inorder_ratio")
	b.ReportMetric(plain.Seconds()/reversed.Seconds(), "reversed_ratio")
	b.ReportMetric(msgs/perMessage.Seconds(), "save_each_msgs/s")
	b.ReportMetric(plain.Seconds()/perMessage.Seconds(), "save_each_ratio")
	b.ReportMetric(msgs/memory.Seconds(), "memstore_msgs/s")
	b.ReportMetric(plain.Seconds()/memory.Seconds(), "memstore_ratio")
	b.ReportMetric(float64(plainCalls)/msgs, "plain_calls/msg")
	b.ReportMetric(float64(inOrderCalls)/msgs, "inorder_calls/msg")
	b.ReportMetric(float64(reversedCalls)/msgs, "reversed_calls/msg")
	b.ReportMetric(float64(inOrderStore)/msgs, "inorder_state_calls/msg")
	b.ReportMetric(float64(reversedStore)/msgs, "reversed_state_calls/msg")
}

// BenchmarkWorkerPostgresStore is the worker's pipeline with the Postgres state store (in-order
// sessions): msgs/s, the ratio to the plain consumer in the same run, and state store calls
// (loads, saves, deletes) per second. The store alone is measured by
// sessionstate/postgres BenchmarkTransition and BenchmarkTransitionParallel.
func BenchmarkWorkerPostgresStore(b *testing.B) {
	e := newBenchEnv(b)
	pool := pgtest.NewPool(b, &pgtest.Options{MaxConns: benchConcurrency + 2, Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})
	var elapsed, plain time.Duration
	var storeCalls uint64
	for b.Loop() {
		q := e.freshQueue(b, false)
		d, _ := e.plainConsume(b, q)
		plain += d
		e.drained(b, q)

		q = e.freshQueue(b, false)
		store, err := postgres.New(pool, &postgres.Config{Entity: q})
		if err != nil {
			b.Fatal(err)
		}
		d, st := e.workerConsume(b, q, store)
		elapsed += d
		storeCalls += st.StoreCalls
		e.drained(b, q)
	}
	msgs := float64(b.N * benchSessions * benchMessages)
	b.ReportMetric(msgs/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(msgs/plain.Seconds(), "plain_msgs/s")
	b.ReportMetric(plain.Seconds()/elapsed.Seconds(), "ratio")
	b.ReportMetric(float64(storeCalls)/elapsed.Seconds(), "store_calls/s")
}
