package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// runWorker loads the configuration, wires adapter, store and handler into a Runner, and runs it
// until a signal arrives. The first SIGINT/SIGTERM drains within SEQBUS_SHUTDOWN_TIMEOUT; a
// second one (or the timeout) cancels the work in hand.
func (c *cli) runWorker(ctx context.Context) error {
	cfg, err := workerconfig.Load(handler.Names())
	if err != nil {
		return err
	}
	logger := c.logger(cfg.SlogLevel())
	logger.InfoContext(ctx, "worker: starting", slog.Any("config", *cfg))

	client, err := newServiceBusClient(cfg)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Close(closeCtx)
	}()
	entity := sbadapter.Entity{Queue: cfg.Queue, Topic: cfg.Topic, Subscription: cfg.Subscription}
	source, err := sbadapter.NewSource(client, sbadapter.Config{Entity: entity, Logger: logger})
	if err != nil {
		return err
	}

	// Fail fast on a wrong entity name or key instead of retrying accepts forever.
	probeCtx, probeCancel := context.WithTimeout(ctx, 30*time.Second)
	err = source.Probe(probeCtx)
	probeCancel()
	if err != nil {
		if sbadapter.Classify(err) == sbadapter.ClassFatal {
			return fmt.Errorf("cannot use %s: %w", entity, err)
		}
		logger.WarnContext(ctx, "worker: probing the entity failed; continuing, the runner retries", slog.Any("error", err))
	}

	var store sequencer.StateStore
	var journal sequencer.Handler      // the journal handler, from the transactional postgres store
	var lister sbadapter.SessionLister // finds stranded sessions for the sweeper
	switch cfg.StateStore {
	case workerconfig.StateStorePostgres:
		pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return fmt.Errorf("SEQBUS_DATABASE_URL: connect to %s: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), err)
		}
		defer pool.Close()
		pingCtx, pingCancel := context.WithTimeout(ctx, 30*time.Second)
		err = pool.Ping(pingCtx)
		pingCancel()
		if err != nil {
			return fmt.Errorf("SEQBUS_DATABASE_URL: reach %s: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), err)
		}
		if cfg.MigrateOnStart {
			res, err := migrations.New(pool, &migrations.Config{Logger: logger}).Up(ctx, migrations.UpOptions{})
			if err != nil {
				return fmt.Errorf("migrate on start: %w", err)
			}
			logger.InfoContext(ctx, "worker: migrated", slog.Int("num_applied", len(res.Migrations)))
		}
		pg, err := postgres.New(pool, &postgres.Config{Entity: entity.String()})
		if err != nil {
			return err
		}
		store = pg
		if cfg.Handler == workerconfig.HandlerJournal {
			// The journal writes in the state's transaction: the engine then runs handler and
			// save through TxStore.SaveWith (exactly-once effects).
			tx := pg.Transactional()
			store, journal = tx, tx.Journal()
		}
		// Each sweep also purges the tombstones that have expired: the engine deletes one only
		// when its session runs again, so without this the table grows with every session ever
		// ended.
		ttl := engineConfig(cfg).WithDefaults().TombstoneTTL
		lister = sbadapter.SessionListerFunc(func(ctx context.Context) ([]string, error) {
			if ttl > 0 {
				n, err := pg.PurgeTombstones(ctx, pg.Entity(), time.Now().Add(-ttl))
				switch {
				case err != nil && ctx.Err() == nil:
					logger.WarnContext(ctx, "worker: purging expired tombstones", slog.Any("error", err))
				case n > 0:
					logger.InfoContext(ctx, "worker: purged expired tombstones", slog.Int64("num_deleted", n))
				}
			}
			return pg.ListStranded(ctx, pg.Entity(), 100)
		})
	default:
		store = sbstate.New(nil)
		// Service Bus lists every session with messages or state; keep the stranded ones.
		lister, err = sbadapter.StrandedFilter(sbadapter.StrandedFilterConfig{Lister: sbadapter.SessionListerFunc(source.ListSessionsWithState), Source: source, Store: store, Logger: logger})
		if err != nil {
			return err
		}
	}

	h, err := handler.New(cfg.Handler, handler.Options{Out: c.stdout, URL: cfg.HandlerURL, Timeout: cfg.HandlerTimeout, Journal: journal})
	if err != nil {
		return fmt.Errorf("SEQBUS_HANDLER: %w", err)
	}
	if cfg.TestCrashBeforeCommit > 0 {
		logger.WarnContext(ctx, "worker: test hook armed: exiting abruptly before a commit", slog.Int("after_message", cfg.TestCrashBeforeCommit))
		h = crashAfter(h, cfg.TestCrashBeforeCommit, c.exit)
	}
	metrics := &handler.Metrics{}
	h = handler.Chain(h, metrics.Middleware(), handler.WithRecover(logger), handler.WithTimeout(cfg.HandlerTimeout))

	runner, err := newRunner(source, store, h, cfg, logger)
	if err != nil {
		return err
	}
	return c.serve(ctx, runner, lister, cfg, logger, metrics)
}

// crashAfter is the SEQBUS_TEST_CRASH_BEFORE_COMMIT test hook: it calls exit(137) right after h
// succeeded for the n-th time. The handler runs before the state is saved (inside the transaction
// with the journal handler), so the process dies with that message handled but not committed.
func crashAfter(h sequencer.Handler, n int, exit func(code int)) sequencer.Handler {
	var calls atomic.Int64
	return sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
		if err := h.Handle(ctx, m); err != nil {
			return err
		}
		if calls.Add(1) == int64(n) {
			exit(137)
		}
		return nil
	})
}

// newServiceBusClient connects with the connection string, or with Entra ID on the namespace,
// with the SDK's retries off as the adapter's sessions need.
func newServiceBusClient(cfg *workerconfig.Config) (*azservicebus.Client, error) {
	if cfg.ConnectionString != "" {
		client, err := sbadapter.NewClientFromConnectionString(cfg.ConnectionString, nil)
		if err != nil {
			// The SDK's parse errors may quote parts of the string: redact before showing.
			return nil, fmt.Errorf("SEQBUS_CONNECTION_STRING: %s", workerconfig.RedactConnectionString(err.Error()))
		}
		return client, nil
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("SEQBUS_NAMESPACE: Entra ID credential: %w", err)
	}
	client, err := sbadapter.NewClient(cfg.Namespace, cred, nil)
	if err != nil {
		return nil, fmt.Errorf("SEQBUS_NAMESPACE: %w", err)
	}
	return client, nil
}

// serve runs runner and the sweeper until a signal or ctx ends, then stops gracefully.
func (c *cli) serve(ctx context.Context, runner *sequencer.Runner, lister sbadapter.SessionLister, cfg *workerconfig.Config, logger *slog.Logger, metrics *handler.Metrics) error {
	sigs, stopSignals := c.signals()
	defer stopSignals()

	// Cancelling ctx cancels the runner's work at once; signals go through Stop below.
	if err := runner.Start(ctx); err != nil {
		return fmt.Errorf("start runner: %w", err)
	}

	sweeper, err := sbadapter.NewSweeper(sbadapter.SweeperConfig{
		Lister:   lister,
		Interval: cfg.SweepInterval,
		Handoff:  func(_ context.Context, id string) { runner.Wake(id) },
		Logger:   logger,
	})
	if err != nil {
		_ = runner.StopAndCancel(ctx)
		return err
	}
	sweepCtx, sweepCancel := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		_ = sweeper.Run(sweepCtx)
	}()
	logger.InfoContext(ctx, "worker: running", slog.String("entity", sbadapter.Entity{Queue: cfg.Queue, Topic: cfg.Topic, Subscription: cfg.Subscription}.String()))

	var sig os.Signal
	select {
	case sig = <-sigs:
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("signal", sig.String()), slog.Duration("shutdown_timeout", cfg.ShutdownTimeout))
	case <-ctx.Done():
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("reason", context.Cause(ctx).Error()))
	}
	sweepCancel()
	<-sweepDone

	// Stop drains: each session finishes the message in hand, saves and is released. The
	// shutdown timeout or a second signal cancels what is left.
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer stopCancel()
	go func() {
		select {
		case sig := <-sigs:
			logger.WarnContext(ctx, "worker: second signal, cancelling in-flight work", slog.String("signal", sig.String()))
			stopCancel()
		case <-stopCtx.Done():
		}
	}()
	if err := runner.Stop(stopCtx); err != nil {
		logger.WarnContext(ctx, "worker: graceful stop incomplete, in-flight work cancelled", slog.Any("error", err))
	}
	st := runner.Stats()
	m := metrics.Snapshot()
	logger.InfoContext(ctx, "worker: stopped",
		slog.Uint64("sessions", st.Sessions),
		slog.Uint64("handled", st.Handled),
		slog.Uint64("deferred", st.Deferred),
		slog.Uint64("duplicates", st.Duplicates),
		slog.Uint64("dead_lettered", st.DeadLettered),
		slog.Uint64("handler_failures", m.Failed),
		slog.Uint64("handler_panics", m.Panics))
	return nil
}

// newRunner maps the configuration onto the sequencer's Runner.
func newRunner(source sequencer.SessionSource, store sequencer.StateStore, h sequencer.Handler, cfg *workerconfig.Config, logger *slog.Logger) (*sequencer.Runner, error) {
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source:                source,
		Store:                 store,
		Handler:               h,
		Engine:                engineConfig(cfg),
		MaxConcurrentSessions: cfg.MaxConcurrentSessions,
		Logger:                logger,
	})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return r, nil
}

// engineConfig maps the configuration onto the engine's policy.
func engineConfig(cfg *workerconfig.Config) sequencer.EngineConfig {
	return sequencer.EngineConfig{
		SequenceProperty: cfg.SequenceProperty,
		LastProperty:     cfg.LastProperty,
		Poison:           sequencer.PoisonPolicy(cfg.PoisonPolicy),
		IdleTimeout:      cfg.SessionIdleTimeout,
		Retry:            sequencer.RetryPolicy{Attempts: cfg.MaxHandlerAttempts},
		SaveEachMessage:  cfg.SaveEachMessage,
	}
}
