package outbox_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/outbox"
)

// An application writes its own row and enqueues the message in one transaction: both
// commit, or neither does.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = 42`); err != nil {
			return err
		}
		_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{
			Entity:      "orders",
			SessionID:   "order-42",
			Body:        []byte(`{"status":"shipped"}`),
			Properties:  map[string]any{"Kind": "OrderShipped"},
			Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		})
		return err
	})
	if err != nil {
		panic(err)
	}
}

// A relay process: it sends what the applications enqueued until it is interrupted.
func ExampleRelay() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, err := azservicebus.NewClientFromConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING"), nil)
	if err != nil {
		panic(err)
	}
	defer client.Close(context.Background())

	relay, err := outbox.NewRelay(&outbox.RelayConfig{
		Pool:   pool,
		Client: client,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Run(ctx); err != nil {
		panic(err)
	}
}
