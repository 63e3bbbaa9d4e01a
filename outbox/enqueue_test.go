package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/publisher"
)

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestEnqueue_NumbersEachSessionFromOne(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)

	p := func(entity, session string) outbox.EnqueueParams {
		return outbox.EnqueueParams{Entity: entity, SessionID: session, Body: []byte("b")}
	}
	var got []int64
	for _, e := range []outbox.EnqueueParams{
		p("orders", "a"), p("orders", "a"), p("orders", "b"), p("payments", "a"), p("orders", "a"),
		// Service Bus compares entities and sessions case-insensitively: one sequence.
		p("Orders", "A"), p("ORDERS", "b"),
	} {
		got = append(got, enqueue(ctx, t, pool, e))
	}
	require.Equal(t, []int64{1, 2, 1, 1, 3, 4, 2}, got)

	// Several messages in one transaction take consecutive numbers.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for want := int64(5); want <= 7; want++ {
			seq, err := outbox.Enqueue(ctx, tx, p("orders", "a"))
			require.NoError(t, err)
			require.Equal(t, want, seq)
		}
		return nil
	}))

	// What is stored: the entity lower-cased, the session id as given.
	var (
		entity, session, props, trace string
		body                          []byte
		last                          bool
	)
	seq := enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "Orders", SessionID: "Mixed-Case", Body: []byte{0, 1, 2},
		Properties: map[string]any{"kind": "created", "n": 7, "ratio": 0.5, "ok": true}, Last: true, Traceparent: traceparent})
	require.NoError(t, pool.QueryRow(ctx, `SELECT entity, session_id, body, properties::text, is_last, traceparent
FROM seqbus_outbox WHERE session_key = 'mixed-case' AND sequence = $1`, seq).Scan(&entity, &session, &body, &props, &last, &trace))
	require.Equal(t, "orders", entity)
	require.Equal(t, "Mixed-Case", session)
	require.Equal(t, []byte{0, 1, 2}, body)
	require.JSONEq(t, `{"kind": "created", "n": 7, "ratio": 0.5, "ok": true}`, props)
	require.True(t, last)
	require.Equal(t, traceparent, trace)
}

func TestEnqueue_RollbackGivesTheNumberBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	seq, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders", SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, int64(1), seq)
	require.NoError(t, tx.Rollback(ctx))

	msgs, counters := stored(t, pool)
	require.Zero(t, msgs)
	require.Zero(t, counters)
	require.Equal(t, int64(1), enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s"}))
}

// TestEnqueue_ConcurrentTransactionsAreGapless: transactions that enqueue into the same
// few sessions from several goroutines, a third of them rolled back, leave each session
// numbered 1..n without a gap, and the relay's order (sequence) is the commit order.
func TestEnqueue_ConcurrentTransactionsAreGapless(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	const workers, perWorker, sessions = 6, 40, 3
	pool := newPool(t, workers+1)

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				session := fmt.Sprintf("s-%d", rng.IntN(sessions))
				rollback := rng.IntN(3) == 0
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders", SessionID: session,
						Body: fmt.Appendf(nil, "%d/%d", w, i)}); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	rows, err := pool.Query(ctx, `SELECT session_key, array_agg(sequence ORDER BY id) FROM seqbus_outbox GROUP BY session_key`)
	require.NoError(t, err)
	total := 0
	for rows.Next() {
		var (
			session string
			seqs    []int64
		)
		require.NoError(t, rows.Scan(&session, &seqs))
		for i, s := range seqs {
			require.Equal(t, int64(i+1), s, "session %s: %v", session, seqs)
		}
		require.Equal(t, int64(len(seqs)), count(t, pool, `SELECT last_seq FROM seqbus_outbox_counter WHERE session_key = $1`, session))
		total += len(seqs)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, total, workers*perWorker/2)
	require.Less(t, total, workers*perWorker)
}

var errRollback = errors.New("roll back")

// TestEnqueue_Refusals: each refusal is a clear error matching its sentinel and stores
// nothing. What Go checks before calling the database leaves the transaction usable.
func TestEnqueue_Refusals(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	pool := newPool(t, 4)
	ok := outbox.EnqueueParams{Entity: "orders", SessionID: "s", Body: []byte("x")}
	with := func(f func(*outbox.EnqueueParams)) outbox.EnqueueParams {
		p := ok
		f(&p)
		return p
	}
	tests := []struct {
		name     string
		params   outbox.EnqueueParams
		kind     error
		msg      string
		txUsable bool // the error came before the database
	}{
		{"empty session id", with(func(p *outbox.EnqueueParams) { p.SessionID = "" }), publisher.ErrEmptySessionID, "it is empty", true},
		{"session id of 129 characters", with(func(p *outbox.EnqueueParams) { p.SessionID = strings.Repeat("x", 129) }),
			publisher.ErrSessionIDTooLong, "129 characters", true},
		{"control character", with(func(p *outbox.EnqueueParams) { p.SessionID = "a\x1bb" }), outbox.ErrInvalidSessionID, "U+001B", true},
		{"empty entity", with(func(p *outbox.EnqueueParams) { p.Entity = "" }), outbox.ErrInvalidEntity, `invalid entity ""`, true},
		{"entity with a space", with(func(p *outbox.EnqueueParams) { p.Entity = "my queue" }), outbox.ErrInvalidEntity, "my queue", true},
		{"property of a struct", with(func(p *outbox.EnqueueParams) { p.Properties = map[string]any{"at": time.Now()} }),
			outbox.ErrInvalidMessage, `property "at"`, true},
		{"NaN property", with(func(p *outbox.EnqueueParams) { p.Properties = map[string]any{"x": math.NaN()} }),
			outbox.ErrInvalidMessage, "not a finite number", true},
		{"uint64 over int64", with(func(p *outbox.EnqueueParams) { p.Properties = map[string]any{"x": uint64(math.MaxUint64)} }),
			outbox.ErrInvalidMessage, "does not fit an int64", true},
		{"traceparent", with(func(p *outbox.EnqueueParams) { p.Traceparent = "00-abc-01" }), outbox.ErrInvalidTraceparent, "00-abc-01", true},
		{"traceparent with a zero trace id", with(func(p *outbox.EnqueueParams) {
			p.Traceparent = "00-00000000000000000000000000000000-b7ad6b7169203331-01"
		}), outbox.ErrInvalidTraceparent, "ids not all zero", true},
		{"body of 256 KiB", with(func(p *outbox.EnqueueParams) { p.Body = bytes.Repeat([]byte{'x'}, 256*1024) }),
			outbox.ErrMessageTooLarge, "the limit is 262144", false},
		{"properties over 64 KiB", with(func(p *outbox.EnqueueParams) {
			p.Properties = map[string]any{"big": strings.Repeat("x", 64*1024)}
		}), outbox.ErrMessageTooLarge, "bytes of properties", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = outbox.Enqueue(ctx, tx, tt.params)
			require.ErrorIs(t, err, tt.kind)
			require.ErrorContains(t, err, tt.msg)
			require.ErrorContains(t, err, fmt.Sprintf("enqueue session %q of entity %q", tt.params.SessionID, tt.params.Entity))
			if tt.txUsable {
				seq, err := outbox.Enqueue(ctx, tx, with(func(p *outbox.EnqueueParams) { p.SessionID = "usable-" + tt.name }))
				require.NoError(t, err, "the transaction is still usable")
				require.Equal(t, int64(1), seq)
			} else {
				var pgErr *outbox.Error
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, "SQ003", pgErr.SQLState)
			}
		})
	}
	msgs, counters := stored(t, pool)
	require.Zero(t, msgs, "nothing stored (every transaction rolled back)")
	require.Zero(t, counters)
}

// TestSQL_Refusals calls the SQL function as an application in another language would:
// each refusal has its SQLSTATE and a message naming the problem, and stores nothing.
func TestSQL_Refusals(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	pool := newPool(t, 4)
	tests := []struct {
		name  string
		sql   string
		args  []any
		state string
		msg   string
	}{
		{"empty session id", `SELECT seqbus_outbox_enqueue('orders', '', 'x')`, nil, "SQ001", "it is empty"},
		{"NULL session id", `SELECT seqbus_outbox_enqueue('orders', NULL, 'x')`, nil, "SQ001", "it is empty"},
		{"long session id", `SELECT seqbus_outbox_enqueue('orders', repeat('é', 129), 'x')`, nil, "SQ001", "it is 129 characters, Service Bus allows 128"},
		{"control character", `SELECT seqbus_outbox_enqueue('orders', E'a\nb', 'x')`, nil, "SQ001", "control character U+000A at position 2"},
		{"C1 control character", `SELECT seqbus_outbox_enqueue('orders', E'a\u0090', 'x')`, nil, "SQ001", "U+0090"},
		{"oversized", `SELECT seqbus_outbox_enqueue('orders', 's', $1)`, []any{make([]byte, 262144)}, "SQ003", "the limit is 262144"},
		{"array property", `SELECT seqbus_outbox_enqueue('orders', 's', 'x', '{"a": [1]}')`, nil, "SQ004", `property 'a' is a JSON array`},
		{"null property", `SELECT seqbus_outbox_enqueue('orders', 's', 'x', '{"a": null}')`, nil, "SQ004", `property 'a' is a JSON null`},
		{"properties not an object", `SELECT seqbus_outbox_enqueue('orders', 's', 'x', '"a"')`, nil, "SQ004", "not string"},
		{"NULL body", `SELECT seqbus_outbox_enqueue('orders', 's', NULL)`, nil, "SQ004", "body must not be NULL"},
		{"traceparent", `SELECT seqbus_outbox_enqueue('orders', 's', 'x', '{}', false, 'ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')`,
			nil, "SQ005", "invalid traceparent"},
		{"entity", `SELECT seqbus_outbox_enqueue('orders?', 's', 'x')`, nil, "SQ006", "invalid entity 'orders?'"},
		{"long entity", `SELECT seqbus_outbox_enqueue(repeat('q', 261), 's', 'x')`, nil, "SQ006", "invalid entity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pool.Exec(ctx, tt.sql, tt.args...)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tt.state, pgErr.Code, pgErr.Message)
			require.Contains(t, pgErr.Message, tt.msg)
		})
	}
	msgs, counters := stored(t, pool)
	require.Zero(t, msgs)
	require.Zero(t, counters)

	// The largest message the estimate accepts; one byte more is refused.
	var size int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT 262144 - 1024 - 4 * octet_length('s') - octet_length('{}'::jsonb::text)`).Scan(&size))
	_, err := pool.Exec(ctx, `SELECT seqbus_outbox_enqueue('orders', 's', $1)`, make([]byte, size))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT seqbus_outbox_enqueue('orders', 's', $1)`, make([]byte, size+1))
	require.ErrorContains(t, err, "the limit is 262144")

	// Premium: the limit is a setting.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET seqbus.outbox_max_message_bytes = '1048576'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT seqbus_outbox_enqueue('orders', 'premium', $1)`, make([]byte, 512*1024))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `RESET seqbus.outbox_max_message_bytes`)
	require.NoError(t, err)
}

// TestEnqueue_EndedSessionRefusesMore: after the last message, the session refuses
// further messages (the worker would drop them as duplicates of an ended sequence),
// whether they come through Enqueue or the Counter, in any casing; other sessions go on.
func TestEnqueue_EndedSessionRefusesMore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)
	enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s"})
	require.Equal(t, int64(2), enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s", Last: true}))

	for _, p := range []outbox.EnqueueParams{{Entity: "orders", SessionID: "s"}, {Entity: "ORDERS", SessionID: "S", Last: true}} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := outbox.Enqueue(ctx, tx, p)
			return err
		})
		require.ErrorIs(t, err, outbox.ErrSessionEnded)
		require.ErrorContains(t, err, "ended with sequence 2")
		require.ErrorContains(t, err, "Use a new session id")
	}
	c, err := outbox.NewCounter(pool, &outbox.CounterConfig{Entity: "orders"})
	require.NoError(t, err)
	_, err = c.Next(ctx, "s")
	require.ErrorIs(t, err, outbox.ErrSessionEnded)

	require.Equal(t, int64(1), enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: "other"}))
	require.Equal(t, int64(1), enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "payments", SessionID: "s"}))
	msgs, _ := stored(t, pool)
	require.Equal(t, int64(4), msgs)
}

// TestEnqueue_NotifiesOnCommit: the relay hears of a message when its transaction
// commits, not before, and not at all when the transaction rolls back or the
// application switched notifications off.
func TestEnqueue_NotifiesOnCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+outbox.NotifyChannel)
	require.NoError(t, err)
	// Other tests share the database (and the channel): keep only this schema's entity.
	entity := fmt.Sprintf("notify-%d", rand.Int64())
	next := func(wait time.Duration) (string, bool) {
		for {
			wctx, cancel := context.WithTimeout(ctx, wait)
			n, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return "", false
			}
			if n.Payload == entity {
				return n.Payload, true
			}
		}
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: entity, SessionID: "s"})
	require.NoError(t, err)
	_, got := next(200 * time.Millisecond)
	require.False(t, got, "no notification before the commit")
	require.NoError(t, tx.Commit(ctx))
	payload, got := next(5 * time.Second)
	require.True(t, got)
	require.Equal(t, entity, payload)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: entity, SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, got = next(300 * time.Millisecond)
	require.False(t, got, "no notification for a rollback")

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL seqbus.outbox_notify = 'off'"); err != nil {
			return err
		}
		_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: entity, SessionID: "s"})
		return err
	}))
	_, got = next(300 * time.Millisecond)
	require.False(t, got, "seqbus.outbox_notify = off")
}

func TestEnqueue_NilTransaction(t *testing.T) {
	t.Parallel()
	_, err := outbox.Enqueue(context.Background(), nil, outbox.EnqueueParams{Entity: "orders", SessionID: "s"})
	require.ErrorContains(t, err, "nil transaction")
}

func TestEnqueue_WithoutMigrations(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPoolUnmigrated(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "orders", SessionID: "s"})
		return err
	})
	var oErr *outbox.Error
	require.ErrorAs(t, err, &oErr)
	require.Equal(t, "42883", oErr.SQLState)
	require.ErrorContains(t, err, "is migration 003_outbox applied?")
}
