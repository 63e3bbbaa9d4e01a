package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// settings are what the binary adds to worker.Config, read from the same environment: which
// handler runs, the log level, and a test hook. Their defaults are in defaultSettings.
type settings struct {
	Handler    string `envconfig:"HANDLER" desc:"Handler of the worker binary: log (print each message), noop, http (POST to the handler URL) or journal (postgres only)."`
	HandlerURL string `envconfig:"HANDLER_URL" redact:"url" desc:"Target of the http handler; its password is redacted in logs."`
	LogLevel   string `envconfig:"LOG_LEVEL" desc:"Level of the JSON logs on stderr: debug, info, warn or error."`
	// TestCrashBeforeCommit is a test hook, ignored unless set (0): the worker exits abruptly
	// (exit code 137, no cleanup) after the handler ran for the n-th message, before the state
	// advance commits. The end-to-end tests use it to crash inside the journal transaction.
	TestCrashBeforeCommit int `envconfig:"TEST_CRASH_BEFORE_COMMIT" desc:"Test hook (0: off): exit abruptly (code 137) after the handler ran for the n-th message, before the state advance commits."`
}

func defaultSettings() settings { return settings{Handler: handler.DefaultName, LogLevel: "info"} }

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// level returns LogLevel as a slog level (validate refuses an unknown one).
func (s settings) level() slog.Level { return logLevels[strings.ToLower(s.LogLevel)] }

// LogValue renders s for logs, the handler URL's password redacted.
func (s settings) LogValue() slog.Value { return worker.SettingsLogValue(s) }

// validate reports every problem of s, each naming its variable.
func (s settings) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !handler.Known(s.Handler) {
		bad("SEQBUS_HANDLER: %q is not one of %s", s.Handler, strings.Join(handler.Names(), ", "))
	}
	if s.Handler == "http" {
		if s.HandlerURL == "" {
			bad("SEQBUS_HANDLER_URL: required when SEQBUS_HANDLER=http")
		} else if u, err := url.Parse(s.HandlerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("SEQBUS_HANDLER_URL: %q is not an http(s) URL", worker.RedactDatabaseURL(s.HandlerURL))
		}
	}
	if _, ok := logLevels[strings.ToLower(s.LogLevel)]; !ok {
		levels := slices.Sorted(func(yield func(string) bool) {
			for l := range logLevels {
				if !yield(l) {
					return
				}
			}
		})
		bad("SEQBUS_LOG_LEVEL: %q is not one of %s", s.LogLevel, strings.Join(levels, ", "))
	}
	if s.TestCrashBeforeCommit < 0 {
		bad("SEQBUS_TEST_CRASH_BEFORE_COMMIT: must not be negative, got %d", s.TestCrashBeforeCommit)
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
	}
	return nil
}

// loadWorker reads worker.Config and the binary's settings from the environment and sets the
// handler they name: what `worker run` and the operator commands share.
func (c *cli) loadWorker() (worker.Config, settings, error) {
	cfg, s := worker.DefaultConfig(), defaultSettings()
	if err := errors.Join(worker.FromEnv(&cfg), worker.FromEnv(&s)); err != nil {
		return cfg, s, err
	}
	if err := s.validate(); err != nil {
		return cfg, s, err
	}
	if s.Handler == "journal" {
		// The journal is the worker's Config.Journal, which needs the postgres store: say so in
		// terms of the variable that chose it.
		if cfg.StateStore != worker.StateStorePostgres {
			return cfg, s, errors.New("invalid configuration:\nSEQBUS_HANDLER: journal requires SEQBUS_STATE_STORE=postgres (it writes in the state store's transaction)")
		}
		cfg.Journal = true
		return cfg, s, nil
	}
	h, err := handler.New(s.Handler, handler.Options{Out: c.stdout, URL: s.HandlerURL, Timeout: cfg.HandlerTimeout})
	if err != nil {
		return cfg, s, fmt.Errorf("SEQBUS_HANDLER: %w", err)
	}
	cfg.Handler = h
	return cfg, s, nil
}

// runWorker loads the configuration, builds the worker and runs it until a signal arrives. The
// first SIGINT/SIGTERM drains within SEQBUS_SHUTDOWN_TIMEOUT; a second one cancels the work in
// hand. A stop that had to cancel the work because the timeout passed exits non-zero.
func (c *cli) runWorker(ctx context.Context) error {
	// Take the signals first: a SIGTERM that arrives while the worker starts must stop it
	// gracefully, not kill the process with Go's default action.
	sigs, stopSignals := c.signals()
	defer stopSignals()
	cfg, s, err := c.loadWorker()
	if err != nil {
		return err
	}
	logger := c.logger(s.level())

	tp, shutdownTracing, err := worker.TracingFromEnv(ctx, os.Getenv)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()
	cfg.Logger, cfg.TracerProvider = logger, tp
	if s.TestCrashBeforeCommit > 0 {
		logger.WarnContext(ctx, "worker: test hook armed: exiting abruptly before a commit", slog.Int("after_message", s.TestCrashBeforeCommit))
		cfg.Middleware = append(cfg.Middleware, crashAfter(s.TestCrashBeforeCommit, c.exit))
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err // before any log line: a bad setting prints a plain message
	}
	logger.InfoContext(ctx, "worker: starting", slog.Any("config", cfg), slog.Any("settings", s))
	return c.serve(ctx, w, sigs, logger, cfg.SoftStopTimeout.String())
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

// runnable is what serve runs: the worker Client or the Relay.
type runnable interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
}

// serve starts w and waits for a signal, the end of ctx or (when given) done, then stops it
// gracefully (within the soft stop timeout of its configuration); a second signal cancels the
// work in hand. It returns the stop's error: a stop that had to cancel the work in hand because
// the timeout passed, or that failed, makes the process exit non-zero.
func (c *cli) serve(ctx context.Context, w runnable, sigs <-chan os.Signal, logger *slog.Logger, timeout string, done ...<-chan struct{}) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	var finished <-chan struct{}
	if len(done) > 0 {
		finished = done[0]
	}
	select {
	case sig := <-sigs:
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("signal", sig.String()), slog.String("shutdown_timeout", timeout))
	case <-ctx.Done():
		logger.InfoContext(ctx, "worker: stopping gracefully", slog.String("reason", context.Cause(ctx).Error()))
	case <-finished:
	}
	stopCtx := context.WithoutCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		return err
	case sig := <-sigs:
		logger.WarnContext(ctx, "worker: second signal, cancelling in-flight work", slog.String("signal", sig.String()))
		_ = w.StopAndCancel(stopCtx)
		return <-stopped
	}
}
