package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// The operator commands (`worker sessions …`, `worker dlq …`) parse their flags into an options
// struct that checks itself, build an operator.Operator from the SEQBUS_* settings and run on
// it: each command is a struct embedding opBase, with Run(ctx, opts). Exit codes: 2 for a
// command line the command cannot run (a bad flag, a malformed session id), 1 for a failed
// operation.

// opBase is what every operator command carries.
type opBase struct {
	// Out receives the result: a table, or JSON with --json.
	Out io.Writer
	// Logger receives the changes the command makes, as JSON lines (stderr).
	Logger *slog.Logger
	Op     *operator.Operator
}

// options are a command's options: flags bound to them, positional arguments taken, and a
// check of the whole before anything connects.
type options interface {
	bind(fs *flag.FlagSet)
	setArgs(args []string) error
	Validate() error
}

// command is an operator command, run with its checked options.
type command[O options] interface {
	Run(ctx context.Context, opts O) error
}

// outputOpts is the output flag every command has.
type outputOpts struct {
	JSON bool
}

func (o *outputOpts) bindOutput(fs *flag.FlagSet) {
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON (for scripts) instead of a table")
}

// print writes v as indented JSON when asJSON, else calls text.
func (b *opBase) print(asJSON bool, v any, text func(w io.Writer) error) error {
	if !asJSON {
		return text(b.Out)
	}
	enc := json.NewEncoder(b.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkID refuses a session id Service Bus would refuse, before anything connects.
func checkID(id string) error {
	if err := publisher.ValidateSessionID(id); err != nil {
		return fmt.Errorf("session id: %w", err)
	}
	return nil
}

// noArgs refuses positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q", args[0])
	}
	return nil
}

// oneID takes exactly one session id.
func oneID(args []string, id *string) error {
	switch len(args) {
	case 0:
		return errors.New("a session id is required")
	case 1:
		*id = args[0]
		return nil
	}
	return fmt.Errorf("one session id expected, got %d arguments", len(args))
}

// parseArgs parses fs's flags anywhere among args and returns the positional arguments;
// everything after "--" is positional (a session id that starts with '-').
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// operatorCommand dispatches `worker sessions …` and `worker dlq …`.
func (c *cli) operatorCommand(ctx context.Context, group string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s needs a subcommand", errUsage, group)
	}
	sub, args := args[0], args[1:]
	name := group + " " + sub
	switch name {
	case "sessions list":
		return runCommand(ctx, c, name, args, &sessionsListOpts{}, func(b opBase) command[*sessionsListOpts] { return &sessionsList{b} })
	case "sessions show":
		return runCommand(ctx, c, name, args, &sessionsShowOpts{}, func(b opBase) command[*sessionsShowOpts] { return &sessionsShow{b} })
	case "sessions resume":
		return runCommand(ctx, c, name, args, &sessionsResumeOpts{}, func(b opBase) command[*sessionsResumeOpts] { return &sessionsResume{b} })
	case "sessions skip":
		return runCommand(ctx, c, name, args, &sessionsSkipOpts{}, func(b opBase) command[*sessionsSkipOpts] { return &sessionsSkip{b} })
	case "sessions retry-now":
		return runCommand(ctx, c, name, args, &sessionsRetryNowOpts{}, func(b opBase) command[*sessionsRetryNowOpts] { return &sessionsRetryNow{b} })
	case "dlq list":
		return runCommand(ctx, c, name, args, &dlqListOpts{}, func(b opBase) command[*dlqListOpts] { return &dlqList{b} })
	case "dlq replay":
		return runCommand(ctx, c, name, args, &dlqReplayOpts{}, func(b opBase) command[*dlqReplayOpts] { return &dlqReplay{b} })
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, name)
}

// runCommand parses and checks opts, builds the operator from the environment and runs the
// command.
func runCommand[O options](ctx context.Context, c *cli, name string, args []string, opts O, newCommand func(opBase) command[O]) error {
	fs := flag.NewFlagSet("worker "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.bind(fs)
	pos, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(c.stdout)
		_, _ = fmt.Fprintf(c.stdout, "usage: worker %s\n\n", commandUsage[name])
		fs.PrintDefaults()
		return nil
	}
	if err == nil {
		err = opts.setArgs(pos)
	}
	if err == nil {
		err = opts.Validate()
	}
	if err != nil {
		return &commandUsageError{name: name, err: err}
	}
	cfg, st, err := c.loadWorker()
	if err != nil {
		return err
	}
	var hook operatorSettings
	if err := worker.FromEnv(&hook); err != nil {
		return err
	}
	if err := hook.validate(cfg); err != nil {
		return err
	}
	logger := c.logger(st.level())
	cfg.Logger = logger
	op, _, closeAll, err := c.newOperator(ctx, cfg, hook, c.stderr, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	return newCommand(opBase{Out: c.stdout, Logger: logger, Op: op}).Run(ctx, opts)
}

// commandUsageError is a command line that command name cannot run: printed with the
// command's synopsis, exit code 2.
type commandUsageError struct {
	name string
	err  error
}

func (e *commandUsageError) Error() string { return e.name + ": " + e.err.Error() }
func (e *commandUsageError) Unwrap() error { return e.err }

// commandUsage is each command's synopsis, for -h and usage errors.
var commandUsage = map[string]string{
	"sessions list":      "sessions list [--parked] [--gap] [--stranded] [--blocked] [--retrying] [--ended] [--limit N] [--after ID] [--json]",
	"sessions show":      "sessions show ID [--wait D] [--max-messages N] [--json]",
	"sessions resume":    "sessions resume ID | --all-parked [--wait D] [--json]",
	"sessions skip":      "sessions skip ID [--to N] [--wait D] [--json]",
	"sessions retry-now": "sessions retry-now ID [--wait D] [--json]",
	"dlq list":           "dlq list [--session ID] [--reason R] [--limit N] [--json]",
	"doctor":             "doctor [--json]",
	"dlq replay":         "dlq replay --session ID | --all [--reason R] [--target ENTITY] [--dry-run] [--wait D] [--json]",
}

// operatorSettings are what the operator commands add to the worker's settings: a test hook.
type operatorSettings struct {
	// TestReplayCrashAfter is a test hook, ignored unless set (0): `worker dlq replay` exits
	// abruptly (exit code 137, no cleanup) once it has sent n copies, before it completes their
	// dead letters.
	TestReplayCrashAfter int `envconfig:"TEST_REPLAY_CRASH_AFTER" desc:"Test hook (0: off): dlq replay exits abruptly (code 137) once it has sent n copies, before it completes their dead letters."`
}

// validate checks the hook, and that the worker's settings name sessions to operate on.
func (s operatorSettings) validate(cfg worker.Config) error {
	var errs []error
	if cfg.Ordering != worker.OrderingSession {
		errs = append(errs, fmt.Errorf("SEQBUS_ORDERING: the operator commands work on sessions and their state; %q has neither", cfg.Ordering))
	}
	if s.TestReplayCrashAfter < 0 {
		errs = append(errs, fmt.Errorf("SEQBUS_TEST_REPLAY_CRASH_AFTER: must not be negative, got %d", s.TestReplayCrashAfter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
	}
	return nil
}

// newOperator builds the operator on the worker's own connections (worker.Connect): the
// sessions on a client with the SDK's retries off, everything else on the management client,
// and the same state store and lister, with the connections it runs on. progress receives the
// lines for the person at the terminal. closeAll closes what it opened.
func (c *cli) newOperator(ctx context.Context, cfg worker.Config, hook operatorSettings, progress io.Writer, logger *slog.Logger) (*operator.Operator, *worker.Connections, func(), error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, nil, err
	}
	conn, err := worker.Connect(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	closeAll := func() { conn.Close(ctx) }
	if err := conn.Ping(ctx); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	ocfg := operator.Config{
		Entity: cfg.Entity, Client: conn.Management, Sessions: conn.Source,
		SequenceProperty: cfg.SequenceProperty, LastProperty: cfg.LastProperty,
		Store: conn.Store, Lister: conn.Lister,
		Progress: progress, Logger: logger,
	}
	if conn.SQSSource != nil {
		// SQS: a message group is locked through the worker's own source, and the dead letters
		// are the redrive dead-letter queue's.
		dl, err := sqsadapter.NewDeadLetters(sqsadapter.DeadLettersConfig{
			Client: conn.SQS, QueueURL: conn.SQSSource.QueueURL(), DeadLetterQueueURL: conn.SQSSource.DeadLetterQueueURL(),
			Optional: operator.PropertyReplayedFromDLQ,
		})
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		ocfg.Sessions, ocfg.DeadLetters = conn.SQSSource, dl
	}
	if n := hook.TestReplayCrashAfter; n > 0 {
		logger.WarnContext(ctx, "worker: test hook armed: dlq replay exits abruptly after sending copies", slog.Int("after_copies", n))
		ocfg.AfterReplaySend = func(sent int) {
			if sent >= n {
				c.exit(137)
			}
		}
	}
	op, err := operator.New(ocfg)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return op, conn, closeAll, nil
}

// Formatting helpers of the tables.

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtSeq(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// clip shortens s to n runes for a table cell, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func joinSeqs(seqs []int64) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ", ")
}
