package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/worker"
)

const usage = `usage: worker [run | relay | scaler | console | doctor | migrate up|down|status | sessions … | dlq … | help]

  run (default)   run the worker; configured by SEQBUS_* environment variables
  relay           publish the Postgres outbox to Service Bus (or SQS FIFO) in each session's order
  scaler          serve the scaling signal (GET /scale, /metrics) with the worker's settings;
                  consumes nothing (one small always-on pod, for scaling from zero)
  console         serve the web console (SEQBUS_CONSOLE_ADDR; SEQBUS_CONSOLE_TOKEN,
                  SEQBUS_CONSOLE_READ_TOKEN or SEQBUS_CONSOLE_PROXY_USER_HEADER required)
  doctor          check the namespace and entity (or the SQS queue) and the state store with the
                  worker's settings, with a live round trip of every broker call the worker makes
                  [--json] (exit 1: a check failed)
  migrate up      apply pending Postgres migrations (SEQBUS_DATABASE_URL)
  migrate down    roll back the latest migration
  migrate status  list migrations and whether they are applied
    up and down take [--target-version N] [--max-steps N] [--dry-run] (prints the SQL)

operator commands (the worker's SEQBUS_* settings; a table, or --json; -h for each one's flags):
  sessions list [--parked] [--gap] [--stranded] [--blocked] [--retrying] [--ended] [--limit N] [--after ID]
  sessions show ID                 the state; its messages at the broker, held in the store, dead-lettered
  sessions resume ID | --all-parked   a parked session continues where it stopped
  sessions skip ID [--to N]        give up the parked or missing sequence (or all below N)
  sessions retry-now ID            a session waiting for a released retry attempts it now
  dlq list [--session ID] [--reason R]
  dlq replay --session ID | --all [--reason R] [--target ENTITY] [--dry-run]
`

// errUsage marks a command line the CLI does not understand (exit code 2).
var errUsage = errors.New("usage")

// cli holds what every subcommand writes to, so tests can capture it.
type cli struct {
	stdout, stderr io.Writer
	// signals delivers shutdown signals (SIGINT, SIGTERM in production).
	signals func() (<-chan os.Signal, func())
	// exit ends the process at once, without deferred cleanup (os.Exit in production); only the
	// SEQBUS_TEST_CRASH_BEFORE_COMMIT test hook calls it.
	exit func(code int)
}

func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{stdout: stdout, stderr: stderr, signals: osSignals, exit: os.Exit}
}

func osSignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// logger writes JSON lines on stderr, with the trace_id of the active span where there is one.
func (c *cli) logger(level slog.Leveler) *slog.Logger {
	return slog.New(worker.LogHandler(slog.NewJSONHandler(c.stderr, &slog.HandlerOptions{Level: level})))
}

// run dispatches args and returns the process exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	cmd := "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run", "worker":
		err = c.runWorker(ctx)
	case "relay":
		err = c.relay(ctx, args)
	case "scaler":
		err = c.scaler(ctx, args)
	case "console":
		err = c.console(ctx, args)
	case "doctor":
		err = c.doctor(ctx, args)
	case "migrate":
		err = c.migrate(ctx, args)
	case "sessions", "dlq":
		err = c.operatorCommand(ctx, cmd, args)
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprint(c.stdout, usage)
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	if err == nil {
		return 0
	}
	var cu *commandUsageError
	switch {
	case errors.As(err, &cu):
		_, _ = fmt.Fprintf(c.stderr, "worker: %v\n\nusage: worker %s\n(worker %s -h describes its flags)\n", err, commandUsage[cu.name], cu.name)
		return 2
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintf(c.stderr, "worker: %v\n\n%s", err, usage)
		return 2
	case errors.Is(err, operator.ErrInvalidInput):
		_, _ = fmt.Fprintf(c.stderr, "worker: %v\n", err) // an argument the operation refused; nothing changed
		return 2
	}
	_, _ = fmt.Fprintf(c.stderr, "worker: %v\n", err)
	return 1
}
