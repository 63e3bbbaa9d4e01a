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

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
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
	cfg, err := workerconfig.LoadOperator(handler.Names())
	if err != nil {
		return err
	}
	logger := c.logger(cfg.SlogLevel())
	op, closeAll, err := c.newOperator(ctx, cfg, logger)
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
	"sessions list":   "sessions list [--parked] [--gap] [--stranded] [--blocked] [--ended] [--limit N] [--json]",
	"sessions show":   "sessions show ID [--wait D] [--max-messages N] [--json]",
	"sessions resume": "sessions resume ID | --all-parked [--wait D] [--json]",
	"sessions skip":   "sessions skip ID [--to N] [--wait D] [--json]",
	"dlq list":        "dlq list [--session ID] [--reason R] [--limit N] [--json]",
	"dlq replay":      "dlq replay --session ID | --all [--reason R] [--target ENTITY] [--dry-run] [--wait D] [--json]",
}

// mgmtRetries are the SDK retries of the client for what holds no session lock (the
// dead-letter queue, the replay sender, session listings).
var mgmtRetries = azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second}

// scanConcurrency is how many sessions `sessions list` reads at once with Service Bus session
// state, where reading one is a lock, a read and a release.
const scanConcurrency = 16

// newOperator builds the operator from the settings, as the worker builds its own pieces: the
// sessions on a client with the SDK's retries off (sbadapter, "Lock tenure"), everything else on
// a client with a few retries, and the same state store. closeAll closes what it opened.
func (c *cli) newOperator(ctx context.Context, cfg *workerconfig.OperatorConfig, logger *slog.Logger) (op *operator.Operator, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for _, f := range closers {
			f()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	closeClient := func(sb *azservicebus.Client) func() {
		return func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = sb.Close(cctx)
		}
	}

	var sessions, mgmt *azservicebus.Client
	mgmtOpts := &azservicebus.ClientOptions{RetryOptions: mgmtRetries}
	if cfg.ConnectionString != "" {
		if sessions, err = sbadapter.NewClientFromConnectionString(cfg.ConnectionString, nil); err == nil {
			mgmt, err = azservicebus.NewClientFromConnectionString(cfg.ConnectionString, mgmtOpts)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("SEQBUS_CONNECTION_STRING: %s", workerconfig.RedactConnectionString(err.Error()))
		}
	} else {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, nil, fmt.Errorf("SEQBUS_NAMESPACE: Entra ID credential: %w", err)
		}
		if sessions, err = sbadapter.NewClient(cfg.Namespace, cred, nil); err == nil {
			mgmt, err = azservicebus.NewClient(cfg.Namespace, cred, mgmtOpts)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("SEQBUS_NAMESPACE: %w", err)
		}
	}
	closers = append(closers, closeClient(sessions), closeClient(mgmt))

	entity := sbadapter.Entity{Queue: cfg.Queue, Topic: cfg.Topic, Subscription: cfg.Subscription}
	source, err := sbadapter.NewSource(sessions, sbadapter.Config{Entity: entity, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	ocfg := operator.Config{
		Entity: entity, Client: mgmt, Sessions: source,
		SequenceProperty: cfg.SequenceProperty, LastProperty: cfg.LastProperty,
		Progress: c.stderr, Logger: logger,
	}
	switch cfg.StateStore {
	case workerconfig.StateStorePostgres:
		pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, nil, fmt.Errorf("SEQBUS_DATABASE_URL: %s: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), err)
		}
		closers = append(closers, pool.Close)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("SEQBUS_DATABASE_URL: %s: cannot reach the database: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), err)
		}
		pg, err := postgres.New(pool, &postgres.Config{Entity: entity.String()})
		if err != nil {
			return nil, nil, err
		}
		ocfg.Store, ocfg.Lister = pg, pg
	default:
		mgmtSource, err := sbadapter.NewSource(mgmt, sbadapter.Config{Entity: entity, Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		sb := sbstate.New(&sbstate.Config{MaxStateSize: int(cfg.StateMaxBytes)})
		ocfg.Store = sb
		ocfg.Lister = sessionstate.NewScanLister(sessionstate.ScanConfig{
			IDs: mgmtSource.ListSessionsWithState, Source: source, Store: sb, Concurrency: scanConcurrency,
		})
	}
	if n := cfg.TestReplayCrashAfter; n > 0 {
		logger.WarnContext(ctx, "worker: test hook armed: dlq replay exits abruptly after sending copies", slog.Int("after_copies", n))
		ocfg.AfterReplaySend = func(sent int) {
			if sent >= n {
				c.exit(137)
			}
		}
	}
	op, err = operator.New(ocfg)
	if err != nil {
		return nil, nil, err
	}
	return op, closeAll, nil
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
