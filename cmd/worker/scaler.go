package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/seqbus/seqbus/worker"
)

// scaler serves the entity's scaling signal (GET /scale, /metrics, /healthz, /readyz) with the
// worker's settings until a signal arrives; it consumes nothing, so a platform can scale the
// workers from zero with it.
func (c *cli) scaler(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: scaler takes no arguments, got %q", errUsage, args)
	}
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg := worker.DefaultConfig()
	logger, err := c.fromEnv(&cfg)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	sc, err := worker.NewScaler(cfg)
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker: scaler starting", slog.Any("config", cfg))
	return c.serve(ctx, sc, sigs, logger, cfg.SoftStopTimeout.String())
}
