package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seqbus/seqbus/worker"
)

// logSettings are what `worker relay` and `worker scaler` add to their worker configuration:
// the log level.
type logSettings struct {
	LogLevel string `envconfig:"LOG_LEVEL" desc:"Level of the JSON logs on stderr: debug, info, warn or error."`
}

// fromEnv fills cfg (a worker configuration) from the environment and returns the logger
// SEQBUS_LOG_LEVEL asks for; an invalid setting is an error that names it.
func (c *cli) fromEnv(cfg any) (*slog.Logger, error) {
	s := defaultSettings()
	ls := logSettings{LogLevel: s.LogLevel}
	if err := errors.Join(worker.FromEnv(cfg), worker.FromEnv(&ls)); err != nil {
		return nil, err
	}
	s.LogLevel = ls.LogLevel
	if err := s.validate(); err != nil {
		return nil, err
	}
	return c.logger(s.level()), nil
}

// relay runs the outbox relay until a signal arrives: the messages applications enqueued in the
// Postgres outbox go to Service Bus (or, with SEQBUS_PROVIDER=sqs, to SQS FIFO queues) in each
// session's order. A first signal lets the sends in flight finish within SEQBUS_SHUTDOWN_TIMEOUT.
func (c *cli) relay(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: relay takes no arguments, got %q", errUsage, args)
	}
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg := worker.DefaultRelayConfig()
	logger, err := c.fromEnv(&cfg)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	r, err := worker.NewRelay(cfg)
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker: relay starting", slog.Any("config", cfg))
	return c.serve(ctx, r, sigs, logger, cfg.SoftStopTimeout.String(), r.Done())
}
