package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/outbox"
)

// The application enqueues an order's messages in the transaction that writes the order; the
// relay sends them to Service Bus once it commits, in the session's order, each with its
// Sequence and the last with IsLast. Here the relay's sender prints what it would send.
func ExampleRelay_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, drop := exampleDatabase(ctx) // the migrated database (worker migrate up)
	defer drop()

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, status) VALUES (42, 'shipped')`); err != nil {
			return err
		}
		for i, step := range []string{"created", "paid", "shipped"} {
			_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{
				Entity: "orders", SessionID: "order-42", Body: []byte(step), Last: i == 2,
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	relay, err := outbox.NewRelay(&outbox.RelayConfig{
		Pool: pool,
		// In production: Client, an *azservicebus.Client.
		NewSender: func(context.Context, string) (outbox.Sender, error) { return printer{stop: stop}, nil },
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Run(runCtx); err != nil && runCtx.Err() == nil {
		panic(err)
	}
	// Output:
	// order-42 1 created false
	// order-42 2 paid false
	// order-42 3 shipped true
}

// printer is an outbox.Sender that prints the messages and stops the relay after a session's
// last one.
type printer struct{ stop context.CancelFunc }

func (p printer) SendMessages(_ context.Context, msgs []*azservicebus.Message) (int, error) {
	for _, m := range msgs {
		last := m.ApplicationProperties["IsLast"] == true
		fmt.Println(*m.SessionID, m.ApplicationProperties["Sequence"], string(m.Body), last)
		if last {
			p.stop()
		}
	}
	return len(msgs), nil
}

func (printer) Close(context.Context) error { return nil }

// exampleDatabase returns a pool on a schema of its own in the test database, migrated, with
// the application's orders table, and a function that drops the schema.
func exampleDatabase(ctx context.Context) (*pgxpool.Pool, func()) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "example_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	drop := func() {
		conn, err := pgx.Connect(context.Background(), pgtest.DSN())
		if err != nil {
			panic(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			panic(err)
		}
	}
	pool, err := pgxpool.New(ctx, pgtest.SchemaDSN(schema))
	if err != nil {
		drop()
		panic(err)
	}
	if _, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{}); err != nil {
		pool.Close()
		drop()
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)`); err != nil {
		pool.Close()
		drop()
		panic(err)
	}
	return pool, func() { pool.Close(); drop() }
}
