package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/outbox"
)

// TestOutboxEndToEnd: four application goroutines enqueue into 200 sessions inside their own
// transactions, a quarter of which roll back; two `worker relay` processes publish the outbox,
// one of them SIGKILLed mid-run and restarted; a worker process hands the messages to an HTTP
// handler. Every committed message is handled exactly once, in order, with gapless sequences,
// and nothing from a rolled-back transaction ever reaches the handler.
func TestOutboxEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		sessions  = 200
		producers = 4
		txEach    = 250
		entity    = "outbox-orders"
	)
	f := newFixture(t)
	require.NoError(t, f.srv.Broker().CreateQueue(entity, broker.EntityProperties{
		RequiresSession: true, LockDuration: lockDuration, MaxDeliveryCount: 10,
		RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: 10 * time.Minute,
	}))
	pool, pgEnv := postgresEnv(t)

	// The handler records each call in arrival order.
	type call struct {
		seq  int64
		body string
		at   time.Time
	}
	var mu sync.Mutex
	calls := map[string][]call{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, _ := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		sid := r.Header.Get(handler.HeaderSessionID)
		calls[sid] = append(calls[sid], call{seq: seq, body: string(body), at: time.Now()})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hs.Close)

	relayEnv := f.baseEnv(append(pgEnv, "SEQBUS_RELAY_POLL_INTERVAL=200ms", "SEQBUS_RELAY_MIN_BACKOFF=100ms")...)
	relays := []*proc{startWorker(t, "relay-a", relayEnv, "relay"), startWorker(t, "relay-b", relayEnv, "relay")}
	w := startWorker(t, "worker", f.baseEnv(append(pgEnv, "SEQBUS_QUEUE="+entity, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_MAX_CONCURRENT_SESSIONS=16")...))

	// The producers: each transaction enqueues one message and commits, or rolls back.
	type committed struct {
		seq  int64
		body string
		at   time.Time
	}
	var cmu sync.Mutex
	want := map[string][]committed{}
	rolledBack := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	enqueue := func(rng *rand.Rand, producer, i int, session string, last bool) {
		body := fmt.Sprintf("p%d-tx%d", producer, i)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		seq, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: entity, SessionID: session, Body: []byte(body), Last: last})
		require.NoError(t, err)
		if !last && rng.IntN(4) == 0 {
			require.NoError(t, tx.Rollback(ctx))
			cmu.Lock()
			rolledBack[body] = true
			cmu.Unlock()
			return
		}
		require.NoError(t, tx.Commit(ctx))
		cmu.Lock()
		want[session] = append(want[session], committed{seq: seq, body: body, at: time.Now()})
		cmu.Unlock()
	}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 77))
			for i := range txEach {
				enqueue(rng, p, i, fmt.Sprintf("acct-%03d", rng.IntN(sessions)), false)
			}
		})
	}
	// Meanwhile relay-a dies without warning and comes back.
	time.Sleep(300 * time.Millisecond)
	relays[0].kill(t)
	relays = append(relays, startWorker(t, "relay-a-again", relayEnv, "relay"))
	wg.Wait()
	// Then each session gets its last message.
	for s := range sessions {
		enqueue(nil, producers, s, fmt.Sprintf("acct-%03d", s), true)
	}

	waitFor(t, 90*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		cmu.Lock()
		defer cmu.Unlock()
		for s, msgs := range want {
			if len(calls[s]) < len(msgs) {
				return false
			}
		}
		return true
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		cmu.Lock()
		defer cmu.Unlock()
		n, total := 0, 0
		for s, msgs := range want {
			n += len(calls[s])
			total += len(msgs)
		}
		return fmt.Sprintf("%d of %d committed messages handled; pending in the outbox: %d", n, total, pendingRows(t, pool))
	})
	waitFor(t, 20*time.Second, func() bool { return pendingRows(t, pool) == 0 }, func() string { return "outbox not empty" })
	for _, r := range relays[1:] {
		r.stop(t)
	}
	w.stop(t)

	mu.Lock()
	defer mu.Unlock()
	var latencies []time.Duration
	total := 0
	for s, msgs := range want {
		slices.SortFunc(msgs, func(a, b committed) int { return int(a.seq - b.seq) })
		got := calls[s]
		require.Len(t, got, len(msgs), "session %s: each committed message handled exactly once", s)
		for i, m := range msgs {
			require.Equal(t, int64(i+1), m.seq, "session %s: committed sequences are gapless", s)
			require.Equal(t, m.seq, got[i].seq, "session %s: handled in order", s)
			require.Equal(t, m.body, got[i].body, "session %s sequence %d: the committed message", s, m.seq)
			require.False(t, rolledBack[got[i].body])
			latencies = append(latencies, got[i].at.Sub(m.at))
		}
		total += len(msgs)
	}
	slices.Sort(latencies)
	t.Logf("outbox end to end: %d committed messages in %d sessions (%d transactions rolled back), commit → handler p50 %s, p99 %s",
		total, len(want), len(rolledBack), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)*99/100].Round(time.Millisecond))
	c := f.counts(t)
	require.Zero(t, c.DeadLetter, "nothing dead-lettered")
}

// pendingRows counts the outbox rows not yet sent.
func pendingRows(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM seqbus_outbox WHERE sent_at IS NULL`).Scan(&n))
	return n
}
