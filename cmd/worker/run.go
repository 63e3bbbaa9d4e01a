package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// runWorker loads the configuration, builds the worker and runs it until a signal arrives. The
// first SIGINT/SIGTERM drains within SEQBUS_SHUTDOWN_TIMEOUT; a second one (or the timeout)
// cancels the work in hand.
func (c *cli) runWorker(ctx context.Context) error {
	// Take the signals first: a SIGTERM that arrives while the worker starts must stop it
	// gracefully, not kill the process with Go's default action.
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg, err := workerconfig.Load(handler.Names())
	if err != nil {
		return err
	}
	logger := c.logger(cfg.SlogLevel())
	logger.InfoContext(ctx, "worker: starting", slog.Any("config", *cfg))

	tp, shutdownTracing, err := worker.TracingFromEnv(ctx, os.Getenv)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()

	wcfg, err := workerConfig(cfg, c.stdout, logger)
	if err != nil {
		return err
	}
	wcfg.TracerProvider = tp
	if cfg.TestCrashBeforeCommit > 0 {
		logger.WarnContext(ctx, "worker: test hook armed: exiting abruptly before a commit", slog.Int("after_message", cfg.TestCrashBeforeCommit))
		wcfg.Middleware = append(wcfg.Middleware, crashAfter(cfg.TestCrashBeforeCommit, c.exit))
	}
	w, err := worker.New(wcfg)
	if err != nil {
		return explain(err, cfg)
	}
	return explain(c.serve(ctx, w, sigs, cfg, logger), cfg)
}

// explain names the variable behind each worker.ConfigError in err (secrets redacted).
func explain(err error, cfg *workerconfig.Config) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, explain(e, cfg))
		}
		return errors.Join(errs...)
	}
	var ce *worker.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name := cfg.Var(ce.Field)
	switch {
	case name == "":
		return err
	case ce.Field == "DatabaseURL":
		return fmt.Errorf("%s: %s: %w", name, workerconfig.RedactDatabaseURL(cfg.DatabaseURL), ce.Err)
	case ce.Field == "ConnectionString":
		return fmt.Errorf("%s: %s", name, workerconfig.RedactConnectionString(ce.Err.Error()))
	}
	return fmt.Errorf("%s: %w", name, ce.Err)
}

// workerConfig maps the environment's settings onto worker.Config.
func workerConfig(cfg *workerconfig.Config, stdout io.Writer, logger *slog.Logger) (worker.Config, error) {
	w := worker.Config{
		ConnectionString:      cfg.ConnectionString,
		Namespace:             cfg.Namespace,
		Entity:                sbadapter.Entity{Queue: cfg.Queue, Topic: cfg.Topic, Subscription: cfg.Subscription},
		Ordering:              worker.Ordering(cfg.Ordering),
		StateStore:            worker.StateStore(cfg.StateStore),
		DatabaseURL:           cfg.DatabaseURL,
		MigrateOnStart:        cfg.MigrateOnStart,
		StateMaxBytes:         int(cfg.StateMaxBytes),
		HandlerTimeout:        cfg.HandlerTimeout,
		Engine:                engineConfig(cfg),
		MaxConcurrentSessions: cfg.MaxConcurrentSessions,
		SweepInterval:         cfg.SweepInterval,
		ReadyInterval:         cfg.ReadyCheckInterval,
		Logger:                logger,
	}
	if cfg.HTTPAddr != workerconfig.HTTPOff {
		w.HTTPAddr = cfg.HTTPAddr
	}
	if cfg.Handler == workerconfig.HandlerJournal {
		w.Journal = true
		return w, nil
	}
	h, err := handler.New(cfg.Handler, handler.Options{Out: stdout, URL: cfg.HandlerURL, Timeout: cfg.HandlerTimeout})
	if err != nil {
		return w, fmt.Errorf("SEQBUS_HANDLER: %w", err)
	}
	w.Handler = h
	return w, nil
}

// engineConfig maps the settings onto the engine's policy.
func engineConfig(cfg *workerconfig.Config) sequencer.EngineConfig {
	e := sequencer.EngineConfig{
		SequenceProperty:  cfg.SequenceProperty,
		LastProperty:      cfg.LastProperty,
		Poison:            sequencer.PoisonPolicy(cfg.PoisonPolicy),
		IdleTimeout:       cfg.SessionIdleTimeout,
		Retry:             sequencer.RetryPolicy{Attempts: cfg.MaxHandlerAttempts, Base: cfg.RetryBase, Cap: cfg.RetryMax},
		SaveEachMessage:   cfg.SaveEachMessage,
		WindowMessages:    cfg.ReorderWindow,
		WindowBytes:       int(cfg.ReorderWindowBytes),
		DeferredBatch:     cfg.DrainBatch,
		ReceiveBatch:      cfg.Prefetch,
		TombstoneTTL:      cfg.TombstoneTTL,
		LockRenewInterval: cfg.LockRenewInterval,
		GapTimeout:        cfg.GapTimeout,
		GapPolicy:         sequencer.GapPolicy(cfg.GapPolicy),
		Unsequenced:       sequencer.Unsequenced(cfg.Unsequenced),
	}
	if cfg.ReorderWindow == 0 {
		e.WindowMessages = sequencer.NoWindow
	}
	if cfg.TombstoneTTL == 0 {
		e.TombstoneTTL = sequencer.NoTombstone
	}
	return e
}

// crashAfter is the SEQBUS_TEST_CRASH_BEFORE_COMMIT test hook: it calls exit(137) right after the
// handler succeeded for the n-th time. The handler runs before the state is saved (inside the
// transaction with the journal handler), so the process dies with that message handled but not
// committed.
func crashAfter(n int, exit func(code int)) func(sequencer.Handler) sequencer.Handler {
	var calls atomic.Int64
	return func(h sequencer.Handler) sequencer.Handler {
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
}

// serve starts w and waits for a signal or the end of ctx, then stops it gracefully; a second
// signal cancels the work in hand.
func (c *cli) serve(ctx context.Context, w *worker.Client, sigs <-chan os.Signal, cfg *workerconfig.Config, logger *slog.Logger) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {
	case sig := <-sigs:
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("signal", sig.String()), slog.Duration("shutdown_timeout", cfg.ShutdownTimeout))
	case <-ctx.Done():
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("reason", context.Cause(ctx).Error()))
	}
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
	if err := w.Stop(stopCtx); err != nil {
		logger.WarnContext(ctx, "worker: graceful stop incomplete, in-flight work cancelled", slog.Any("error", err))
	}
	return nil
}
