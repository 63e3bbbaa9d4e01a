package outbox

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/publisher"
)

// TestRules_GoAndSQLAgree holds the Go checks and migration 003's SQL checks together:
// for session ids (publisher.ValidateSessionID, the one rule), entities and
// traceparents, both accept and refuse the same inputs, on a table of edge cases and on
// random strings.
func TestRules_GoAndSQLAgree(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := pgtest.NewPool(t, &pgtest.Options{MaxConns: 2, Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})

	sessionOK := func(id string) bool {
		var problem *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT seqbus_outbox_session_id_problem($1)`, id).Scan(&problem))
		return problem == nil
	}
	// The entity and traceparent rules are checked inside the functions: call them in a
	// transaction that is rolled back.
	sqlOK := func(sql string, args ...any) bool {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, sql, args...)
		return err == nil
	}
	entityOK := func(e string) bool { return sqlOK(`SELECT seqbus_outbox_next_sequence($1, 's')`, e) }
	traceOK := func(tp string) bool {
		return sqlOK(`SELECT seqbus_outbox_enqueue('orders', 's', 'x', '{}', false, $1)`, tp)
	}

	ids := []string{"a", " ", "order-42", "é", strings.Repeat("x", 128), strings.Repeat("x", 129),
		strings.Repeat("é", 128), strings.Repeat("é", 129), strings.Repeat("😀", 128), "a\tb", "\x01", "\x1f", " \x7f",
		"\u0080", "\u009f", "\u00a0", "\u200b", "\u2028", "a/b:c#d?e"}
	entities := []string{"orders", "Orders", "a.b-c_d/e", strings.Repeat("q", 260), strings.Repeat("q", 261), "",
		"my queue", "ordérs", "orders?", "$default", "a\tb", "\u212Aelvin"}
	traces := []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-", "0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09 ./-_?é😀\t\n\x1b\x7f\u0085\u00a0\u2028")
	for range 300 {
		n := rng.IntN(140)
		if rng.IntN(2) == 0 {
			n = 120 + rng.IntN(15) // around the limit
		}
		var b strings.Builder
		for range n {
			r := 'x'
			if rng.IntN(20) == 0 {
				r = alphabet[rng.IntN(len(alphabet))]
			}
			b.WriteRune(r)
		}
		ids = append(ids, b.String())
		entities = append(entities, b.String())
	}
	for _, id := range ids {
		require.True(t, utf8.ValidString(id))
		require.Equal(t, publisher.ValidateSessionID(id) == nil, sessionOK(id), "session id %q", id)
	}
	for _, e := range entities {
		require.Equal(t, checkEntity(e) == nil, entityOK(e), "entity %q", e)
	}
	for _, tp := range traces {
		require.Equal(t, checkTraceparent(tp) == nil, traceOK(tp), "traceparent %q", tp)
	}
}
