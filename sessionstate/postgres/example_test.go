package postgres_test

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/postgres"
)

// Wiring the transactional mode. With it, a handler's writes commit together with the session's
// state (see handleOrder): a message redelivered after a crash finds either both the order row and
// the advanced state, or neither. Compiled, not run: it needs a database.
func ExampleTxStore_SaveWith() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{}); err != nil {
		panic(err)
	}
	store, err := postgres.New(pool, &postgres.Config{Entity: "orders"})
	if err != nil {
		panic(err)
	}
	atomic := store.Transactional() // a sequencer.AtomicStore: give it to the engine
	_ = atomic
}

// handleOrder is what the engine does for one in-order message with a TxStore: the handler's
// insert and the state advance commit in one transaction.
func handleOrder(ctx context.Context, store *postgres.TxStore, sess sequencer.Session, m *sequencer.Message,
	st *sequencer.State, version int64) (int64, error) {
	st.Next++
	return store.SaveWith(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: version},
		func(ctx context.Context) error {
			tx, ok := postgres.TxFromContext(ctx)
			if !ok {
				return errors.New("not running inside SaveWith")
			}
			_, err := tx.Exec(ctx, "INSERT INTO orders (id, body) VALUES ($1, $2)", m.MessageID, m.Body)
			return err
		})
}
