package e2e

import (
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

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/worker"
)

// storeEnv returns the worker environment for a state store ("servicebus" or "postgres").
func storeEnv(t *testing.T, store string) []string {
	t.Helper()
	if store == "postgres" {
		_, env := postgresEnv(t)
		return env
	}
	return []string{"SEQBUS_STATE_STORE=servicebus"}
}

var stores = []string{"servicebus", "postgres"}

// TestShuffledSessionsInOrder publishes sessions whose sequences arrive shuffled, with duplicate
// copies, and checks that one worker process hands each session's messages to the log handler
// exactly once each and in order, leaving nothing in the queue.
func TestShuffledSessionsInOrder(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates = 6, 40, 3
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.publish(t, demo.Plan(sessions, messages, duplicates, 11))
			require.EqualValues(t, sessions*(messages+duplicates), f.counts(t).Active)
			ids := sessionIDs(sessions)

			w := startWorker(t, "worker", f.baseEnv(append(storeEnv(t, store), "SEQBUS_MAX_CONCURRENT_SESSIONS=4")...))
			waitFor(t, waitLong, func() bool { return w.exited() || handledAll(t, ids, messages, w) },
				func() string { return progress(t, w) })
			f.requireDrained(t)
			w.stop(t)

			got := bySession(w.records(t))
			require.Len(t, got, sessions)
			require.Equal(t, sessions*messages, handledCount(t, w), "handler calls reported by the worker")
			require.Equal(t, sessions*duplicates, stopStat(t, w, "duplicates"), "duplicate copies recognised and dropped")
			require.Zero(t, stopStat(t, w, "dead_lettered"))
			for _, id := range ids {
				require.Equal(t, oneToN(1, messages), got[id], "session %s: each sequence once, in order", id)
			}
		})
	}
}

// TestTwoWorkersShareSessions runs two worker processes on one queue: every sequence is handled
// exactly once across both, each process handles each session in order, and both take part.
func TestTwoWorkersShareSessions(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates = 8, 30, 2
	f := newFixture(t)
	ids := sessionIDs(sessions)

	env := f.baseEnv("SEQBUS_STATE_STORE=servicebus", "SEQBUS_MAX_CONCURRENT_SESSIONS=2")
	a := startWorker(t, "worker-a", env)
	b := startWorker(t, "worker-b", env)
	// Publish once both wait for sessions, so that both compete for them from the start.
	for _, p := range []*proc{a, b} {
		waitFor(t, 15*time.Second, func() bool { return p.exited() || strings.Contains(p.stderr.String(), "worker: running") },
			func() string { return p.name + " did not start: " + p.stderr.String() })
	}
	f.publish(t, demo.Plan(sessions, messages, duplicates, 23))
	waitFor(t, waitLong, func() bool { return a.exited() || b.exited() || handledAll(t, ids, messages, a, b) },
		func() string { return progress(t, a, b) })
	f.requireDrained(t)
	a.stop(t)
	b.stop(t)

	ra, rb := a.records(t), b.records(t)
	require.NotEmpty(t, ra, "worker-a handled sessions")
	require.NotEmpty(t, rb, "worker-b handled sessions")
	byA, byB := bySession(ra), bySession(rb)
	for _, id := range ids {
		requireAscending(t, byA[id], fmt.Sprintf("worker-a session %s", id))
		requireAscending(t, byB[id], fmt.Sprintf("worker-b session %s", id))
		all := map[int64]int{}
		for _, s := range append(append([]int64(nil), byA[id]...), byB[id]...) {
			all[s]++
		}
		for seq := int64(1); seq <= messages; seq++ {
			require.Equal(t, 1, all[seq], "session %s sequence %d handled once across both workers", id, seq)
		}
		require.Len(t, all, messages, "session %s: nothing else handled", id)
	}
}

// TestTwoWorkersJournalMergedByHandleTime runs two worker processes with the journal handler on
// one queue: merged by handle time across both processes, each session's journal is exactly
// 1..N, so no session was handled by both at once; both processes took part.
func TestTwoWorkersJournalMergedByHandleTime(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates = 8, 30, 2
	f := newFixture(t)
	pool, pgEnv := postgresEnv(t)
	env := f.baseEnv(append(pgEnv, "SEQBUS_HANDLER=journal", "SEQBUS_MAX_CONCURRENT_SESSIONS=2")...)
	a := startWorker(t, "worker-a", env)
	b := startWorker(t, "worker-b", env)
	for _, p := range []*proc{a, b} {
		waitFor(t, 15*time.Second, func() bool { return p.exited() || strings.Contains(p.stderr.String(), "worker: running") },
			func() string { return p.name + " did not start: " + p.stderr.String() })
	}
	f.publish(t, demo.Plan(sessions, messages, duplicates, 29))
	waitFor(t, waitLong, func() bool {
		return a.exited() || b.exited() || (journalRows(t, pool) == sessions*messages && endedSessions(t, pool) == sessions)
	}, func() string {
		return fmt.Sprintf("journal has %d of %d rows", journalRows(t, pool), sessions*messages)
	})
	f.requireDrained(t)
	a.stop(t)
	b.stop(t)

	require.Positive(t, handledCount(t, a), "worker-a took part")
	require.Positive(t, handledCount(t, b), "worker-b took part")
	require.Equal(t, sessions*messages, handledCount(t, a)+handledCount(t, b), "each message handled by one process")
	for _, id := range sessionIDs(sessions) {
		require.Equal(t, oneToN(1, messages), journalSequences(t, pool, id), "session %s merged by handle time", id)
	}
}

// handledCount reads the handler calls a stopped worker reports in its last log line.
func handledCount(t *testing.T, p *proc) int {
	t.Helper()
	return stopStat(t, p, "handled")
}

// stopStat reads one counter of the "worker: stopped" summary a worker logs at a graceful stop.
func stopStat(t *testing.T, p *proc, name string) int {
	t.Helper()
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, `"msg":"worker: stopped"`) {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		v, ok := rec[name].(float64)
		require.True(t, ok, "%s stop summary has no %s: %s", p.name, name, line)
		return int(v)
	}
	t.Fatalf("%s logged no stop summary", p.name)
	return 0
}

// requireAscending checks that seqs increase by exactly one from each to the next.
func requireAscending(t *testing.T, seqs []int64, what string) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		require.Equal(t, seqs[i-1]+1, seqs[i], "%s: in order without gaps or repeats: %v", what, seqs)
	}
}

// TestKilledWorkerResumes kills a worker process with SIGKILL while it is in the middle of its
// sessions and checks that a second process resumes each session from the stored state: nothing is
// lost and nothing is handed over twice but the replay the store's default promises, in order:
// the message a process had in hand at the kill with the Postgres store, and up to the pipelined
// runs' window of the messages handled last with the Service Bus store (worker.Config.PipelineRuns).
//
// Worker-a hands messages to an HTTP gate that accepts the first killAfter and then holds every
// further request open, so the kill always lands with messages in hand (one per session being
// worked), however fast the machine is. Worker-b uses the log handler.
func TestKilledWorkerResumes(t *testing.T) {
	t.Parallel()
	const sessions, messages, duplicates, killAfter = 4, 80, 2, 60
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.publish(t, demo.Plan(sessions, messages, duplicates, 37))
			ids := sessionIDs(sessions)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_MAX_CONCURRENT_SESSIONS=4")...)

			g := newGate(killAfter)
			srv := httptest.NewServer(g)
			t.Cleanup(srv.Close)
			t.Cleanup(g.open) // let held requests end before the server closes
			a := startWorker(t, "worker-a", append(env, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+srv.URL))
			waitFor(t, waitLong, func() bool { return a.exited() || g.held() > 0 },
				func() string {
					return fmt.Sprintf("worker-a: %d accepted by the gate; %s", len(g.accepted()), a.stderr.String())
				})
			a.kill(t)
			accepted := g.accepted()
			require.Len(t, accepted, killAfter, "the gate accepted exactly killAfter messages before the kill")

			b := startWorker(t, "worker-b", env)
			waitFor(t, waitLong, func() bool { return b.exited() || handledAllOf(ids, messages, accepted, b.records(t)) },
				func() string { return progress(t, b) })
			f.requireDrained(t)
			b.stop(t)

			cfg := worker.DefaultConfig()
			cfg.StateStore = worker.StateStore(store)
			window := int64(cfg.EngineConfig().ReplayWindow())
			byA, byB := bySession(accepted), bySession(b.records(t))
			repeats, resumed := int64(0), 0
			for _, id := range ids {
				sa, sb := byA[id], byB[id]
				requireAscending(t, sa, "worker-a session "+id)
				requireAscending(t, sb, "worker-b session "+id)
				var lastA int64
				if len(sa) > 0 {
					require.EqualValues(t, 1, sa[0], "worker-a started session %s at its beginning", id)
					lastA = sa[len(sa)-1]
				}
				if lastA == messages && len(sb) == 0 {
					continue // finished before the kill, nothing replayed
				}
				require.NotEmpty(t, sb, "worker-b resumed session %s", id)
				if lastA > 0 && lastA < messages {
					resumed++
				}
				require.True(t, sb[0] <= lastA+1 && lastA+1-sb[0] <= window,
					"session %s: worker-b resumes at %d after worker-a's %d (replaying at most %d)", id, sb[0], lastA, window)
				repeats += lastA + 1 - sb[0]
				require.EqualValues(t, messages, sb[len(sb)-1], "session %s finished", id)
			}
			require.Positive(t, resumed, "at least one session was cut by the kill and resumed from its stored state")
			t.Logf("%s store: worker-a handled %d before SIGKILL; worker-b resumed %d sessions, repeating %d sequences (window %d)",
				store, len(accepted), resumed, repeats, window)
		})
	}
}

// gate is the HTTP handler target of a worker process: it records and accepts the first limit
// messages and holds every later request open until open is called or the client goes away.
type gate struct {
	limit   int
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	records []handler.LogRecord
	holding int
}

func newGate(limit int) *gate { return &gate{limit: limit, release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
	if err != nil {
		http.Error(w, "bad sequence header", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	if len(g.records) < g.limit {
		g.records = append(g.records, handler.LogRecord{SessionID: r.Header.Get(handler.HeaderSessionID), Sequence: seq})
		g.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	g.holding++
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	http.Error(w, "gate closed", http.StatusServiceUnavailable)
}

// accepted returns the messages the gate accepted, in arrival order.
func (g *gate) accepted() []handler.LogRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.records)
}

// held reports how many requests the gate has held open.
func (g *gate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

// open ends every held request.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// handledAllOf reports whether the records together cover 1..n of every session.
func handledAllOf(ids []string, n int, recs ...[]handler.LogRecord) bool {
	seen := map[string]map[int64]bool{}
	for _, rs := range recs {
		for _, r := range rs {
			if seen[r.SessionID] == nil {
				seen[r.SessionID] = map[int64]bool{}
			}
			seen[r.SessionID][r.Sequence] = true
		}
	}
	for _, id := range ids {
		for i := int64(1); i <= int64(n); i++ {
			if !seen[id][i] {
				return false
			}
		}
	}
	return true
}
