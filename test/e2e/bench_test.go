package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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
	seqworker "github.com/seqbus/seqbus/worker"
)

// The shape of one cell: benchSessions sessions of benchMessages each, benchConcurrency
// sessions at a time for the plain consumer and the worker alike. SEQBUS_BENCH_SESSIONS and
// SEQBUS_BENCH_MESSAGES override the first two: the default makes a cell last about half a
// second here, long enough for one cell's ratio to mean something on a shared machine (20
// sessions, 0.1–0.3 s, swung by tens of percent between runs).
const benchConcurrency = 8

var (
	benchSessions = envCount("SEQBUS_BENCH_SESSIONS", 100)
	benchMessages = envCount("SEQBUS_BENCH_MESSAGES", 100)
)

// envCount is the positive number (at most 100,000) in the environment variable name, or def.
func envCount(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100_000 {
		panic(fmt.Sprintf("%s: want a number from 1 to 100000, got %q", name, v))
	}
	return n
}

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
	newBatch := func() *azservicebus.MessageBatch {
		batch, err := sender.NewMessageBatch(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		return batch
	}
	send := func(batch *azservicebus.MessageBatch) {
		if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	for s := range benchSessions {
		batch := newBatch()
		sid := fmt.Sprintf("s-%05d", s)
		for i := 1; i <= benchMessages; i++ {
			seq := int64(i)
			if reversed {
				seq = int64(benchMessages + 1 - i)
			}
			mid := sid + "/" + strconv.FormatInt(seq, 10)
			m := &azservicebus.Message{
				SessionID: &sid, MessageID: &mid, Body: fmt.Appendf(nil, `{"step":%d}`, seq),
				ApplicationProperties: map[string]any{"Sequence": seq, "IsLast": seq == int64(benchMessages)},
			}
			err := batch.AddMessage(m, nil)
			if errors.Is(err, azservicebus.ErrMessageTooLarge) && batch.NumMessages() > 0 {
				send(batch) // a long session takes more than one batch
				batch = newBatch()
				err = batch.AddMessage(m, nil)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		send(batch)
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
		expect[fmt.Sprintf("s-%05d", s)] = benchMessages
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

// workerConsumeWith runs the worker's pipeline in-process (sbadapter Source → sequencer.Runner
// with store and cfg on top of the benchmark's own settings) until every message was handled in
// order, and returns the time it took and the runner's stats.
func (e *benchEnv) workerConsumeWith(b *testing.B, queue string, store sequencer.StateStore, cfg sequencer.EngineConfig) (time.Duration, sequencer.Stats) {
	b.Helper()
	total := int64(benchSessions * benchMessages)
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
	if st.Handled != uint64(total) || st.DeadLettered != 0 {
		b.Fatalf("worker: handled %d of %d, %d dead-lettered", st.Handled, total, st.DeadLettered)
	}
	return elapsed, st
}

// benchVariant is one way of consuming a queue that a benchmark compares with the plain consumer.
type benchVariant struct {
	name     string
	reversed bool // the sessions are published in reverse order
	run      func(b *testing.B, queue string) (time.Duration, sequencer.Stats)
	// db is the pool of the variant's state store, whose server's CPU is measured with the
	// phases' (cpuMeter); nil for a store that is not Postgres.
	db *pgxpool.Pool
	// optIn: the variant runs only when SEQBUS_BENCH_VARIANTS names it.
	optIn bool
}

// pairTotals is what comparePairs measured for one variant over every iteration.
type pairTotals struct {
	plain, worker     time.Duration
	plainCalls, calls uint64
	storeCalls        uint64
	minRatio          float64
	ratios            []float64
	// The CPU the phases used (cpuMeter): this process's in each, the database server's in the
	// worker's.
	plainCPU, workerCPU, dbCPU time.Duration
}

// ratio is the plain consumer's time over the variant's, over every iteration.
func (t *pairTotals) ratio() float64 { return t.plain.Seconds() / t.worker.Seconds() }

// reportCPU reports, per message of msgs, the CPU in microseconds that the worker's phases
// (prefix+"cpu_us/msg") and the plain consumer's (prefix+"plain_cpu_us/msg") used in this
// process, emulator and client setup included, and the database server's in the worker's
// phases (prefix+"db_cpu_us/msg"), each when it could be read.
func (t *pairTotals) reportCPU(b *testing.B, msgs float64, prefix string) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / msgs }
	if t.workerCPU > 0 && t.plainCPU > 0 {
		b.ReportMetric(us(t.workerCPU), prefix+"cpu_us/msg")
		b.ReportMetric(us(t.plainCPU), prefix+"plain_cpu_us/msg")
	}
	if t.dbCPU > 0 {
		b.ReportMetric(us(t.dbCPU), prefix+"db_cpu_us/msg")
	}
}

// comparePairs runs, in each iteration of b, every variant against a plain consumer run of its
// own: a fresh queue for each, consumed one after the other, the plain consumer first in even
// iterations and second in odd ones, so that neither side gets the quieter moment of a drifting
// machine. Each pair's ratio is logged; its lowest is what "in every run" is measured against.
// SEQBUS_BENCH_VARIANTS (comma-separated names) runs only those variants; an opt-in variant
// runs only when it is named there.
func (e *benchEnv) comparePairs(b *testing.B, variants []benchVariant) map[string]*pairTotals {
	b.Helper()
	keep := strings.Split(os.Getenv("SEQBUS_BENCH_VARIANTS"), ",")
	variants = slices.DeleteFunc(slices.Clone(variants), func(v benchVariant) bool {
		named := slices.Contains(keep, v.name)
		return !named && (v.optIn || keep[0] != "")
	})
	out := make(map[string]*pairTotals, len(variants))
	for _, v := range variants {
		out[v.name] = &pairTotals{minRatio: math.Inf(1)}
	}
	iteration := 0
	for b.Loop() {
		for _, v := range variants {
			t := out[v.name]
			var plain, worker time.Duration
			var st sequencer.Stats
			meter := cpuMeter{pool: v.db}
			runPlain := func() {
				q := e.freshQueue(b, false)
				var calls uint64
				cpu := meter.phase(func() {
					labelled(v.name+"/plain", func() { plain, calls = e.plainConsume(b, q) })
				})
				t.plainCalls += calls
				t.plainCPU += cpu.proc
				e.drained(b, q)
			}
			runWorker := func() {
				q := e.freshQueue(b, v.reversed)
				cpu := meter.phase(func() { labelled(v.name, func() { worker, st = v.run(b, q) }) })
				t.workerCPU += cpu.proc
				t.dbCPU += cpu.db
				e.drained(b, q)
			}
			if iteration%2 == 0 {
				runPlain()
				runWorker()
			} else {
				runWorker()
				runPlain()
			}
			t.plain += plain
			t.worker += worker
			t.calls += st.TotalBrokerCalls()
			t.storeCalls += st.StoreCalls
			r := plain.Seconds() / worker.Seconds()
			t.ratios = append(t.ratios, r)
			t.minRatio = min(t.minRatio, r)
		}
		iteration++
	}
	for _, v := range variants {
		t := out[v.name]
		b.Logf("%s: worker/plain per iteration %s (plain %s, worker %s in all)", v.name, fmtRatios(t.ratios),
			t.plain.Round(time.Millisecond), t.worker.Round(time.Millisecond))
	}
	return out
}

// labelled runs fn with the pprof label cell=name, which the goroutines it starts (the
// consumer's, its client's) inherit: a CPU profile of a benchmark tells its cells apart.
func labelled(name string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("cell", name), func(context.Context) { fn() })
}

func fmtRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.FormatFloat(r, 'f', 2, 64)
	}
	return strings.Join(parts, ", ")
}

// engineConfig is the engine's configuration with pipelined runs (the worker's
// SEQBUS_PIPELINE_RUNS) and one save each (SEQBUS_SAVE_EACH_MESSAGE) as given.
func engineConfig(pipelined, saveEach bool) sequencer.EngineConfig {
	cfg := sequencer.EngineConfig{SaveEachMessage: saveEach}
	if !pipelined {
		cfg.Pipelining = sequencer.Awaited
	}
	return cfg
}

// BenchmarkWorkerVsPlainConsumer measures, on one in-process emulator and in the same run, the
// throughput of benchSessions sessions × benchMessages messages through a plain pipelined SDK
// session consumer (plainConsume) and through the worker's pipeline (Runner + sbadapter +
// Service Bus session-state store): in order with the worker's default (pipelined runs,
// EngineConfig.Pipelining), in order with each completion awaited (SEQBUS_PIPELINE_RUNS=false),
// fully reversed, in order with the exact position saved before each completion
// (EngineConfig.SaveEachMessage, its saves in the background with the default and awaited in
// save_each_awaited; fully reversed sessions always save each message, their broker order being
// the opposite of theirs), and in order with the in-memory store (no state writes). Each variant
// is paired with a plain consumer run of its own (comparePairs). Metrics: msgs/s of each, the
// worker/plain ratios over all iterations (…_ratio) and the lowest of one iteration
// (…_min_ratio), and broker calls per message (session and source calls; the state calls, which
// the Service Bus store also makes to the broker, separately).
func BenchmarkWorkerVsPlainConsumer(b *testing.B) {
	e := newBenchEnv(b)
	store := sbstate.New(nil)
	worker := func(cfg sequencer.EngineConfig, store func() sequencer.StateStore) func(*testing.B, string) (time.Duration, sequencer.Stats) {
		return func(b *testing.B, q string) (time.Duration, sequencer.Stats) {
			return e.workerConsumeWith(b, q, store(), cfg)
		}
	}
	sb := func() sequencer.StateStore { return store }
	// The worker's default: entries of recorded runs completed in the background.
	pipelined := seqworker.DefaultConfig().PipelineRuns
	res := e.comparePairs(b, []benchVariant{
		{name: "inorder", run: worker(engineConfig(pipelined, false), sb)},
		// Each completion awaited before the next handler call (SEQBUS_PIPELINE_RUNS=false): the
		// one-message window's price.
		{name: "awaited", run: worker(engineConfig(false, false), sb)},
		{name: "reversed", reversed: true, run: worker(engineConfig(pipelined, false), sb)},
		// The exact position saved before each completion (SEQBUS_SAVE_EACH_MESSAGE), with the
		// worker's default the saves in the background; then each save awaited.
		{name: "save_each", run: worker(engineConfig(pipelined, true), sb)},
		{name: "save_each_awaited", run: worker(engineConfig(false, true), sb)},
		// The same pipeline with the in-memory store: what the state writes cost.
		{name: "memstore", run: worker(engineConfig(pipelined, false), func() sequencer.StateStore { return memstore.New() })},
	})
	msgs := float64(b.N * benchSessions * benchMessages)
	for name, t := range res {
		b.ReportMetric(msgs/t.worker.Seconds(), name+"_msgs/s")
		b.ReportMetric(msgs/t.plain.Seconds(), name+"_plain_msgs/s")
		b.ReportMetric(t.ratio(), name+"_ratio")
		b.ReportMetric(t.minRatio, name+"_min_ratio")
		t.reportCPU(b, msgs, name+"_")
		if name == "inorder" || name == "awaited" || name == "reversed" {
			b.ReportMetric(float64(t.calls)/msgs, name+"_calls/msg")
			b.ReportMetric(float64(t.storeCalls)/msgs, name+"_state_calls/msg")
		}
		if name == "inorder" {
			b.ReportMetric(float64(t.plainCalls)/msgs, "plain_calls/msg")
		}
	}
}

// BenchmarkWorkerPostgresStore is the worker's pipeline with the Postgres state store (in-order
// sessions), paired with the plain consumer as in BenchmarkWorkerVsPlainConsumer: msgs/s, the
// ratios to the plain consumer, the CPU a message took (reportCPU, the database server's
// included), state store calls (loads, saves, deletes) per second, and what a save and a load
// took during the cell (save_p50_ms, save_p90_ms, load_p50_ms). The store alone is measured by
// sessionstate/postgres BenchmarkTransition and BenchmarkTransitionParallel.
//
// Two opt-in variants (SEQBUS_BENCH_VARIANTS=postgres,floor2,floor3) bound what the store's
// writes cost the cell: the same worker and Postgres store behind floorStore, which sends a
// session's load and its final save (floor2), and also its first save, awaited before the first
// handler call (floor3), and keeps the others in memory. They are unsafe and measure only:
// floor2 is the least a session's state costs, read once and its end written once.
func BenchmarkWorkerPostgresStore(b *testing.B) {
	e := newBenchEnv(b)
	pool := pgtest.NewPool(b, &pgtest.Options{MaxConns: benchConcurrency + 2, Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})
	cfg := engineConfig(seqworker.DefaultConfig().PipelineRuns, false)
	variant := func(name string, wrap func(sequencer.StateStore) sequencer.StateStore) benchVariant {
		return benchVariant{name: name, db: pool, optIn: name != "postgres", run: func(b *testing.B, q string) (time.Duration, sequencer.Stats) {
			store, err := postgres.New(pool, &postgres.Config{Entity: q})
			if err != nil {
				b.Fatal(err)
			}
			return e.workerConsumeWith(b, q, wrap(store), cfg)
		}}
	}
	timed := &timedStore{}
	res := e.comparePairs(b, []benchVariant{
		variant("postgres", func(s sequencer.StateStore) sequencer.StateStore { timed.StateStore = s; return timed }),
		variant("floor2", func(s sequencer.StateStore) sequencer.StateStore { return &floorStore{StateStore: s} }),
		variant("floor3", func(s sequencer.StateStore) sequencer.StateStore { return &floorStore{StateStore: s, first: true} }),
	})
	msgs := float64(b.N * benchSessions * benchMessages)
	for _, name := range []string{"floor2", "floor3"} {
		if t, ok := res[name]; ok {
			b.ReportMetric(t.ratio(), name+"_ratio")
			b.ReportMetric(t.minRatio, name+"_min_ratio")
			t.reportCPU(b, msgs, name+"_")
		}
	}
	t, ok := res["postgres"]
	if !ok {
		return
	}
	b.ReportMetric(msgs/t.worker.Seconds(), "msgs/s")
	b.ReportMetric(msgs/t.plain.Seconds(), "plain_msgs/s")
	b.ReportMetric(t.ratio(), "ratio")
	b.ReportMetric(t.minRatio, "min_ratio")
	t.reportCPU(b, msgs, "")
	b.ReportMetric(float64(t.storeCalls)/t.worker.Seconds(), "store_calls/s")
	// What a store round trip takes during the cell: a run waits for one save (the record of its
	// first run, or its claim) before its first handler call, which the plain consumer does not.
	b.ReportMetric(ms(timed.saves, 0.5), "save_p50_ms")
	b.ReportMetric(ms(timed.saves, 0.9), "save_p90_ms")
	b.ReportMetric(ms(timed.loads, 0.5), "load_p50_ms")
}
