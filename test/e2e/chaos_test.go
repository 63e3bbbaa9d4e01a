package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/tcpproxy"
	"github.com/seqbus/seqbus/sequencer"
)

var (
	chaosLong = flag.Bool("chaos.long", false,
		"run TestChaos with the long preset: 1,500 sessions × 40 messages, 3 workers, a SIGKILL every 3 s and a cut every 5 s for 60 s")
	chaosSeed    = flag.Uint64("chaos.seed", 0, "seed of TestChaos's plan, kills and handler failures (0: a random seed, logged)")
	chaosLatency = flag.Duration("chaos.latency", 0, "TestChaos's handler time per call instead of the preset's (a fast handler runs further ahead of the saves and completions)")
)

// chaosPreset is the shape of one chaos run.
type chaosPreset struct {
	name string
	// sessions × messages are published, shuffled within each session, with duplicates extra
	// copies of random sequences per session and garbage messages without a valid sequence.
	sessions, messages, duplicates, garbage int
	// replicas worker processes run at once, each with maxSessions concurrent sessions.
	replicas, maxSessions int
	// latency is the handler's time per call; failRate the share of calls answered 503, at most
	// maxFails times per message.
	latency  time.Duration
	failRate float64
	maxFails int
	// For faultsFor, a random replica is SIGKILLed (and a replacement started) every killEvery,
	// and every connection between the workers and the emulator is cut every cutEvery.
	killEvery, cutEvery, faultsFor time.Duration
	// finishWithin bounds the wait, after the faults, for every session to end by itself.
	finishWithin time.Duration
	// sweepInterval is SEQBUS_SWEEP_INTERVAL.
	sweepInterval time.Duration
}

var (
	// chaosShort runs in the test suite: many sessions, few messages each, ten seconds of faults.
	chaosShort = chaosPreset{
		name: "short", sessions: 1000, messages: 3, duplicates: 1, garbage: 5,
		replicas: 3, maxSessions: 8, latency: 2 * time.Millisecond, failRate: 0.02, maxFails: 2,
		killEvery: 2 * time.Second, cutEvery: 3 * time.Second, faultsFor: 10 * time.Second,
		finishWithin: 3 * time.Minute, sweepInterval: 5 * time.Second,
	}
	// chaosLongPreset is a long run of many sessions with duplicates and garbage, behind -chaos.long.
	chaosLongPreset = chaosPreset{
		name: "long", sessions: 1500, messages: 40, duplicates: 4, garbage: 15,
		replicas: 3, maxSessions: 8, latency: 20 * time.Millisecond, failRate: 0.02, maxFails: 2,
		killEvery: 3 * time.Second, cutEvery: 5 * time.Second, faultsFor: 60 * time.Second,
		finishWithin: 10 * time.Minute, sweepInterval: 10 * time.Second,
	}
)

// TestChaos runs worker replicas through a TCP proxy that cuts every connection again and again,
// SIGKILLs a random replica every few seconds and starts a replacement, with a handler that fails
// transiently; then the faults stop and the run must finish by itself. Checked with each state
// store, each with pipelined runs (SEQBUS_PIPELINE_RUNS) and without, and with the Service Bus
// store saving each message (SEQBUS_SAVE_EACH_MESSAGE, its saves in the background), and with the
// Postgres store holding early messages on a partitioned queue (SEQBUS_EARLY_MESSAGES=store,
// postgres-store: messages were held, none was ever deferred or fetched back, and at the end no
// row is left in the store): every sequence
// of every session handled (nothing lost), no handler call out of order (a call for a session's
// sequence is either the next one or part of a replay: the sequences handled last, handed over
// again in their order, as many as the documented at-least-once window allows, one message by
// default and sequencer.EngineConfig.ReplayWindow with pipelined runs; counted), every late copy
// of an ended session dropped, the queue drained, and the dead-letter queue holding exactly the
// garbage published.
//
//	go test ./test/e2e -run TestChaos -v                                   # the short preset
//	go test ./test/e2e -run TestChaos/servicebus -chaos.long -count 10 -v  # the long preset
//	go test ./test/e2e -run TestChaos/servicebus-save-each -chaos.long -chaos.latency 1ms -v  # far ahead
//	go test ./test/e2e -run 'TestChaos/postgres-store' -chaos.long -count 3 -v -timeout 40m  # early messages in the store
func TestChaos(t *testing.T) {
	t.Parallel()
	preset := chaosShort
	if *chaosLong {
		preset = chaosLongPreset
	}
	if *chaosLatency > 0 {
		preset.latency = *chaosLatency
	}
	var variants []chaosVariant
	for _, store := range stores {
		variants = append(variants, chaosVariant{name: store + "-pipelined", store: store, pipelined: true}, chaosVariant{name: store, store: store})
	}
	variants = append(variants, chaosVariant{name: "servicebus-save-each", store: "servicebus", pipelined: true, saveEach: true},
		chaosVariant{name: "postgres-store", store: "postgres", pipelined: true, earlyStore: true})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if !*chaosLong {
				t.Parallel()
			}
			runChaos(t, v, preset)
		})
	}
}

// chaosVariant is the worker configuration of one TestChaos variant.
type chaosVariant struct {
	name, store string
	// pipelined is SEQBUS_PIPELINE_RUNS, saveEach SEQBUS_SAVE_EACH_MESSAGE.
	pipelined, saveEach bool
	// earlyStore runs on a partitioned queue (whose broker refuses the fetch of deferred
	// messages) with SEQBUS_EARLY_MESSAGES=store and a reorder window of one message, so that
	// early messages are held in the store.
	earlyStore bool
}

func runChaos(t *testing.T, v chaosVariant, p chaosPreset) {
	store, pipelined := v.store, v.pipelined
	seed := *chaosSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("chaos %s, store %s, pipelined runs %t, save each %t, early messages in the store %t, seed %d (-chaos.seed to repeat)",
		p.name, store, pipelined, v.saveEach, v.earlyStore, seed)
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))

	f := newFixture(t)
	var early []string
	if v.earlyStore {
		f = newFixtureRule(t, partitioned, broker.SessionIDOnPartitioned)
		// One message a receive and no window: every early message is held in the store.
		early = []string{"SEQBUS_EARLY_MESSAGES=store", "SEQBUS_REORDER_WINDOW=0", "SEQBUS_PREFETCH=1"}
	}
	px, err := tcpproxy.Start(f.srv.AMQPAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })

	h := newChaosHandler(p, engineConfig(pipelined, v.saveEach).ReplayWindow(), rng.Uint64())
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	var pool *pgxpool.Pool
	stEnv := storeEnv
	if v.earlyStore {
		stEnv = func(t *testing.T, _ string) []string {
			var env []string
			pool, env = postgresEnv(t)
			return env
		}
	}
	env := f.baseEnv(append(stEnv(t, store),
		"SEQBUS_PIPELINE_RUNS="+strconv.FormatBool(pipelined),
		"SEQBUS_SAVE_EACH_MESSAGE="+strconv.FormatBool(v.saveEach),
		"SEQBUS_CONNECTION_STRING="+strings.Replace(f.srv.ConnectionString(), f.srv.AMQPAddr(), px.Addr(), 1),
		"SEQBUS_HANDLER=http",
		"SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_MAX_CONCURRENT_SESSIONS="+strconv.Itoa(p.maxSessions),
		"SEQBUS_SWEEP_INTERVAL="+p.sweepInterval.String(),
		"SEQBUS_LOG_LEVEL=info", // "worker: running" tells the test a process has taken its signals
	)...)
	env = append(env, early...)
	var procs []*proc
	// Each process calls the handler under a path of its own, so that a violation can say
	// which processes' calls interleaved.
	start := func(name string) *proc {
		p := startWorker(t, name, append(slices.Clip(env), "SEQBUS_HANDLER_URL="+hs.URL+"/"+name))
		procs = append(procs, p)
		return p
	}
	live := make([]*proc, p.replicas)
	for i := range live {
		live[i] = start(fmt.Sprintf("worker-%d", i))
	}

	plan := demo.Plan(p.sessions, p.messages, p.duplicates, seed)
	began := time.Now()
	h.mu.Lock()
	h.began = began // the handler's times count from here
	h.mu.Unlock()
	f.publish(t, plan)
	publishGarbage(t, f, p.garbage)

	cuts, maxHeld := 0, 0
	kills := injectFaults(t, rng, live, start, p.killEvery, p.cutEvery, p.faultsFor, func() {
		px.Cut()
		cuts++
		if pool != nil {
			maxHeld = max(maxHeld, heldRows(t, pool))
		}
	})
	faultsEnd := time.Since(began)

	// The run must finish by itself: every session handled to its end and the queue drained.
	ids := sessionIDs(p.sessions)
	finished := func() bool {
		c := f.counts(t)
		return h.ended(ids, int64(p.messages)) && c.Active == 0 && c.DeadLetter >= int64(p.garbage)
	}
	waitFor(t, p.finishWithin, finished, func() string {
		return fmt.Sprintf("%s; queue %+v; first messages left: %s; runs ended by the broker's refusal on a partitioned entity: %d receive deferred, %d peek",
			h.progress(ids, int64(p.messages)), f.counts(t), f.peek(t),
			countLogLines(procs, "receive deferred session"), countLogLines(procs, "peek session"))
	})
	took := time.Since(began)
	heldInStore := 0.0 // by the workers alive at the end
	for _, w := range live {
		if v.earlyStore {
			fams := scrape(t, w.httpAddr(t))
			heldInStore += metricValue(fams, "seqbus_messages_total", map[string]string{"outcome": "held_in_store"})
			for _, op := range []string{"defer", "receive_deferred"} {
				require.LessOrEqual(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": op}), 0.0, "%s: broker calls %s", w.name, op)
			}
		}
		w.stop(t)
	}

	s := h.summary()
	// late_entries: entries of inherited run records the SDK delivered after a later message (see
	// sequencer.HoldingSession), which broker order alone would have taken as handled.
	t.Logf("chaos summary: preset=%s latency=%s store=%s pipelined=%t save_each=%t seed=%d kills=%d cuts=%d calls=%d handled=%d failed=%d repeats=%d longest_replay=%d violations=%d late_entries=%d dead_lettered=%d faults=%s total=%s",
		p.name, p.latency, store, pipelined, v.saveEach, seed, kills, cuts, s.calls, s.handled, s.failed, s.repeats, s.longestReplay, len(s.violations),
		countLogLines(procs, "delivered after a later message"), f.counts(t).DeadLetter, faultsEnd.Round(time.Second), took.Round(time.Second))
	if len(s.violations) > 0 {
		logViolations(t, h, s.violations, procs)
	}
	require.Empty(t, s.violations, "handler calls out of order")
	require.Equal(t, p.sessions*p.messages, s.handled, "every sequence handled once, repeats aside")
	require.Positive(t, kills)
	require.Positive(t, cuts)
	requireOnlyGarbageDeadLettered(t, f, p.garbage)
	c := f.counts(t)
	require.Equal(t, c.DeadLetter, c.Total, "nothing but the dead letters is left: %+v", c)
	if v.earlyStore {
		t.Logf("chaos early messages in the store: most rows in seqbus_held_message at a cut: %d; held by the workers alive at the end: %.0f", maxHeld, heldInStore)
		require.Positive(t, float64(maxHeld)+heldInStore, "early messages were held in the store")
		f.requireNothingDeferred(t, p.sessions*(p.messages+p.duplicates)+p.garbage)
		require.Zero(t, heldRows(t, pool), "nothing left in seqbus_held_message")
		require.Zero(t, countRows(t, pool, "seqbus_held_dead_letter"), "nothing dead-lettered into the store")
		require.Zero(t, countLogLines(procs, "receive deferred session"), "no run asked the broker for a deferred message")
	}
}

// publishGarbage sends n messages that no worker can sequence into the first n sessions: a missing
// sequence, a word, a zero.
func publishGarbage(t *testing.T, f *fixture, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(f.srv.ConnectionString(), nil)
	require.NoError(t, err)
	defer func() { _ = client.Close(ctx) }()
	sender, err := client.NewSender(queueName, nil)
	require.NoError(t, err)
	defer func() { _ = sender.Close(ctx) }()
	kinds := []map[string]any{{}, {"Sequence": "seven"}, {"Sequence": int64(0)}}
	for i := range n {
		sid := demo.SessionID(i)
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, Body: []byte("garbage"), ApplicationProperties: kinds[i%len(kinds)],
		}, nil))
	}
}

// requireOnlyGarbageDeadLettered checks that the dead-letter queue holds exactly n messages, all
// dead-lettered as InvalidSequence with the garbage body.
func requireOnlyGarbageDeadLettered(t *testing.T, f *fixture, n int) {
	t.Helper()
	dlq, err := f.srv.Broker().Lookup(queueName + "/$DeadLetterQueue")
	require.NoError(t, err)
	msgs := dlq.Peek(0, n+10, "")
	require.Len(t, msgs, n, "the dead-letter queue holds the garbage and nothing else")
	for _, m := range msgs {
		require.Equal(t, sequencer.ReasonInvalidSequence, m.ApplicationProperties["DeadLetterReason"], "%v", m.ApplicationProperties)
		require.Equal(t, "garbage", string(m.GetData()))
	}
}

// chaosHandler is the HTTP endpoint the workers' http handler calls. It checks the order of the
// calls as they arrive, answers 503 to a share of them (at most maxFails per message), and
// answers the rest after the preset's latency.
type chaosHandler struct {
	latency  time.Duration
	failRate float64
	maxFails int

	mu    sync.Mutex
	rng   *rand.Rand
	fails map[string]int
	// window is the replay window (sequencer.EngineConfig.ReplayWindow).
	window int64
	// order judges each session's calls (demo.SessionOrder, the demo's rule).
	order         map[string]*demo.SessionOrder
	calls         int
	handled       int
	failed        int
	repeats       int
	longestReplay int64
	violations    []string
	// began is when the run started; history is every call of each session, for the report
	// of a violation.
	began   time.Time
	history map[string][]chaosCall
}

// chaosCall is one handler call as the handler saw it arrive.
type chaosCall struct {
	worker string
	seq    int64
	at     time.Duration
	failed bool
}

func newChaosHandler(p chaosPreset, window int, seed uint64) *chaosHandler {
	return &chaosHandler{
		latency: p.latency, failRate: p.failRate, maxFails: p.maxFails, window: int64(window),
		rng:   rand.New(rand.NewPCG(seed, 0xfa11)),
		fails: map[string]int{}, order: map[string]*demo.SessionOrder{},
		began: time.Now(), history: map[string][]chaosCall{},
	}
}

func (h *chaosHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(handler.HeaderSessionID)
	seq, err := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
	if sid == "" || err != nil {
		http.Error(w, "no session or sequence", http.StatusBadRequest)
		return
	}
	fail := h.record(strings.TrimPrefix(r.URL.Path, "/"), sid, seq)
	time.Sleep(h.latency)
	if fail {
		http.Error(w, "transient failure (chaos)", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// record checks one call against the order of its session (demo.SessionOrder: the next
// sequence, or a replay of at most window of the sequences handled last, in their order) as it
// arrives, and decides its answer; only a call answered with success moves the session on.
func (h *chaosHandler) record(worker, sid string, seq int64) (fail bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	call := chaosCall{worker: worker, seq: seq, at: time.Since(h.began)}
	defer func() {
		call.failed = fail
		h.history[sid] = append(h.history[sid], call)
	}()
	o := h.sessionOrder(sid)
	if v := o.Check(seq); v != "" {
		h.violations = append(h.violations, fmt.Sprintf("session %s: %s", sid, v))
	}
	key := sid + "/" + strconv.FormatInt(seq, 10)
	if h.fails[key] < h.maxFails && h.rng.Float64() < h.failRate {
		h.fails[key]++
		h.failed++
		return true
	}
	if repeat, depth := o.Handled(seq); repeat {
		h.repeats++
		h.longestReplay = max(h.longestReplay, depth)
	} else {
		h.handled++
	}
	return false
}

// sessionOrder returns the order of session sid, started on its first call.
func (h *chaosHandler) sessionOrder(sid string) *demo.SessionOrder {
	o, ok := h.order[sid]
	if !ok {
		o = &demo.SessionOrder{Window: h.window}
		h.order[sid] = o
	}
	return o
}

func (h *chaosHandler) ended(ids []string, messages int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.sessionOrder(id).Last() != messages {
			return false
		}
	}
	return true
}

func (h *chaosHandler) progress(ids []string, messages int64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var open []string
	for _, id := range ids {
		if last := h.sessionOrder(id).Last(); last != messages {
			open = append(open, fmt.Sprintf("%s at %d", id, last))
		}
	}
	n := len(open)
	slices.Sort(open)
	if n > 20 {
		open = append(open[:20], "…")
	}
	return fmt.Sprintf("%d sessions not ended (%s); %d calls, %d violations", n, strings.Join(open, ", "), h.calls, len(h.violations))
}

type chaosSummary struct {
	calls, handled, failed, repeats int
	longestReplay                   int64
	violations                      []string
}

func (h *chaosHandler) summary() chaosSummary {
	h.mu.Lock()
	defer h.mu.Unlock()
	return chaosSummary{calls: h.calls, handled: h.handled, failed: h.failed, repeats: h.repeats,
		longestReplay: h.longestReplay, violations: slices.Clone(h.violations)}
}

// countLogLines counts the lines of the processes' logs that contain substr.
func countLogLines(procs []*proc, substr string) int {
	n := 0
	for _, p := range procs {
		for line := range strings.Lines(p.stderr.String()) {
			if strings.Contains(line, substr) {
				n++
			}
		}
	}
	return n
}

// logViolations reports, for the first sessions with a violation, every handler call in the
// order they arrived (the process that made it, when, the sequence) and the lines of the
// processes' logs that name the session: which runs interleaved, and what their processes saw.
func logViolations(t *testing.T, h *chaosHandler, violations []string, procs []*proc) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, v := range violations {
		sid, _, _ := strings.Cut(strings.TrimPrefix(v, "session "), ":")
		if seen[sid] || len(seen) == 4 {
			continue
		}
		seen[sid] = true
		var b strings.Builder
		for _, c := range h.history[sid] {
			fmt.Fprintf(&b, "  %8.3fs %-28s %3d", c.at.Seconds(), c.worker, c.seq)
			if c.failed {
				b.WriteString(" (answered 503)")
			}
			b.WriteByte('\n')
		}
		for _, p := range procs {
			for line := range strings.Lines(p.stderr.String()) {
				if strings.Contains(line, sid) {
					fmt.Fprintf(&b, "  %s: %s", p.name, line)
				}
			}
		}
		t.Logf("session %s, every handler call and its processes' log lines:\n%s", sid, b.String())
	}
}

// injectFaults kills a random process of live every killEvery (start puts a new one in its place)
// and calls cut every cutEvery, until faultsFor has passed. It returns how many it killed.
func injectFaults(t *testing.T, rng *rand.Rand, live []*proc, start func(name string) *proc,
	killEvery, cutEvery, faultsFor time.Duration, cut func()) (kills int) {
	t.Helper()
	killT, cutT := time.NewTicker(killEvery), time.NewTicker(cutEvery)
	defer killT.Stop()
	defer cutT.Stop()
	deadline := time.After(faultsFor)
	for {
		select {
		case <-killT.C:
			i := rng.IntN(len(live))
			live[i].kill(t)
			kills++
			live[i] = start(fmt.Sprintf("worker-%d-after-kill-%d", i, kills))
		case <-cutT.C:
			cut()
		case <-deadline:
			return kills
		}
	}
}
