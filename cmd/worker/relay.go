package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/worker"
)

// relay runs the outbox relay until a signal arrives: the messages applications enqueued in the
// Postgres outbox go to Service Bus in each session's order. A first signal lets the sends in
// flight finish within SEQBUS_SHUTDOWN_TIMEOUT.
func (c *cli) relay(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: relay takes no arguments, got %q", errUsage, args)
	}
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg, err := workerconfig.LoadRelay()
	if err != nil {
		return err
	}
	logger := c.logger(cfg.SlogLevel())
	logger.InfoContext(ctx, "worker: relay starting", slog.Any("config", *cfg))
	rcfg := worker.RelayConfig{
		ConnectionString: cfg.ConnectionString,
		Namespace:        cfg.Namespace,
		DatabaseURL:      cfg.DatabaseURL,
		MigrateOnStart:   cfg.MigrateOnStart,
		Outbox: outbox.RelayConfig{
			Entities:         cfg.Entities,
			BatchSize:        cfg.BatchSize,
			Concurrency:      cfg.Concurrency,
			PollInterval:     cfg.PollInterval,
			MinBackoff:       cfg.MinBackoff,
			MaxBackoff:       cfg.MaxBackoff,
			SendTimeout:      cfg.SendTimeout,
			SequenceProperty: cfg.SequenceProperty,
			LastProperty:     cfg.LastProperty,
			EndedRetention:   cfg.EndedRetention,
			PurgeInterval:    cfg.PurgeInterval,
		},
		ReadyInterval: cfg.ReadyCheckInterval,
		Logger:        logger,
	}
	if cfg.EndedRetention == 0 {
		rcfg.Outbox.EndedRetention = outbox.NoPurge
	}
	if cfg.HTTPAddr != workerconfig.HTTPOff {
		rcfg.HTTPAddr = cfg.HTTPAddr
	}
	explainRelay := func(err error) error {
		var ce *worker.ConfigError
		if !errors.As(err, &ce) {
			return err
		}
		switch ce.Field {
		case "DatabaseURL":
			return fmt.Errorf("SEQBUS_DATABASE_URL: %s: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), ce.Err)
		case "ConnectionString":
			return fmt.Errorf("SEQBUS_CONNECTION_STRING: %s", workerconfig.RedactConnectionString(ce.Err.Error()))
		case "MigrateOnStart":
			return fmt.Errorf("SEQBUS_MIGRATE_ON_START: %w", ce.Err)
		case "HTTPAddr":
			return fmt.Errorf("SEQBUS_HTTP_ADDR: %w", ce.Err)
		}
		return err
	}
	r, err := worker.NewRelay(rcfg)
	if err != nil {
		return explainRelay(err)
	}
	if err := r.Start(ctx); err != nil {
		return explainRelay(err)
	}
	select {
	case sig := <-sigs:
		logger.InfoContext(ctx, "worker: relay stopping", slog.String("signal", sig.String()))
	case <-ctx.Done():
	case <-r.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel() // a second signal does not wait for the sends in flight
		case <-stopCtx.Done():
		}
	}()
	return r.Stop(stopCtx)
}
