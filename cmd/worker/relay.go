package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seqbus/seqbus/worker"
)

// relaySettings are what `worker relay` adds to worker.RelayConfig: the log level.
type relaySettings struct {
	LogLevel string `envconfig:"LOG_LEVEL"`
}

// relay runs the outbox relay until a signal arrives: the messages applications enqueued in the
// Postgres outbox go to Service Bus in each session's order. A first signal lets the sends in
// flight finish within SEQBUS_SHUTDOWN_TIMEOUT.
func (c *cli) relay(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: relay takes no arguments, got %q", errUsage, args)
	}
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg, s := worker.DefaultRelayConfig(), defaultSettings()
	rs := relaySettings{LogLevel: s.LogLevel}
	if err := errors.Join(worker.FromEnv(&cfg), worker.FromEnv(&rs)); err != nil {
		return err
	}
	s.LogLevel = rs.LogLevel
	if err := s.validate(); err != nil {
		return err
	}
	logger := c.logger(s.level())
	cfg.Logger = logger
	r, err := worker.NewRelay(cfg)
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker: relay starting", slog.Any("config", cfg))
	return c.serve(ctx, r, sigs, logger, cfg.SoftStopTimeout.String(), r.Done())
}
