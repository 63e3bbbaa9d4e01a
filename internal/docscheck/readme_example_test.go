package docscheck_test

// The code below, from the line after "README example begins" to the end of the file, is the
// README's Go example: TestReadmeExample fails when the two differ, and this file compiles it.

// README example begins
import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// runOrders handles the queue "orders" until SIGINT or SIGTERM, one session's messages in order.
func runOrders() error {
	cfg := worker.DefaultConfig()
	if err := worker.FromEnv(&cfg); err != nil { // SEQBUS_* over the defaults
		return err
	}
	cfg.Entity = sbadapter.Entity{Queue: "orders"}
	cfg.Handler = sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
		// Called once per message, in sequence order within m.SessionID. A message may come
		// again after a crash (at least once): skip what m.Sequence says is already done.
		slog.InfoContext(ctx, "order event", "session", m.SessionID, "sequence", m.Sequence)
		return nil // an error is retried with backoff, then the poison policy applies
	})

	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	if err := w.Start(context.Background()); err != nil {
		return err
	}
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-sig.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Stop(ctx) // finishes each session's message in hand, saves, releases
}
