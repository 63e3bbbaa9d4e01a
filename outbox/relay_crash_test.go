package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/publisher"
)

// TestRelay_ConcurrentEnqueuersAndCrashingRelays is the outbox's promise end to end:
// 4 goroutines enqueue into 200 sessions inside transactions that also write an
// application row, a quarter of them rolled back; 2 relays send at once; one of them
// "crashes" between a send the broker accepted and its commit (it stops there, as a
// killed process would, and rolls back), is restarted, stopped again at a random moment,
// and restarted. Then every committed message is received exactly once per
// (session, sequence), in order, with gapless sequences, and nothing of the rolled-back
// transactions; the resent batch was absorbed by duplicate detection.
//
// The relays run once on a database whose default isolation is read committed, and
// once where it is repeatable read: the relay must not depend on the default.
func TestRelay_ConcurrentEnqueuersAndCrashingRelays(t *testing.T) {
	t.Parallel()
	for _, isolation := range []string{"read committed", "repeatable read"} {
		t.Run(strings.ReplaceAll(isolation, " ", "-"), func(t *testing.T) {
			t.Parallel()
			testConcurrentEnqueuersAndCrashingRelays(t, isolation)
		})
	}
}

func testConcurrentEnqueuersAndCrashingRelays(t *testing.T, isolation string) {
	ctx := testCtx(t, 4*time.Minute)
	const (
		enqueuers    = 4
		perEnqueuer  = 120 // transactions
		sessions     = 200
		endedEvery   = 4 // every 4th session that has messages ends with a last one
		relayBatch   = 5
		relayWorkers = 3
	)
	b := setup(t, 24, "orders")
	_, err := b.pool.Exec(ctx, `CREATE TABLE app_orders (id bigint PRIMARY KEY, note text NOT NULL)`)
	require.NoError(t, err)

	type msg struct {
		seq  int64
		body string
		last bool
	}
	var (
		mu         sync.Mutex
		committed  = map[string][]msg{} // session → messages
		rolledBack = map[string]bool{}  // bodies
		txCommits  atomic.Int64
	)
	record := func(kept bool, bodies map[string]msg) {
		mu.Lock()
		defer mu.Unlock()
		for s, m := range bodies {
			if kept {
				committed[s] = append(committed[s], m)
			} else {
				rolledBack[m.body] = true
			}
		}
	}

	// Relay A runs throughout; relay B crashes in the first successful send of several
	// messages after its third (at the latest in its 30th), between the send and the
	// commit.
	pcfg := b.pool.Config().Copy()
	pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = isolation
	relayPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(relayPool.Close)
	cfgFor := func(s *spy) *outbox.RelayConfig {
		cfg := b.relayConfig(t)
		cfg.Pool = relayPool
		cfg.BatchSize, cfg.Concurrency, cfg.NewSender = relayBatch, relayWorkers, s.senders(b.client)
		return cfg
	}
	spyA, spyB := newSpy(), newSpy()
	crashed := make(chan []string, 1)
	var (
		sendsB    atomic.Int64
		crashOnce sync.Once
	)
	spyB.after = func(ctx context.Context, msgs []*azservicebus.Message) (int, error) {
		crash := false
		if n := sendsB.Add(1); n > 3 && len(msgs) > 1 || n == 30 {
			crashOnce.Do(func() { crash = true })
		}
		if !crash {
			return len(msgs), nil
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = *m.MessageID
		}
		crashed <- ids
		<-ctx.Done() // the process is gone: no commit follows
		return 0, ctx.Err()
	}
	var wg sync.WaitGroup
	errs := make(chan error, enqueuers)
	for w := range enqueuers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 14))
			for i := range perEnqueuer {
				// One to three distinct sessions per transaction, taken in sorted order so
				// that two transactions cannot deadlock on the counter rows.
				var picked []string
				for range 1 + rng.IntN(3) {
					if s := fmt.Sprintf("session-%03d", rng.IntN(sessions)); !slices.Contains(picked, s) {
						picked = append(picked, s)
					}
				}
				slices.Sort(picked)
				rollback := rng.IntN(4) == 0
				bodies := map[string]msg{}
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					id := int64(w*perEnqueuer + i)
					if _, err := tx.Exec(ctx, `INSERT INTO app_orders (id, note) VALUES ($1, 'placed')`, id); err != nil {
						return err
					}
					for _, s := range picked {
						body := fmt.Sprintf("order %d for %s", id, s)
						seq, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders", SessionID: s, Body: []byte(body),
							Properties: map[string]any{"OrderId": id}})
						if err != nil {
							return err
						}
						bodies[s] = msg{seq: seq, body: body}
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case errors.Is(err, errRollback):
					record(false, bodies)
				case err != nil:
					errs <- fmt.Errorf("enqueuer %d, transaction %d: %w", w, i, err)
					return
				default:
					record(true, bodies)
					txCommits.Add(1)
				}
			}
		})
	}

	// The relays start once a backlog has built up, so that batches hold several messages.
	require.Eventually(t, func() bool { return txCommits.Load() >= 60 }, time.Minute, time.Millisecond)
	relayA := start(t, cfgFor(spyA))
	relayB := start(t, cfgFor(spyB))

	// B crashes mid-run and is restarted; the restarted B is stopped at a random moment
	// and restarted again.
	var crashBatch []string
	select {
	case crashBatch = <-crashed:
	case <-ctx.Done():
		t.Fatal("relay B never reached its crash")
	}
	relayB.stop(t)
	relayB = start(t, cfgFor(spyB))
	time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
	relayB.stop(t)
	relayB = start(t, cfgFor(spyB))

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// End every endedEvery-th session that has messages with a last message.
	var ended []string
	for s := range committed {
		if s[len(s)-1]%endedEvery == 0 {
			ended = append(ended, s)
		}
	}
	for _, s := range ended {
		body := "last of " + s
		seq := enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: s, Body: []byte(body), Last: true})
		committed[s] = append(committed[s], msg{seq: seq, body: body, last: true})
	}
	require.NotEmpty(t, ended)
	require.NotEmpty(t, rolledBack)

	require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 2*time.Minute, 50*time.Millisecond)
	relayA.stop(t)
	relayB.stop(t)

	// The application's rows and the messages committed together.
	require.Equal(t, txCommits.Load(), count(t, b.pool, `SELECT count(*) FROM app_orders`))

	want := map[string]int{}
	total := 0
	for s, msgs := range committed {
		// Recorded after each commit, by several goroutines: sort by sequence.
		slices.SortFunc(msgs, func(a, b msg) int { return int(a.seq - b.seq) })
		want[s] = len(msgs)
		total += len(msgs)
	}
	got := receiveSessions(ctx, t, b.client, "orders", want)
	for s, msgs := range got {
		for i, m := range msgs {
			w := committed[s][i]
			require.Equal(t, int64(i+1), w.seq, "session %s: gapless", s)
			require.Equal(t, w.seq, m.ApplicationProperties["Sequence"], "session %s: in order, each once", s)
			require.Equal(t, w.body, string(m.Body), "session %s, sequence %d", s, w.seq)
			require.False(t, rolledBack[string(m.Body)])
			require.Equal(t, publisher.MessageID(s, w.seq), m.MessageID)
			_, isLast := m.ApplicationProperties["IsLast"]
			require.Equal(t, w.last, isLast, "session %s, sequence %d", s, w.seq)
		}
	}
	info, err := b.srv.Broker().GetQueue("orders")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "no copy beyond one per (session, sequence)")

	// The crashed batch, and only it, was sent again, once, and duplicate detection
	// absorbed it. (A send the random stop interrupted is not counted here: the broker
	// either did not acknowledge it, so the relay sent it again, or did, and the relay
	// recorded it before it stopped.)
	for _, id := range crashBatch {
		require.Equal(t, 2, spyA.times(id)+spyB.times(id), "%s: accepted by the broker twice", id)
	}
	var twice []string
	for _, s := range []*spy{spyA, spyB} {
		for id := range s.accepted {
			if spyA.times(id)+spyB.times(id) > 1 && !slices.Contains(twice, id) {
				twice = append(twice, id)
			}
		}
	}
	slices.Sort(twice)
	slices.Sort(crashBatch)
	require.Equal(t, crashBatch, twice)
	stA, stB := relayA.relay.Stats(), relayB.relay.Stats()
	t.Logf("%d messages in %d sessions (%d transactions committed, %d messages rolled back); resent %d (crash batch %d); relay A %+v, last relay B %+v",
		total, len(want), txCommits.Load(), len(rolledBack), len(twice), len(crashBatch), stA, stB)
	require.Positive(t, stA.Sent)
	require.Zero(t, stA.Failures+stB.Failures)
}
