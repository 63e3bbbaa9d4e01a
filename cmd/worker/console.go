package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/worker"
)

// console serves the web console of the entity (SEQBUS_CONSOLE_ADDR; a Service Bus entity or an
// SQS FIFO queue) on the operator API, with the scaling signal's evaluation for its overview and
// the scaler's /metrics, /healthz and /readyz on SEQBUS_HTTP_ADDR, until a signal arrives.
func (c *cli) console(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: console takes no arguments (it is configured by SEQBUS_CONSOLE_* variables), got %q", errUsage, args)
	}
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg, st, err := c.loadWorker()
	if err != nil {
		return err
	}
	cs := worker.DefaultConsoleSettings()
	if err := worker.FromEnv(&cs); err != nil {
		return err
	}
	if err := errors.Join(cs.Validate(), operatorSettings{}.validate(cfg)); err != nil {
		return err
	}
	logger := c.logger(st.level())
	cfg.Logger = logger
	op, conn, closeAll, err := c.newOperator(ctx, cfg, operatorSettings{}, io.Discard, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	scaler, err := worker.NewScaler(cfg)
	if err != nil {
		return err
	}
	probes := []console.Probe{{Name: conn.Broker(), Check: conn.ProbeBroker}}
	if conn.Pool != nil {
		probes = append(probes, console.Probe{Name: "postgres", Check: conn.Pool.Ping})
	}
	con, err := console.New(console.Config{
		Operations: op, Entity: cfg.EntityName(),
		Token: cs.ConsoleToken, ReadToken: cs.ConsoleReadToken, ProxyUserHeader: cs.ConsoleProxyUserHeader,
		Scale: scaler.Last, Probes: probes, Logger: logger,
	})
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker: console starting", slog.Any("config", cfg), slog.Any("console", cs))
	return c.serve(ctx, services{scaler, console.NewServer(cs.ConsoleAddr, con)}, sigs, logger, cfg.SoftStopTimeout.String())
}

// services run as one: started in order, stopped in reverse order.
type services []runnable

func (s services) Start(ctx context.Context) error {
	for i, r := range s {
		if err := r.Start(ctx); err != nil {
			_ = services(s[:i]).StopAndCancel(ctx)
			return err
		}
	}
	return nil
}

func (s services) Stop(ctx context.Context) error {
	var errs []error
	for i := len(s) - 1; i >= 0; i-- {
		errs = append(errs, s[i].Stop(ctx))
	}
	return errors.Join(errs...)
}

func (s services) StopAndCancel(ctx context.Context) error {
	var errs []error
	for i := len(s) - 1; i >= 0; i-- {
		errs = append(errs, s[i].StopAndCancel(ctx))
	}
	return errors.Join(errs...)
}
