package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/tcpproxy"
)

// httpAddr waits for the worker's "running" log line and returns the address its HTTP server
// listens on.
func (p *proc) httpAddr(t testing.TB) string {
	t.Helper()
	var addr string
	waitFor(t, 20*time.Second, func() bool {
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		for sc.Scan() {
			var rec struct {
				Msg      string `json:"msg"`
				HTTPAddr string `json:"http_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "worker: running" {
				addr = rec.HTTPAddr
				return true
			}
		}
		return p.exited()
	}, func() string { return p.name + " did not start: " + tail(p.stderr.String(), 2000) })
	require.NotEmpty(t, addr, "%s serves HTTP: %s", p.name, tail(p.stderr.String(), 2000))
	return addr
}

// scrape reads the worker's /metrics with the Prometheus text parser.
func scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// metricValue returns the value of the family's sample whose labels include want (counter,
// gauge, or a histogram's count); -1 when there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	fam, ok := fams[name]
	if !ok {
		return -1
	}
next:
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// The worker's /metrics counts what was published: every sequence handled, every duplicate copy
// and every garbage message; the session gauges return to 0 once the sessions ended.
func TestMetricsCountWhatWasPublished(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates, garbage = 6, 20, 3, 4
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.publish(t, demo.Plan(sessions, messages, duplicates, 41))
			publishGarbage(t, f, garbage)
			w := startWorker(t, "worker", f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=noop")...))
			addr := w.httpAddr(t)

			want := map[string]float64{"handled": sessions * messages, "duplicate": sessions * duplicates, "invalid": garbage}
			waitFor(t, waitLong, func() bool {
				fams := scrape(t, addr)
				for outcome, n := range want {
					if metricValue(fams, "seqbus_messages_total", map[string]string{"outcome": outcome}) != n {
						return false
					}
				}
				return metricValue(fams, "seqbus_sessions_active", nil) == 0 && f.counts(t).Active == 0
			}, func() string {
				fams := scrape(t, addr)
				var b strings.Builder
				_ = expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain)).Encode(fams["seqbus_messages_total"])
				return fmt.Sprintf("messages: %s active: %v queue: %+v", b.String(), metricValue(fams, "seqbus_sessions_active", nil), f.counts(t))
			})

			fams := scrape(t, addr)
			exact := []struct {
				name   string
				labels map[string]string
				want   float64
			}{
				{"seqbus_messages_total", map[string]string{"outcome": "dead_lettered"}, garbage},
				{"seqbus_messages_total", map[string]string{"outcome": "retried"}, 0},
				{"seqbus_messages_total", map[string]string{"outcome": "blocked"}, 0},
				{"seqbus_handler_duration_seconds", nil, sessions * messages},
				{"seqbus_handler_errors_total", nil, 0},
				{"seqbus_sessions_active", nil, 0},
				{"seqbus_sessions_parked", nil, 0},
				{"seqbus_sessions_blocked", nil, 0},
				{"seqbus_gap_oldest_seconds", nil, 0},
				{"seqbus_lock_lost_total", nil, 0},
				{"seqbus_settlements_refused_total", nil, 0},
				{"seqbus_state_conflicts_total", nil, 0},
				{"seqbus_ready", nil, 1},
			}
			for _, e := range exact {
				require.Equal(t, e.want, metricValue(fams, e.name, e.labels), "%s%v", e.name, e.labels)
			}
			require.Positive(t, metricValue(fams, "seqbus_state_saves_total", nil))
			require.Positive(t, metricValue(fams, "seqbus_state_save_duration_seconds", nil))
			require.GreaterOrEqual(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": "complete"}), float64(sessions*(messages+duplicates)))
			require.Positive(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": "receive"}))
			require.GreaterOrEqual(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": "dead_letter"}), float64(garbage))
			require.GreaterOrEqual(t, metricValue(fams, "seqbus_gap_wait_seconds", nil), 0.0)
			require.GreaterOrEqual(t, metricValue(fams, "seqbus_sweeper_wakes_total", nil), 0.0)
			require.GreaterOrEqual(t, metricValue(fams, "seqbus_gaps_opened_total", nil), 0.0)
			require.Positive(t, metricValue(fams, "go_goroutines", nil), "the Go collector")
			require.Positive(t, metricValue(fams, "process_resident_memory_bytes", nil), "the process collector")
			for name := range fams {
				for _, m := range fams[name].GetMetric() {
					for _, l := range m.GetLabel() {
						require.NotEqual(t, "session_id", l.GetName(), "%s: no label carries a session id", name)
					}
				}
			}
			w.stop(t)
		})
	}
}

// /readyz turns 503 within two check intervals of losing the broker or the database, and 200
// again once they are back.
func TestReadyzFollowsBrokerAndDatabase(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	f := newFixture(t)
	sbProxy, err := tcpproxy.Start(f.srv.AMQPAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sbProxy.Close() })
	_, pgEnv := postgresEnv(t)
	var pgProxy *tcpproxy.Proxy
	for i, kv := range pgEnv {
		if raw, ok := strings.CutPrefix(kv, "SEQBUS_DATABASE_URL="); ok {
			u, err := url.Parse(raw)
			require.NoError(t, err, "the test database URL is a postgres:// URL")
			pgProxy, err = tcpproxy.Start(u.Host)
			require.NoError(t, err)
			t.Cleanup(func() { _ = pgProxy.Close() })
			u.Host = pgProxy.Addr()
			pgEnv[i] = "SEQBUS_DATABASE_URL=" + u.String()
		}
	}
	require.NotNil(t, pgProxy)
	env := f.baseEnv(append(pgEnv,
		"SEQBUS_CONNECTION_STRING="+strings.Replace(f.srv.ConnectionString(), f.srv.AMQPAddr(), sbProxy.Addr(), 1),
		"SEQBUS_READY_CHECK_INTERVAL="+interval.String(),
	)...)
	w := startWorker(t, "worker", env)
	addr := w.httpAddr(t)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReady := func(want int, reason string) time.Duration {
		t.Helper()
		start := time.Now()
		waitFor(t, 30*time.Second, func() bool {
			code, body := readyz()
			return code == want && strings.Contains(body, reason)
		}, func() string {
			code, body := readyz()
			return fmt.Sprintf("readyz %d %s, want %d %q", code, body, want, reason)
		})
		return time.Since(start)
	}
	waitReady(http.StatusOK, `"status":"ready"`)

	for _, outage := range []struct {
		name   string
		proxy  *tcpproxy.Proxy
		reason string
	}{
		{"service bus", sbProxy, "service bus:"},
		{"postgres", pgProxy, "postgres:"},
	} {
		outage.proxy.Pause()
		outage.proxy.Cut()
		took := waitReady(http.StatusServiceUnavailable, outage.reason)
		t.Logf("%s lost: /readyz 503 after %s", outage.name, took.Round(time.Millisecond))
		// Two intervals, plus slack for a loaded machine.
		require.Less(t, took, 2*interval+time.Second, "%s: 503 within two check intervals", outage.name)
		outage.proxy.Resume()
		took = waitReady(http.StatusOK, `"status":"ready"`)
		t.Logf("%s back: /readyz 200 after %s", outage.name, took.Round(time.Millisecond))
	}
	w.stop(t)
}

// A failing handler is retried with growing delays: SEQBUS_RETRY_BASE, doubling, capped at
// SEQBUS_RETRY_MAX.
func TestFailingHandlerRetriesWithGrowingDelays(t *testing.T) {
	t.Parallel()
	const base, maxWait = 300 * time.Millisecond, time.Second
	f := newFixture(t)
	var mu sync.Mutex
	var calls []time.Time
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get(handler.HeaderSequence) == "1" {
			calls = append(calls, time.Now())
			if len(calls) <= 4 {
				http.Error(w, "not yet", http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hs.Close)
	w := startWorker(t, "worker", f.baseEnv("SEQBUS_STATE_STORE=servicebus", "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_RETRY_BASE="+base.String(), "SEQBUS_RETRY_MAX="+maxWait.String(), "SEQBUS_MAX_HANDLER_ATTEMPTS=6"))
	addr := w.httpAddr(t)
	sendSession(t, f, "r", 1, 2)
	waitFor(t, waitLong, func() bool {
		return metricValue(scrape(t, addr), "seqbus_messages_total", map[string]string{"outcome": "handled"}) == 2
	}, func() string { return tail(w.stderr.String(), 2000) })

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 5, "four failures, then success")
	want := []time.Duration{base, 2 * base, maxWait, maxWait} // 300ms, 600ms, 1.2s capped at 1s, 1s
	for i, w := range want {
		gap := calls[i+1].Sub(calls[i])
		t.Logf("retry %d after %s (policy: %s)", i+1, gap.Round(time.Millisecond), w)
		require.GreaterOrEqual(t, gap, w, "retry %d waits at least the backoff", i+1)
		require.Less(t, gap, w+400*time.Millisecond, "retry %d waits about the backoff", i+1)
	}
	require.Equal(t, 4.0, metricValue(scrape(t, addr), "seqbus_messages_total", map[string]string{"outcome": "retried"}))
	w.stop(t)
}

// sendSession publishes sequences 1..n of one session, the last marked.
func sendSession(t *testing.T, f *fixture, session string, from, n int64) {
	t.Helper()
	var plan []demo.Publication
	for i := from; i <= n; i++ {
		plan = append(plan, demo.Publication{SessionID: session, Sequence: i, Last: i == n})
	}
	f.publish(t, plan)
}
