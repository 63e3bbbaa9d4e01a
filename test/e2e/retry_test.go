package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/operator"
)

// outage is an HTTP downstream that answers 503 for some sessions until a time (their partner is
// out) and 204 otherwise, after a fixed latency; it records every call.
type outage struct {
	latency time.Duration

	mu      sync.Mutex
	failing map[string]bool
	until   time.Time
	calls   map[string][]downstreamCall
}

type downstreamCall struct {
	at  time.Time
	seq int64
	ok  bool
}

func newOutage(latency time.Duration) *outage {
	return &outage{latency: latency, failing: map[string]bool{}, calls: map[string][]downstreamCall{}}
}

func (o *outage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(o.latency)
	id := r.Header.Get(handler.HeaderSessionID)
	seq, _ := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
	o.mu.Lock()
	now := time.Now()
	ok := !o.failing[id] || !now.Before(o.until)
	o.calls[id] = append(o.calls[id], downstreamCall{at: now, seq: seq, ok: ok})
	o.mu.Unlock()
	if !ok {
		http.Error(w, "partner API unavailable", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail makes the sessions ids fail until until.
func (o *outage) fail(until time.Time, ids ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.until = until
	for _, id := range ids {
		o.failing[id] = true
	}
}

// callsOf returns the calls for session id so far.
func (o *outage) callsOf(id string) []downstreamCall {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls[id])
}

// handled returns the sequences answered 2xx for session id, in call order.
func (o *outage) handled(id string) []int64 {
	var out []int64
	for _, c := range o.callsOf(id) {
		if c.ok {
			out = append(out, c.seq)
		}
	}
	return out
}

// doneAt returns when the last of ids had its sequence n answered 2xx (false while one has not).
func (o *outage) doneAt(ids []string, n int64) (time.Time, bool) {
	var last time.Time
	for _, id := range ids {
		found := false
		for _, c := range o.callsOf(id) {
			if c.ok && c.seq == n {
				found = true
				if c.at.After(last) {
					last = c.at
				}
			}
		}
		if !found {
			return time.Time{}, false
		}
	}
	return last, true
}

// releaseLog is one "released until the next attempt" line of a worker's log.
type releaseLog struct {
	Time      time.Time `json:"time"`
	Msg       string    `json:"msg"`
	SessionID string    `json:"session_id"`
	Attempts  int       `json:"attempts"`
	RetryAt   time.Time `json:"retry_at"`
}

// releases returns the engine's released-retry log lines of procs.
func releases(procs ...*proc) []releaseLog {
	var out []releaseLog
	for _, p := range procs {
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			var r releaseLog
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Msg == "sequencer: handler failed; the session is released until the next attempt" {
				out = append(out, r)
			}
		}
	}
	return out
}

// lateness returns, for each release, how long after its planned time the next attempt came
// (at next), of those keep keeps.
func (o *outage) lateness(rels []releaseLog, keep func(r releaseLog, next time.Time) bool) []time.Duration {
	var out []time.Duration
	for _, r := range rels {
		for _, c := range o.callsOf(r.SessionID) {
			if c.at.After(r.Time) {
				if keep(r, c.at) {
					out = append(out, c.at.Sub(r.RetryAt))
				}
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

// brokerCalls sums the broker calls the procs' /metrics report: the engine's by op, the
// sweeper's, and the state saves (a set-state call with Service Bus session state).
func brokerCalls(t *testing.T, addrs ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, a := range addrs {
		fams := scrape(t, a)
		for name, fam := range map[string]string{"seqbus_broker_calls_total": "", "seqbus_sweep_broker_calls_total": "sweep "} {
			f, ok := fams[name]
			if !ok {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "op" {
						out[fam+l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		out["state_save"] += metricValue(fams, "seqbus_state_saves_total", nil)
	}
	return out
}

func callRates(before, after map[string]float64, per float64) string {
	var parts []string
	var total float64
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range after {
			if !yield(k) {
				return
			}
		}
	}) {
		if d := (after[k] - before[k]) / per; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, d))
			total += d
		}
	}
	return fmt.Sprintf("%.1f (%s)", total, strings.Join(parts, ", "))
}

func callTotal(before, after map[string]float64) float64 {
	var n float64
	for k, v := range after {
		n += v - before[k]
	}
	return n
}

// retryShape is the released-retry scenario: 100 sessions of 10 messages, 2 replicas with 2 slots
// each, a downstream of 20ms per call that is out for 3 of the sessions for 60s.
const (
	retrySessions   = 100
	retryMessages   = 10
	retryOutage     = 60 * time.Second
	retryLatency    = 20 * time.Millisecond
	retryMaxBackoff = 5 * time.Second
	// quiet is how long after the last change of the other sessions the broker calls of the
	// cooling ones are measured: the sweeper lists the sessions changed since its last sweep
	// less a margin of 5s, and reads those again.
	quiet = 8 * time.Second
)

// retryEnv is the worker environment of the scenario: 40 attempts spaced 200ms, 400ms, … up to
// 5s, released after releaseAfter in-place attempts (0: every wait in place).
func retryEnv(f *fixture, storeEnv []string, url string, releaseAfter int) []string {
	return f.baseEnv(append(storeEnv, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+url,
		"SEQBUS_MAX_CONCURRENT_SESSIONS=2", "SEQBUS_MAX_HANDLER_ATTEMPTS=40",
		"SEQBUS_RETRY_BASE=200ms", "SEQBUS_RETRY_MAX="+retryMaxBackoff.String(),
		"SEQBUS_RETRY_RELEASE_AFTER="+strconv.Itoa(releaseAfter))...)
}

// retryRun is one run of the scenario: a fixture, two replicas and the downstream.
type retryRun struct {
	name    string
	f       *fixture
	down    *outage
	env     []string
	procs   []*proc
	addrs   []string
	start   time.Time
	healthy time.Duration
}

// newRetryRun starts the downstream and two replicas with releaseAfter.
func newRetryRun(t *testing.T, name, store string, releaseAfter int) *retryRun {
	t.Helper()
	r := &retryRun{name: name, f: newFixture(t), down: newOutage(retryLatency)}
	hs := httptest.NewServer(r.down)
	t.Cleanup(hs.Close)
	r.env = retryEnv(r.f, storeEnv(t, store), hs.URL, releaseAfter)
	for i := range 2 {
		p := startWorker(t, fmt.Sprintf("%s-worker-%d", name, i), r.env)
		r.procs = append(r.procs, p)
		r.addrs = append(r.addrs, p.httpAddr(t))
	}
	return r
}

// sendPlan publishes every session's sequences 1..retryMessages, the sessions interleaved, in
// batches; it may run on a goroutine of its own.
func (r *retryRun) sendPlan(ctx context.Context, ids []string) error {
	sender, err := r.f.srv.Client.NewSender(queueName, nil)
	if err != nil {
		return err
	}
	defer func() { _ = sender.Close(ctx) }()
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		return err
	}
	for s := int64(1); s <= retryMessages; s++ {
		for _, id := range ids {
			sid, mid := id, fmt.Sprintf("%s/%d", id, s)
			if err := batch.AddMessage(&azservicebus.Message{SessionID: &sid, MessageID: &mid, Body: []byte(mid),
				ApplicationProperties: map[string]any{"Sequence": s, "IsLast": s == retryMessages}}, nil); err != nil {
				return err
			}
			if batch.NumMessages() == 50 {
				if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
					return err
				}
				if batch, err = sender.NewMessageBatch(ctx, nil); err != nil {
					return err
				}
			}
		}
	}
	if batch.NumMessages() > 0 {
		return sender.SendMessageBatch(ctx, batch, nil)
	}
	return nil
}

// startRetryRuns publishes the plan to every run at once (their downstreams failing the given
// sessions for retryOutage from then) and waits until each run's healthy sessions are done: the
// runs share the machine alike, so their speeds compare however busy it is.
func startRetryRuns(t *testing.T, ids, healthy []string, runs map[*retryRun][]string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(runs))
	for r, failing := range runs {
		r.start = time.Now()
		r.down.fail(r.start.Add(retryOutage), failing...)
		wg.Go(func() {
			if err := r.sendPlan(t.Context(), ids); err != nil {
				errs <- fmt.Errorf("%s: publish: %w", r.name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	waitFor(t, 4*time.Minute, func() bool {
		done := true
		for r := range runs {
			if r.healthy == 0 {
				if at, ok := r.down.doneAt(healthy, retryMessages); ok {
					r.healthy = at.Sub(r.start)
				} else {
					done = false
				}
			}
		}
		return done
	}, func() string { return "the healthy sessions did not finish" })
}

// TestReleasedRetryKeepsHealthySessionsFlowing is the released-retry scenario, with each state store: 100
// sessions, 2 replicas with 2 slots each, and a downstream out for 3 sessions for 60s. With
// SEQBUS_RETRY_RELEASE_AFTER the 97 healthy sessions finish at the speed they have without any
// failure (±20%, measured side by side in the same test); the 3 wait released, are listed with
// --retrying, survive a SIGKILL of every replica in the cooldown (restarted, they resume their
// plan on schedule), and finish in order after the outage with every message handled once and
// nothing parked. It logs its measurements: healthy throughput with released and
// in-place retries, broker calls per cooling session per minute, and wake lateness against the
// plan.
func TestReleasedRetryKeepsHealthySessionsFlowing(t *testing.T) {
	t.Parallel()
	ids := sessionIDs(retrySessions)
	failing := []string{ids[7], ids[42], ids[77]}
	var healthy []string
	for _, id := range ids {
		if !slices.Contains(failing, id) {
			healthy = append(healthy, id)
		}
	}
	for _, store := range stores {
		t.Run(store, func(t *testing.T) { // not parallel: each subtest runs three configurations side by side
			// Without failures (the speed to compare with, and what idle replicas cost at the
			// broker), with released retries, and with every wait in place, at once.
			base := newRetryRun(t, "base", store, 2)
			rel := newRetryRun(t, "released", store, 2)
			inPlace := newRetryRun(t, "in-place", store, 0)
			startRetryRuns(t, ids, healthy, map[*retryRun][]string{base: nil, rel: failing, inPlace: failing})
			ratio := rel.healthy.Seconds() / base.healthy.Seconds()
			t.Logf("%s: 97 healthy sessions done in %s without failures, %s with 3 failing sessions and released retries (%.2f×), %s with in-place retries (%.2f×)",
				store, base.healthy.Round(10*time.Millisecond), rel.healthy.Round(10*time.Millisecond), ratio,
				inPlace.healthy.Round(10*time.Millisecond), inPlace.healthy.Seconds()/base.healthy.Seconds())
			for _, p := range inPlace.procs {
				p.kill(t) // its 3 sessions hold 3 of its 4 slots, retrying in place; measured
			}
			require.InDelta(t, 1, ratio, 0.2, "the healthy sessions keep their speed (±20%%)")
			for _, id := range ids {
				require.Equal(t, oneToN(1, retryMessages), base.down.handled(id), "session %s", id)
			}
			for _, id := range failing {
				require.Empty(t, rel.down.handled(id), "session %s: nothing handled during the outage", id)
			}

			// The cooldown: listed, counted, no delivery spent, nothing at the broker to offer.
			type listed = operator.ListResult
			var retrying listed
			waitFor(t, 20*time.Second, func() bool {
				retrying = cliJSON[listed](t, rel.env, "sessions", "list", "--retrying")
				if len(retrying.Sessions) != len(failing) {
					return false
				}
				for _, s := range retrying.Sessions {
					if s.Busy || s.Attempts < 3 {
						return false
					}
				}
				return true
			}, func() string { return fmt.Sprintf("retrying: %+v", retrying.Sessions) })
			for _, s := range retrying.Sessions {
				require.Contains(t, failing, s.SessionID)
				require.Equal(t, int64(1), s.Next)
				require.NotNil(t, s.RetryAt)
				require.Contains(t, s.LastError, "status 503")
			}
			table := runCLI(t, rel.env, "sessions", "list", "--retrying")
			require.Contains(t, table.stdout, "retrying 1 at ")
			var gauge float64
			waitFor(t, 10*time.Second, func() bool {
				gauge = 0
				for _, a := range rel.addrs {
					gauge += metricValue(scrape(t, a), "seqbus_sessions_retrying", nil)
				}
				return gauge == 3
			}, func() string { return fmt.Sprintf("seqbus_sessions_retrying summed %v", gauge) })
			q, err := rel.f.srv.Broker().Lookup(queueName)
			require.NoError(t, err)
			for _, id := range failing {
				msgs := q.Peek(0, 100, id)
				require.Len(t, msgs, retryMessages, "session %s: every message waits", id)
				for _, m := range msgs {
					require.NotNil(t, m.Header)
					require.Zero(t, m.Header.DeliveryCount, "session %s: the released retries cost no delivery", id)
				}
			}

			// Broker calls while only the 3 sessions cool down, and those of the idle replicas
			// of the run without failures over the same time. The sweeper reads a changed
			// session again for a few sweeps (its listing's margin): measure once the other
			// sessions' last changes are that far behind.
			time.Sleep(time.Until(rel.start.Add(max(rel.healthy, base.healthy) + quiet)))
			from, idleFrom, fromAt := brokerCalls(t, rel.addrs...), brokerCalls(t, base.addrs...), time.Now()
			window := min(15*time.Second, time.Until(rel.start.Add(retryOutage-20*time.Second)))
			require.Positive(t, window, "the healthy sessions finished early enough to measure the cooldown")
			time.Sleep(window)
			to, idleTo := brokerCalls(t, rel.addrs...), brokerCalls(t, base.addrs...)
			minutes := time.Since(fromAt).Minutes()
			idle := callTotal(idleFrom, idleTo) / minutes
			cooling := (callTotal(from, to)/minutes - idle) / float64(len(failing))
			t.Logf("%s: broker calls per cooling session per minute: %.1f (all calls of the run per minute: %s; idle replicas alone: %s)",
				store, cooling, callRates(from, to, minutes), callRates(idleFrom, idleTo, minutes))
			for _, p := range base.procs {
				p.stop(t)
			}
			released := 0.0
			for _, a := range rel.addrs {
				released += metricValue(scrape(t, a), "seqbus_messages_total", map[string]string{"outcome": "released_retry"})
			}
			require.Positive(t, released)

			// SIGKILL every replica in the cooldown, then restart them.
			before := map[string]operator.SessionInfo{}
			waitFor(t, 10*time.Second, func() bool {
				clear(before)
				for _, s := range cliJSON[listed](t, rel.env, "sessions", "list", "--retrying").Sessions {
					if !s.Busy {
						before[s.SessionID] = s
					}
				}
				return len(before) == len(failing)
			}, func() string { return fmt.Sprintf("listed as retrying, not busy: %v", before) })
			for _, p := range rel.procs {
				p.kill(t)
			}
			killedAt := time.Now()
			old := rel.procs
			rel.procs, rel.addrs = nil, nil
			for i := range 2 {
				p := startWorker(t, fmt.Sprintf("released-worker-%d-restarted", i), rel.env)
				rel.procs = append(rel.procs, p)
				rel.addrs = append(rel.addrs, p.httpAddr(t))
			}
			upAt := time.Now()
			for _, id := range failing {
				planned := *before[id].RetryAt
				var next time.Time
				waitFor(t, 30*time.Second, func() bool {
					for _, c := range rel.down.callsOf(id) {
						if c.at.After(killedAt) {
							next = c.at
							return true
						}
					}
					return false
				}, func() string { return "session " + id + " was not tried again after the restart" })
				due := planned
				if due.Before(upAt) {
					due = upAt
				}
				t.Logf("%s: session %s planned %s after the kill; restarted at +%s; tried again %s after max(plan, restart)", store, id,
					planned.Sub(killedAt).Round(time.Millisecond), upAt.Sub(killedAt).Round(time.Millisecond), next.Sub(due).Round(time.Millisecond))
				bound := 3 * time.Second // the new sweeper's first sweeps
				if planned.Before(killedAt.Add(time.Second)) {
					// The attempt may have been under way when the process died: the session
					// lock it held expires first (the queue's lock duration).
					bound += lockDuration
				}
				require.Less(t, next.Sub(due), bound, "session %s resumes its plan on schedule", id)
				require.False(t, next.Before(planned.Add(-50*time.Millisecond)), "session %s: not before its planned time", id)
			}
			for _, s := range cliJSON[listed](t, rel.env, "sessions", "list", "--retrying").Sessions {
				if s.Busy {
					continue // a worker holds it (Service Bus session state is read under its lock)
				}
				require.GreaterOrEqual(t, s.Attempts, before[s.SessionID].Attempts, "session %s: the attempts count on", s.SessionID)
			}

			// The outage ends: the 3 finish in order, every message handled once, none parked.
			outageEnd := rel.start.Add(retryOutage)
			var done time.Time
			waitFor(t, time.Until(outageEnd)+30*time.Second, func() bool {
				var ok bool
				done, ok = rel.down.doneAt(failing, retryMessages)
				return ok
			}, func() string { return "the failing sessions did not finish: " + progress(t, rel.procs...) })
			t.Logf("%s: the 3 sessions finished %s after the outage ended (backoff capped at %s)", store,
				done.Sub(outageEnd).Round(10*time.Millisecond), retryMaxBackoff)
			require.Less(t, done.Sub(outageEnd), retryMaxBackoff+3*time.Second)
			for _, id := range ids {
				require.Equal(t, oneToN(1, retryMessages), rel.down.handled(id), "session %s: each message handled once, in order", id)
			}
			rel.f.requireDrained(t)
			requireNoneListed(t, rel.env, "--parked", isParked)
			requireNoneListed(t, rel.env, "--retrying", isRetrying)

			// Wake lateness against the plan, the wakes the kill cut off left out (above): while
			// the healthy sessions keep every slot busy a woken session waits for a free one (a
			// wake does not preempt), in the cooldown it has one.
			rels := releases(append(old, rel.procs...)...)
			busyUntil := rel.start.Add(rel.healthy)
			busy := rel.down.lateness(rels, func(r releaseLog, next time.Time) bool { return !r.RetryAt.After(busyUntil) })
			late := rel.down.lateness(rels, func(r releaseLog, next time.Time) bool {
				return r.RetryAt.After(busyUntil) && (next.Before(killedAt) || r.Time.After(upAt))
			})
			require.NotEmpty(t, late)
			stats := func(d []time.Duration) string {
				if len(d) == 0 {
					return "none"
				}
				return fmt.Sprintf("%d wakes, p50 %s, p99 %s, max %s", len(d), percentile(d, 0.5).Round(time.Millisecond),
					percentile(d, 0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
			}
			t.Logf("%s: wake lateness (next attempt after its planned time): in the cooldown %s; while the healthy sessions held every slot %s",
				store, stats(late), stats(busy))
			require.Less(t, percentile(late, 0.99), time.Second, "woken on time: within one sweep interval (1s)")
			for _, p := range rel.procs {
				p.stop(t)
			}
		})
	}
}

// TestRetryNow: `worker sessions retry-now ID` during a long cooldown makes the next attempt
// happen within a second (a sweep interval of 500ms), with each state store.
func TestRetryNow(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			down := newOutage(0)
			hs := httptest.NewServer(down)
			t.Cleanup(hs.Close)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
				"SEQBUS_MAX_HANDLER_ATTEMPTS=10", "SEQBUS_RETRY_BASE=1m", "SEQBUS_RETRY_MAX=1h",
				"SEQBUS_RETRY_RELEASE_AFTER=1", "SEQBUS_SWEEP_INTERVAL=500ms")...)
			down.fail(time.Now().Add(time.Hour), "r")
			w := startWorker(t, "worker", env)
			sendSession(t, f, "r", 1, 3)
			// A session the worker holds is listed as busy, its state unknown (docs/state-stores.md,
			// `sessions list`): the first attempt and the release that plans the next one come first.
			var list operator.ListResult
			waitFor(t, waitLong, func() bool {
				list = cliJSON[operator.ListResult](t, env, "sessions", "list", "--retrying")
				return len(list.Sessions) == 1 && !list.Sessions[0].Busy
			}, func() string { return tail(w.stderr.String(), 2000) })
			s := list.Sessions[0]
			require.Equal(t, uint64(1), s.Attempts)
			require.WithinDuration(t, time.Now().Add(time.Minute), *s.RetryAt, 10*time.Second, "the next attempt is a minute away")
			require.Len(t, down.callsOf("r"), 1)

			r := runCLI(t, env, "sessions", "retry-now", "r")
			asked := time.Now()
			require.Equal(t, 0, r.code, r.stderr)
			require.Contains(t, r.stdout, "retry now r: sequence 1 is due")
			waitFor(t, 5*time.Second, func() bool { return len(down.callsOf("r")) == 2 }, func() string { return tail(w.stderr.String(), 2000) })
			took := down.callsOf("r")[1].at.Sub(asked)
			t.Logf("%s: the next attempt came %s after retry-now returned", store, took.Round(time.Millisecond))
			require.Less(t, took, time.Second)

			// The partner is back: another retry-now, and the session finishes in order.
			down.fail(time.Now(), "r")
			waitFor(t, waitLong, func() bool {
				l := cliJSON[operator.ListResult](t, env, "sessions", "list", "--retrying").Sessions
				return len(l) == 1 && !l[0].Busy
			}, func() string { return "released again" })
			r = runCLI(t, env, "sessions", "retry-now", "r", "--json")
			require.Equal(t, 0, r.code, r.stderr)
			var res operator.RetryNowResult
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
			require.Equal(t, uint64(2), res.Attempts)
			waitFor(t, 5*time.Second, func() bool { return len(down.handled("r")) == 3 }, func() string { return tail(w.stderr.String(), 2000) })
			require.Equal(t, []int64{1, 2, 3}, down.handled("r"))
			f.requireDrained(t)

			// Nothing to retry any more: refused with exit 1, nothing changed.
			r = runCLI(t, env, "sessions", "retry-now", "r")
			require.Equal(t, 1, r.code)
			require.Contains(t, r.stderr, "session has ended")
			r = runCLI(t, env, "sessions", "retry-now", "r\x01")
			require.Equal(t, 2, r.code, "a malformed id is a usage error")
			w.stop(t)
		})
	}
}
