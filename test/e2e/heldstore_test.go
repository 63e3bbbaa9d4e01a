package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// partitioned are the properties of the partitioned session queue the held-store tests run on;
// with broker.SessionIDOnPartitioned the emulator refuses the SDK's fetch of deferred messages
// there, as the service does.
var partitioned = broker.EntityProperties{EnablePartitioning: true}

// heldEnv is the environment of a worker that holds early messages in the Postgres store, with a
// reorder window of one message so that holding happens on every session that arrives out of
// order.
func heldEnv(t *testing.T, f *fixture, extra ...string) (*pgxpool.Pool, []string) {
	t.Helper()
	pool, pgEnv := postgresEnv(t)
	return pool, f.baseEnv(append(append(pgEnv,
		"SEQBUS_EARLY_MESSAGES=store",
		"SEQBUS_REORDER_WINDOW=1",
	), extra...)...)
}

// reversedPlan returns sessions first..first+n-1 with their sequences messages..1 (last first),
// each with duplicates extra copies of one sequence at the end, interleaved with plan message by
// message.
func reversedPlan(plan []demo.Publication, first, n, messages, duplicates int) []demo.Publication {
	per := make([][]demo.Publication, n)
	for i := range n {
		id := demo.SessionID(first + i)
		for seq := messages; seq >= 1; seq-- {
			per[i] = append(per[i], demo.Publication{SessionID: id, Sequence: int64(seq), Last: seq == messages})
		}
		for d := range duplicates {
			seq := int64(messages/2 + d)
			per[i] = append(per[i], demo.Publication{SessionID: id, Sequence: seq, Last: seq == int64(messages), Duplicate: true})
		}
	}
	var out []demo.Publication
	for k := 0; len(plan) > 0 || k < messages+duplicates; k++ {
		if len(plan) > 0 {
			out = append(out, plan[0])
			plan = plan[1:]
		}
		for i := range per {
			if k < len(per[i]) {
				out = append(out, per[i][k])
			}
		}
	}
	return out
}

// heldRows counts the rows of seqbus_held_message (every entity: the schema is the test's own).
func heldRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return countRows(t, pool, "seqbus_held_message")
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// heldSequences returns the sequences the store holds for session id, ascending.
func heldSequences(t *testing.T, pool *pgxpool.Pool, id string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT sequence FROM seqbus_held_message WHERE session_id = $1 ORDER BY sequence", id)
	require.NoError(t, err)
	var out []int64
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// requireIndexHeld checks, for each session of ids with a stored state, that every entry of its
// index of early messages (State.Deferred) from its next sequence on has its copy in
// seqbus_held_message, and returns how many entries lie below Next: handled messages whose entry
// the next save drops (their held copy went with the save that passed them).
func requireIndexHeld(t *testing.T, pool *pgxpool.Pool, ids []string) (below int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		var raw []byte
		err := pool.QueryRow(ctx, "SELECT state FROM seqbus_session_state WHERE session_id = $1", id).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		require.NoError(t, err)
		var st sequencer.State
		require.NoError(t, st.UnmarshalBinary(raw))
		held := heldSequences(t, pool, id)
		for seq := range st.Deferred {
			if seq < st.Next {
				below++
				continue
			}
			require.Contains(t, held, seq,
				"session %s (next %d): the index names sequence %d, which the store does not hold (held: %v, index: %v)",
				id, st.Next, seq, held, st.Deferred)
		}
	}
	return below
}

// requireNoDeferral checks the worker's /metrics at addr: messages were received, none was
// deferred, no deferred message was fetched.
func requireNoDeferral(t *testing.T, addr string) {
	t.Helper()
	fams := scrape(t, addr)
	require.Positive(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": "receive"}), "the worker received messages")
	for _, op := range []string{"defer", "receive_deferred"} {
		require.LessOrEqual(t, metricValue(fams, "seqbus_broker_calls_total", map[string]string{"op": op}), 0.0, "broker calls %s", op)
	}
	require.Zero(t, metricValue(fams, "seqbus_messages_total", map[string]string{"outcome": worker.OutcomeDeferred}), "messages deferred")
}

// requireNothingDeferred checks, with a peek of up to max messages, that no message of the queue
// is in the deferred state (duplicate copies may be there).
func (f *fixture) requireNothingDeferred(t *testing.T, max int) {
	t.Helper()
	q, err := f.srv.Broker().Lookup(queueName)
	require.NoError(t, err)
	msgs := q.Peek(0, max+1, "")
	require.LessOrEqual(t, len(msgs), max, "more messages at the broker than were sent")
	for _, m := range msgs {
		state, ok := m.Annotations[broker.AnnotationMessageState].(int64)
		require.True(t, ok, "no message state: %v", m.Annotations)
		require.NotEqual(t, broker.MessageStateDeferred, broker.MessageState(state), "a message is deferred at the broker: %v", m.ApplicationProperties)
	}
}

// Early messages held in the store on a partitioned session queue (where the broker refuses the
// fetch of deferred messages), the way a user runs it: SEQBUS_EARLY_MESSAGES=store with the
// Postgres store. Half of the sessions arrive shuffled, half reversed, with duplicate copies.
// Worker-a hands messages to an HTTP gate that accepts killAfter and holds the rest; while it
// holds them the store holds early messages (`worker sessions show` lists them, none below the
// session's next sequence), nothing is deferred at the broker, and worker-a is SIGKILLed. The
// stored state then names no early message the store does not hold (requireIndexHeld). Worker-b
// then finishes every session in order, resuming each within the documented replay window:
// nothing lost, nothing left at the broker, no deferral by either process, and no row left in
// seqbus_held_message.
func TestHeldStorePartitionedKillAndResume(t *testing.T) {
	t.Parallel()
	const shuffled, reversed, messages, duplicates, killAfter = 4, 4, 40, 2, 100
	f := newFixtureRule(t, partitioned, broker.SessionIDOnPartitioned)
	plan := reversedPlan(demo.Plan(shuffled, messages, duplicates, 61), shuffled, reversed, messages, duplicates)
	f.publish(t, plan)
	ids := sessionIDs(shuffled + reversed)
	pool, env := heldEnv(t, f, "SEQBUS_MAX_CONCURRENT_SESSIONS=4")

	g := newGate(killAfter)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Cleanup(g.open)
	a := startWorker(t, "worker-a", append(slices.Clip(env), "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+srv.URL))
	addrA := a.httpAddr(t)
	waitFor(t, waitLong, func() bool { return a.exited() || (g.held() > 0 && len(g.accepted()) == killAfter) },
		func() string {
			return fmt.Sprintf("worker-a: %d accepted by the gate; %s", len(g.accepted()), progress(t, a))
		})
	// Holding happens: the sessions in hand hold their early messages in the store.
	waitFor(t, waitLong, func() bool { return heldRows(t, pool) > 0 },
		func() string { return "nothing held in seqbus_held_message: " + tail(a.stderr.String(), 2000) })

	// `worker sessions show` lists what a session holds, read from the store while worker-a
	// holds the session.
	var shown string
	for _, id := range ids {
		if len(heldSequences(t, pool, id)) > 0 {
			shown = id
			break
		}
	}
	require.NotEmpty(t, shown)
	show := cliJSON[operator.ShowResult](t, env, "sessions", "show", shown)
	require.NotNil(t, show.Held, "sessions show reports what the store holds")
	require.Positive(t, show.Held.Messages)
	require.Positive(t, show.Held.Bytes)
	require.NotEmpty(t, show.Held.Listed)
	for _, h := range show.Held.Listed {
		// Its next sequence may be held too: the message in hand, not yet past the save.
		require.GreaterOrEqual(t, h.Sequence, show.Session.Next, "session %s holds %d, not below its next", shown, h.Sequence)
		require.Positive(t, h.BrokerSequence)
		require.Positive(t, h.Size)
	}
	table := runCLI(t, env, "sessions", "show", shown)
	require.Equal(t, 0, table.code, table.stderr)
	require.Contains(t, strings.ToLower(table.stdout), "held", "the table names the held messages:\n%s", table.stdout)

	f.requireNothingDeferred(t, len(plan))
	requireNoDeferral(t, addrA)
	held := heldRows(t, pool)
	a.kill(t)
	stale := requireIndexHeld(t, pool, ids)
	accepted := g.accepted()
	require.Len(t, accepted, killAfter, "the gate accepted exactly killAfter messages before the kill")

	b := startWorker(t, "worker-b", env)
	addrB := b.httpAddr(t)
	waitFor(t, waitLong, func() bool { return b.exited() || handledAllOf(ids, messages, accepted, b.records(t)) },
		func() string {
			return fmt.Sprintf("%s; sessions whose run asked the broker for a deferred message: %v (%d index entries below Next at the kill)",
				progress(t, b), fetchRefusals(t, b, ids), stale)
		})
	f.requireDrained(t)
	requireNoDeferral(t, addrB)
	waitFor(t, 10*time.Second, func() bool { return heldRows(t, pool) == 0 },
		func() string { return fmt.Sprintf("%d rows left in seqbus_held_message", heldRows(t, pool)) })
	require.Zero(t, countRows(t, pool, "seqbus_held_dead_letter"), "nothing dead-lettered into the store")
	b.stop(t)
	require.Zero(t, stopStat(t, b, "deferred"), "worker-b deferred nothing")
	require.Zero(t, stopStat(t, b, "dead_lettered"))

	cfg := worker.DefaultConfig()
	cfg.StateStore, cfg.EarlyMessages = worker.StateStorePostgres, worker.EarlyMessagesStore
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
			continue
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
	t.Logf("worker-a handled %d before SIGKILL with %d messages held in the store (%d index entries below Next); worker-b resumed %d sessions, repeating %d sequences (window %d)",
		len(accepted), held, stale, resumed, repeats, window)
}

// A held message that turns poison, on a partitioned queue: with no reorder window every early
// message is held in the store, so the reversed session's sequence 3 is handed over from the
// store; the handler fails it, and the poison policy park dead-letters it into the store's dead
// letters (seqbus_held_dead_letter), the broker no longer having it. `worker sessions show` lists
// the dead letter and the messages still held behind it; `worker dlq list` shows it; after the
// fix, `worker dlq replay` sends it back to the entity, `worker sessions resume` lets the session
// go on, and it completes in order with nothing left in the store or at the broker.
func TestHeldStorePoisonReplay(t *testing.T) {
	t.Parallel()
	const id, messages, poison = "p", 5, int64(3)
	f := newFixtureRule(t, partitioned, broker.SessionIDOnPartitioned)
	h := newBuggyHandler(fmt.Sprintf("%s/%d", id, poison))
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	pool, env := heldEnv(t, f, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_REORDER_WINDOW=0", "SEQBUS_PREFETCH=1",
		"SEQBUS_POISON_POLICY=park", "SEQBUS_MAX_HANDLER_ATTEMPTS=2", "SEQBUS_RETRY_BASE=10ms", "SEQBUS_RETRY_MAX=20ms")
	var plan []demo.Publication
	for seq := int64(messages); seq >= 1; seq-- {
		plan = append(plan, demo.Publication{SessionID: id, Sequence: seq, Last: seq == messages})
	}
	f.publish(t, plan)
	w := startWorker(t, "worker", env)
	addr := w.httpAddr(t)

	var parked operator.ListResult
	waitFor(t, waitLong, func() bool {
		parked = cliJSON[operator.ListResult](t, env, "sessions", "list", "--parked")
		return len(parked.Sessions) == 1 && countRows(t, pool, "seqbus_held_dead_letter") == 1
	}, func() string {
		return fmt.Sprintf("parked %+v; handled %s; %s", parked.Sessions, h, tail(w.stderr.String(), 2000))
	})
	require.Equal(t, []int64{1, 2}, h.sequences(id), "handled up to the poison message")
	require.Equal(t, poison, parked.Sessions[0].Next)
	require.NotNil(t, parked.Sessions[0].Parked)
	require.Equal(t, poison, parked.Sessions[0].Parked.Sequence)

	// The session's messages left the broker: the poison one lives on in the store's dead
	// letters, the later ones are held.
	require.Zero(t, f.counts(t).DeadLetter, "nothing in the broker's dead-letter queue")
	require.Equal(t, []int64{4, 5}, heldSequences(t, pool, id))
	show := cliJSON[operator.ShowResult](t, env, "sessions", "show", id)
	require.NotNil(t, show.Held)
	require.Equal(t, 2, show.Held.Messages)
	var listed []int64
	for _, m := range show.Held.Listed {
		listed = append(listed, m.Sequence)
	}
	require.Equal(t, []int64{4, 5}, listed, "sessions show lists the held messages")
	require.Len(t, show.Held.DeadLetters, 1)
	require.Equal(t, poison, show.Held.DeadLetters[0].Sequence)

	dlq := cliJSON[operator.DLQListResult](t, env, "dlq", "list")
	require.Empty(t, dlq.Messages, "the broker's dead-letter queue is empty")
	require.Len(t, dlq.Held, 1, "dlq list shows the store's dead letter")
	dead := dlq.Held[0]
	require.Equal(t, id, dead.SessionID)
	require.Equal(t, poison, dead.Sequence)
	require.Equal(t, sequencer.ReasonHandlerFailed, dead.Reason)
	require.Contains(t, dead.Description, "status 500")
	table := runCLI(t, env, "dlq", "list")
	require.Equal(t, 0, table.code, table.stderr)
	require.Contains(t, table.stdout, id, "the dlq table names the session:\n%s", table.stdout)

	// The fix is deployed; the dead letter goes back, then the session resumes.
	h.fix()
	replay := runCLI(t, env, "dlq", "replay", "--session", id)
	require.Equal(t, 0, replay.code, replay.stderr)
	require.Contains(t, replay.stdout, "1 cop", "replay: %s", replay.stdout)
	require.Zero(t, countRows(t, pool, "seqbus_held_dead_letter"), "the replayed dead letter left the store")
	resume := runCLI(t, env, "sessions", "resume", id)
	require.Equal(t, 0, resume.code, resume.stderr)

	waitFor(t, waitLong, func() bool { return h.complete([]string{id}, messages) }, func() string { return h.String() })
	f.requireDrained(t)
	require.Equal(t, oneToN(1, messages), h.sequences(id), "every sequence once, in order")
	waitFor(t, 10*time.Second, func() bool { return heldRows(t, pool) == 0 },
		func() string { return fmt.Sprintf("%d rows left in seqbus_held_message", heldRows(t, pool)) })
	requireNoDeferral(t, addr)
	require.Empty(t, cliJSON[operator.DLQListResult](t, env, "dlq", "list").Held)
	w.stop(t)
}

// A session whose early messages pass SEQBUS_HELD_MAX_SESSION_MESSAGES on a partitioned queue
// (reversed: the message for its next sequence is at the broker behind the ones not held): the
// store holds two, the run logs the bound reached and keeps the rest unsettled in its window,
// reaches the message for Next behind them, and nothing is lost: every message in order, none
// dead-lettered, nothing left held.
func TestHeldStoreFullGoesOn(t *testing.T) {
	t.Parallel()
	const id, messages = "full", 6
	f := newFixtureRule(t, partitioned, broker.SessionIDOnPartitioned)
	pool, env := heldEnv(t, f, "SEQBUS_REORDER_WINDOW=0", "SEQBUS_PREFETCH=1", "SEQBUS_HELD_MAX_SESSION_MESSAGES=2")
	var plan []demo.Publication
	for seq := int64(messages); seq >= 1; seq-- {
		plan = append(plan, demo.Publication{SessionID: id, Sequence: seq, Last: seq == messages})
	}
	f.publish(t, plan)
	w := startWorker(t, "worker", env)
	released := func() int { return countLogLines([]*proc{w}, "early messages not held in the store") }
	waitFor(t, waitLong, func() bool { return released() > 0 }, func() string { return "no held_full: " + tail(w.stderr.String(), 2000) })
	waitFor(t, 20*time.Second, func() bool {
		return len(handledSequences(t, w, id)) == messages || f.counts(t).DeadLetter > 0
	}, func() string {
		return fmt.Sprintf("the session does not go on: handled %v; held %v; queue %+v; runs ended held_full: %d",
			handledSequences(t, w, id), heldSequences(t, pool, id), f.counts(t), released())
	})
	require.Zero(t, f.counts(t).DeadLetter, "nothing dead-lettered by the broker: %s", f.peek(t))
	require.Equal(t, oneToN(1, messages), handledSequences(t, w, id), "every sequence once, in order")
	f.requireDrained(t)
	require.Zero(t, heldRows(t, pool))
	w.stop(t)
}
