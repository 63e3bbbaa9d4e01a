package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/worker"
)

// scaleInterval is SEQBUS_SCALE_INTERVAL in these tests.
const scaleInterval = 500 * time.Millisecond

// logAddr waits for p's log line msg and returns its http_addr.
func logAddr(t testing.TB, p *proc, msg string) string {
	t.Helper()
	var addr string
	waitFor(t, 20*time.Second, func() bool {
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		for sc.Scan() {
			var rec struct {
				Msg      string `json:"msg"`
				HTTPAddr string `json:"http_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
				addr = rec.HTTPAddr
				return true
			}
		}
		return p.exited()
	}, func() string { return p.name + " did not start: " + tail(p.stderr.String(), 2000) })
	require.NotEmpty(t, addr, "%s serves HTTP: %s", p.name, tail(p.stderr.String(), 2000))
	return addr
}

// startScaler runs `worker scaler` with env and returns it and the address it serves.
func startScaler(t testing.TB, env []string) (*proc, string) {
	t.Helper()
	p := startWorker(t, "scaler", env, "scaler")
	return p, logAddr(t, p, "worker: scaler running")
}

// getScale reads GET /scale; false on a 503 (nothing evaluated yet).
func getScale(t testing.TB, addr string) (worker.Scale, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/scale")
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return worker.Scale{}, false
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var sc worker.Scale
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sc))
	return sc, true
}

// scaleAfter waits for the first evaluation that began after since and returns it: what the
// signal says once it has seen everything that happened before since.
func scaleAfter(t testing.TB, addr string, since time.Time) worker.Scale {
	t.Helper()
	var sc worker.Scale
	waitFor(t, waitLong, func() bool {
		var ok bool
		sc, ok = getScale(t, addr)
		return ok && sc.EvaluatedAt.After(since)
	}, func() string {
		return fmt.Sprintf("no evaluation after %s; last %+v", since.Format(time.RFC3339Nano), sc)
	})
	return sc
}

// scaleEnv is the environment of a scaler or worker on f's queue with store ("servicebus" or
// "postgres", which gets a schema of its own).
func scaleEnv(t *testing.T, f *fixture, store string, extra ...string) []string {
	t.Helper()
	env := f.baseEnv("SEQBUS_SCALE_INTERVAL="+scaleInterval.String(), "SEQBUS_MAX_CONCURRENT_SESSIONS=8")
	if store == "postgres" {
		_, pg := postgresEnv(t)
		env = append(env, pg...)
	}
	return append(env, extra...)
}

// plan returns the publications of sessions ids with sequences from..to, the last one marked.
func plan(ids []string, from, to int64) []demo.Publication {
	var out []demo.Publication
	for _, id := range ids {
		for s := from; s <= to; s++ {
			out = append(out, demo.Publication{SessionID: id, Sequence: s, Last: s == to})
		}
	}
	return out
}

// The scaling signal follows the sessions with work, not the messages: one session with 600
// messages wants one replica; 64 sessions with 5 messages each at 8 sessions per replica want 8;
// sessions holding only deferred messages on a gap, or parked, want none; nothing wants none. An
// evaluation begun after work arrived (or drained) shows it, so the signal moves within one
// interval. Both state stores.
func TestScaleSignal(t *testing.T) {
	for _, store := range []string{"servicebus", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Run("nothing", func(t *testing.T) {
				f := newFixture(t)
				_, addr := startScaler(t, scaleEnv(t, f, store))
				sc := scaleAfter(t, addr, time.Time{})
				require.Equal(t, worker.Scale{SessionsPerReplica: 8, EvaluatedAt: sc.EvaluatedAt}, sc)
			})

			t.Run("one session with 600 messages, drained", func(t *testing.T) {
				f := newFixture(t)
				env := scaleEnv(t, f, store)
				_, addr := startScaler(t, env)
				scaleAfter(t, addr, time.Time{})
				start := time.Now()
				f.publish(t, plan([]string{"big"}, 1, 600))
				published := time.Now()
				sc := scaleAfter(t, addr, published)
				require.Equal(t, 1, sc.SessionsReady, "%+v", sc)
				require.Equal(t, 1, sc.ReplicasWanted, "one session is one replica's work, whatever its messages")
				t.Logf("burst to signal: the burst published from 0 to %s, the evaluation that counted it begun at %s",
					published.Sub(start).Round(time.Millisecond), sc.EvaluatedAt.Sub(start).Round(time.Millisecond))

				w := startWorker(t, "worker", env)
				f.requireDrained(t)
				drained := time.Now()
				sc = scaleAfter(t, addr, drained)
				require.Equal(t, 0, sc.ReplicasWanted, "drained, the ended session's state is a tombstone: %+v", sc)
				require.Equal(t, oneToN(1, 600), bySession(w.records(t))["big"])
				w.stop(t)
			})

			t.Run("64 sessions with 5 messages each", func(t *testing.T) {
				f := newFixture(t)
				_, addr := startScaler(t, scaleEnv(t, f, store))
				f.publish(t, plan(sessionIDs(64), 1, 5))
				sc := scaleAfter(t, addr, time.Now())
				require.Equal(t, 64, sc.SessionsReady)
				require.Equal(t, 8, sc.ReplicasWanted, "64 sessions at 8 per replica")
			})

			for _, c := range []struct {
				name string
				env  []string
				// metric reaches 64 on the worker once it has left every session as the case wants.
				metric string
			}{
				{"64 sessions waiting only on gaps", nil, "seqbus_gaps_opened_total"},
				{"64 sessions parked on gaps", []string{"SEQBUS_GAP_TIMEOUT=1s", "SEQBUS_GAP_POLICY=park"}, "seqbus_sessions_parked"},
			} {
				t.Run(c.name, func(t *testing.T) {
					f := newFixture(t)
					env := scaleEnv(t, f, store, c.env...)
					_, addr := startScaler(t, env)
					ids := sessionIDs(64)
					f.publish(t, plan(ids, 2, 5)) // sequence 1 is missing
					sc := scaleAfter(t, addr, time.Now())
					require.Equal(t, 8, sc.ReplicasWanted, "not handled yet, they are work: %+v", sc)

					w := startWorker(t, "worker", env)
					waddr := w.httpAddr(t)
					waitFor(t, waitLong, func() bool { return metricValue(scrape(t, waddr), c.metric, nil) == 64 },
						func() string { return fmt.Sprintf("%s: %v", c.metric, metricValue(scrape(t, waddr), c.metric, nil)) })
					w.stop(t)
					sc = scaleAfter(t, addr, time.Now())
					require.Equal(t, worker.Scale{SessionsPerReplica: 8, EvaluatedAt: sc.EvaluatedAt}, sc,
						"sessions holding only deferred messages, or parked, are no work for a replica")
					require.Equal(t, int64(64*4), f.counts(t).Active, "their messages wait at the broker, deferred")

					// A message arriving in a session that waits on a gap, or is parked on one, makes
					// it work again.
					f.publish(t, []demo.Publication{{SessionID: ids[0], Sequence: 1}, {SessionID: ids[1], Sequence: 1}, {SessionID: ids[2], Sequence: 1}})
					sc = scaleAfter(t, addr, time.Now())
					require.Equal(t, 3, sc.SessionsReady, "%+v", sc)
					require.Equal(t, 1, sc.ReplicasWanted)
				})
			}
		})
	}
}

// recorder is an HTTP handler that records, per session, the sequences it was called with, in
// order, each call taking latency.
type recorder struct {
	latency time.Duration
	mu      sync.Mutex
	calls   map[string][]int64
	n       int
}

func newRecorder(latency time.Duration) *recorder {
	return &recorder{latency: latency, calls: map[string][]int64{}}
}

func (h *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
	if err != nil {
		http.Error(w, "no sequence", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.calls[r.Header.Get(handler.HeaderSessionID)] = append(h.calls[r.Header.Get(handler.HeaderSessionID)], seq)
	h.n++
	h.mu.Unlock()
	time.Sleep(h.latency)
	w.WriteHeader(http.StatusNoContent)
}

func (h *recorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// requireSession checks that session id was handled 1..n, each sequence once.
func (h *recorder) requireSession(t *testing.T, id string, n int64) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, oneToN(1, n), h.calls[id], "session %s: every message once, in order", id)
}

// requireOnceInOrder checks that every session of ids was handled 1..n, each sequence once.
func (h *recorder) requireOnceInOrder(t *testing.T, ids []string, n int64) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, oneToN(1, n), h.calls[id], "session %s: every message once, in order", id)
	}
	require.Len(t, h.calls, len(ids))
}

// sample is one look of the simulated autoscaler.
type sample struct {
	At      time.Duration
	Wanted  int
	Ready   int
	Running int
}

// A simulated autoscaler (what KEDA and the HPA do with GET /scale, without their stabilization
// windows, so that it scales in as eagerly as it can) starts a worker process for each replica
// wanted and SIGTERMs the newest when fewer are wanted. A burst of 200 sessions is drained with
// every message handled once and in order, and the loop ends at 0 replicas. Replicas told to stop
// mid-run finish or release their sessions within the grace period and exit 0. The Postgres
// store: its evaluations are a listing and a query, so the signal follows every interval (docs/kubernetes.md
// says what the Service Bus store's evaluations cost).
//
// SEQBUS_SCALE_SERIES=path writes the replica count over time as CSV.
func TestScaleAutoscalerLoop(t *testing.T) {
	f := newFixture(t)
	rec := newRecorder(20 * time.Millisecond)
	hs := httptest.NewServer(rec)
	t.Cleanup(hs.Close)
	env := scaleEnv(t, f, "postgres", "SEQBUS_SCALE_MAX_REPLICAS=6", "SEQBUS_MAX_CONCURRENT_SESSIONS=4",
		"SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)
	_, addr := startScaler(t, env)
	scaleAfter(t, addr, time.Time{})

	var (
		running []*proc
		stopped []*proc
		series  []sample
		started int
	)
	start := time.Now()
	look := func() worker.Scale {
		sc, _ := getScale(t, addr)
		for len(running) < sc.ReplicasWanted {
			started++
			running = append(running, startWorker(t, fmt.Sprintf("worker-%d", started), env))
		}
		for len(running) > sc.ReplicasWanted {
			p := running[len(running)-1]
			running = running[:len(running)-1]
			p.stop(t) // waits until it runs, SIGTERMs it and requires exit 0
			stopped = append(stopped, p)
		}
		series = append(series, sample{At: time.Since(start), Wanted: sc.ReplicasWanted, Ready: sc.SessionsReady, Running: len(running)})
		return sc
	}
	look()
	// Sessions of 1 to 40 messages: the short ones end first, so the sessions with work fall
	// off gradually and the loop scales in while the long ones are still mid-run.
	ids := sessionIDs(200)
	length := func(i int) int64 { return int64(1 + i*7%40) }
	var burst []demo.Publication
	total := 0
	for i, id := range ids {
		n := length(i)
		burst = append(burst, plan([]string{id}, 1, n)...)
		total += int(n)
	}
	f.publish(t, burst)
	published := time.Since(start)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		sc := look()
		if rec.count() >= total && sc.ReplicasWanted == 0 && len(running) == 0 && sc.EvaluatedAt.After(start.Add(published)) {
			break
		}
		require.True(t, time.Now().Before(deadline), "not drained to 0 replicas in time: %d of %d handled, %+v, %d running",
			rec.count(), total, sc, len(running))
		time.Sleep(250 * time.Millisecond)
	}
	for i, id := range ids {
		rec.requireSession(t, id, length(i))
	}
	require.Equal(t, total, rec.count(), "no message handled twice")
	f.requireDrained(t)
	require.Equal(t, started, len(stopped), "every worker started was stopped by the loop")
	require.Positive(t, slices.MaxFunc(series, func(a, b sample) int { return a.Running - b.Running }).Running)

	var csv, chart strings.Builder
	csv.WriteString("seconds,sessions_ready,replicas_wanted,replicas_running\n")
	for _, s := range series {
		fmt.Fprintf(&csv, "%.2f,%d,%d,%d\n", s.At.Seconds(), s.Ready, s.Wanted, s.Running)
		fmt.Fprintf(&chart, "%6.2fs %-6s %d running, %d wanted, %3d sessions ready\n", s.At.Seconds(), strings.Repeat("█", s.Running), s.Running, s.Wanted, s.Ready)
	}
	t.Logf("burst of %d messages in %d sessions published by %.2fs; %d workers started and SIGTERMed; replicas running:\n%s",
		total, len(ids), published.Seconds(), started, chart.String())
	if path := os.Getenv("SEQBUS_SCALE_SERIES"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(csv.String()), 0o644))
	}
}

// A replica told to stop while its sessions are mid-run (as a scale-in does) finishes or
// releases them within the grace period and exits 0; another replica goes on from where it
// stopped, every message handled once and in order.
func TestScaleInUnderSIGTERM(t *testing.T) {
	for _, store := range []string{"servicebus", "postgres"} {
		t.Run(store, func(t *testing.T) {
			f := newFixture(t)
			rec := newRecorder(20 * time.Millisecond)
			hs := httptest.NewServer(rec)
			t.Cleanup(hs.Close)
			env := scaleEnv(t, f, store, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)
			ids := sessionIDs(24)
			f.publish(t, plan(ids, 1, 20))
			a := startWorker(t, "a", env)
			b := startWorker(t, "b", env)
			waitFor(t, waitLong, func() bool { return rec.count() >= 60 }, func() string { return fmt.Sprintf("%d handled", rec.count()) })
			stopAt := time.Now()
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, a.wait(t, 20*time.Second), "a SIGTERMed replica exits 0 within the grace period: %s", tail(a.stderr.String(), 2000))
			t.Logf("stopped in %s with %d of %d messages handled", time.Since(stopAt).Round(time.Millisecond), rec.count(), len(ids)*20)
			require.Less(t, rec.count(), len(ids)*20, "the stop came mid-run")
			waitFor(t, waitLong, func() bool { return rec.count() >= len(ids)*20 }, func() string { return fmt.Sprintf("%d handled", rec.count()) })
			f.requireDrained(t)
			rec.requireOnceInOrder(t, ids, 20)
			b.stop(t)
		})
	}
}

// Workers serve /scale too: the one that holds the sweeper lease evaluates the signal, the others
// answer 503 and report 0 in the gauges, so that an entity is evaluated once whatever its replica
// count and a max across replicas reads its value.
func TestScaleOnWorkers(t *testing.T) {
	f := newFixture(t)
	env := scaleEnv(t, f, "servicebus")
	f.publish(t, plan(sessionIDs(64), 2, 5)) // waiting on a gap once handled: they stay
	a, b := startWorker(t, "a", env), startWorker(t, "b", env)
	addrs := []string{a.httpAddr(t), b.httpAddr(t)}
	lease := func(addr string) float64 { return metricValue(scrape(t, addr), "seqbus_sweeper_lease", nil) }
	waitFor(t, waitLong, func() bool { return lease(addrs[0])+lease(addrs[1]) == 1 },
		func() string { return fmt.Sprintf("leases %v %v", lease(addrs[0]), lease(addrs[1])) })
	holder, other := addrs[0], addrs[1]
	if lease(holder) == 0 {
		holder, other = other, holder
	}
	waitFor(t, waitLong, func() bool {
		sc, ok := getScale(t, holder)
		return ok && sc.SessionsReady == 0 && metricValue(scrape(t, holder), "seqbus_gaps_opened_total", nil)+
			metricValue(scrape(t, other), "seqbus_gaps_opened_total", nil) == 64
	}, func() string { sc, _ := getScale(t, holder); return fmt.Sprintf("%+v", sc) })
	sc := scaleAfter(t, holder, time.Now())
	require.Equal(t, worker.Scale{SessionsPerReplica: 8, EvaluatedAt: sc.EvaluatedAt}, sc)
	_, ok := getScale(t, other)
	require.False(t, ok, "a replica that does not hold the lease does not evaluate")
	require.Zero(t, metricValue(scrape(t, other), "seqbus_replicas_wanted", nil))
	require.Zero(t, metricValue(scrape(t, other), "seqbus_sessions_ready", nil))
	a.stop(t)
	b.stop(t)
}
