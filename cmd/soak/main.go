package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seqbus/seqbus/internal/benchreport"
	"github.com/seqbus/seqbus/internal/soak"
	"github.com/seqbus/seqbus/internal/workerbin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs a soak per store and writes the outputs. It returns the exit code: 2 for
// bad flags, 1 when a soak failed or saw an order violation or a missing message.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	o, stores, out := f.soak, f.stores, f.out
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.level}))
	if o.WorkerBin == "" {
		dir, err := os.MkdirTemp("", "seqbus-soak-")
		if err != nil {
			fmt.Fprintf(stderr, "soak: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		o.WorkerBin = filepath.Join(dir, "worker")
		fmt.Fprintln(stderr, "soak: building the worker (give -worker to use a built binary)")
		if err := workerbin.Build(ctx, o.WorkerBin, stderr); err != nil {
			fmt.Fprintf(stderr, "soak: build the worker (run from the repository, or give -worker): %v\n", err)
			return 1
		}
	}
	start := time.Now()
	if f.report != "" {
		kind := "soak"
		if f.idle {
			kind = "soak-idle"
		}
		f.env = benchreport.Collect(ctx, ".", start, "soak", args)
		if out, err = benchreport.NewDir(f.report, kind, f.env); err != nil {
			fmt.Fprintf(stderr, "soak: -report: %v\n", err)
			return 1
		}
	}
	if f.idle {
		return runIdle(ctx, f, o, start, out, stdout, stderr)
	}
	var reports []soak.Report
	var problems []string
	problem := func(format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		problems = append(problems, p)
		fmt.Fprintln(stderr, p)
	}
	for _, store := range stores {
		o.Store = store
		r, err := soak.Run(ctx, o)
		if err != nil {
			problem("soak: %s store: %v", store, err)
			continue
		}
		if r.Violations > 0 || r.Missing > 0 {
			problem("soak: %s store: %d order violations, %d messages missing", store, r.Violations, r.Missing)
		}
		reports = append(reports, r)
	}
	if len(reports) == 0 {
		return 1
	}
	return finish(outcome{flags: f, out: out, elapsed: time.Since(start), stores: len(stores), reports: reports, problems: problems}, stdout, stderr)
}

// outcome is what a soak of each store left: the reports of those that ran and the problems
// the run reported.
type outcome struct {
	flags    flags
	out      string // the output folder (-out, or the report folder)
	elapsed  time.Duration
	stores   int // the stores asked for
	reports  []soak.Report
	problems []string
}

// finish writes the outputs of r (soak.csv, the chart and, with -report, report.md) and prints
// the table. It returns the exit code: 1 when a store's soak failed, saw an order violation or
// left a message unhandled.
func finish(r outcome, stdout, stderr io.Writer) int {
	code := 0
	if len(r.problems) > 0 {
		code = 1
	}
	files, err := soak.WriteOutputs(r.out, r.reports)
	for _, f := range files {
		fmt.Fprintf(stdout, "wrote %s\n", f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		code = 1
	}
	var table bytes.Buffer
	if err := soak.WriteTable(io.MultiWriter(stdout, &table), r.reports); err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		code = 1
	}
	if r.flags.report == "" {
		return code
	}
	said := fmt.Sprintf("%d of %d stores, every message handled once in order", len(r.reports), r.stores)
	if len(r.problems) > 0 {
		said = fmt.Sprintf("%d of %d stores finished; problems below", len(r.reports), r.stores)
	}
	return writeReport(r.out, benchreport.Report{Title: "soak", Env: r.flags.env, Elapsed: r.elapsed, Outcome: said,
		Summary: table.String(), Problems: r.problems, Files: bases(files)}, code, stdout, stderr)
}

// writeReport writes report.md and returns code, or 1 when it cannot.
func writeReport(dir string, r benchreport.Report, code int, stdout, stderr io.Writer) int {
	path, err := benchreport.Write(dir, r)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return code
}

// bases returns the file names of paths.
func bases(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

// flags are the parsed command line.
type flags struct {
	soak   soak.Options
	stores []string
	out    string
	level  slog.Level
	// idle: the idle measurement (-idle) on ended sessions, with the -worker and, when given,
	// the -before-worker.
	idle        bool
	ended       []int
	beforeBin   string
	workerEnv   []string
	idleOptions soak.IdleOptions
	// report is the folder under which the run's dated report folder is created ("": the
	// outputs go to out, without a report.md); env describes the run for it.
	report string
	env    benchreport.Environment
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: soak [flags]   (many short sessions through several worker processes; see go doc ./cmd/soak)")
		fs.PrintDefaults()
	}
	var (
		f      = flags{level: slog.LevelWarn}
		o      = &f.soak
		stores string
		ended  string
	)
	fs.StringVar(&o.WorkerBin, "worker", "", "the worker binary the replicas run (default: go build ./cmd/worker into a temporary directory)")
	fs.IntVar(&o.Sessions, "sessions", 100_000, "sessions")
	fs.IntVar(&o.Messages, "messages", 3, "in-order messages per session")
	fs.IntVar(&o.Replicas, "replicas", 4, "worker processes (1 with -idle unless given)")
	fs.IntVar(&o.SessionsPerReplica, "sessions-per-replica", 8, "SEQBUS_MAX_CONCURRENT_SESSIONS of each replica")
	fs.StringVar(&stores, "store", "servicebus,postgres", "state stores to soak, comma-separated: servicebus, postgres")
	fs.StringVar(&o.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "the Postgres database the postgres store gets a fresh schema in")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", soak.Options{}.WithDefaults().SweepInterval, "SEQBUS_SWEEP_INTERVAL of the replicas")
	fs.IntVar(&o.IdleIntervals, "idle-intervals", 5, "sweep intervals measured idle after the last message (with -idle: on the ended sessions)")
	fs.DurationVar(&o.Timeout, "timeout", soak.Options{}.WithDefaults().Timeout, "bound of each store's soak (with -idle: of each measurement, seeding and catch-up included; default 30m)")
	fs.DurationVar(&o.CatchUp, "catch-up", soak.Options{}.WithDefaults().CatchUp, "bound of the wait for the sweeper to catch up before the idle intervals (with -idle: for the worker to come within the budget)")
	fs.StringVar(&f.out, "out", "soak-out", "directory for soak.csv and the chart")
	fs.StringVar(&f.report, "report", "", "write the outputs and a report.md (commit, date, machine, Go version, command line, table) into a new folder under this one, named <date>-soak-<commit> (with -idle: <date>-soak-idle-<commit>), instead of -out (e.g. docs/reports)")
	fs.TextVar(&f.level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&f.idle, "idle", false, "measure only the idle cost on ended sessions (-ended), no soak: seed them as the worker leaves them, start the worker, measure -idle-intervals sweep intervals")
	fs.StringVar(&ended, "ended", "1000,10000,100000", "with -idle: numbers of ended sessions, comma-separated (0, none ever handled, is always measured first)")
	fs.StringVar(&f.beforeBin, "before-worker", "", "with -idle: a second worker binary, measured side by side as \"before\" (a build from before the sweeper lease)")
	var workerEnv string
	fs.StringVar(&workerEnv, "worker-env", "", "settings the -worker gets on top of the soak's, comma-separated KEY=VALUE (e.g. SEQBUS_SCALE_INTERVAL=24h)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, s := range strings.Split(stores, ",") {
		f.stores = append(f.stores, strings.TrimSpace(s))
	}
	if f.report != "" {
		var both bool
		fs.Visit(func(fl *flag.Flag) { both = both || fl.Name == "out" })
		if both {
			return f, errors.New("-out and -report: set one (-report creates the output folder)")
		}
	}
	for _, s := range f.stores {
		v := *o
		v.Store, v.WorkerBin = s, "built later" // an empty -worker is built in run
		if err := v.Validate(); err != nil {
			return f, err
		}
	}
	if workerEnv != "" {
		for _, kv := range strings.Split(workerEnv, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return f, fmt.Errorf("-worker-env: %q is not KEY=VALUE", kv)
			}
			f.workerEnv = append(f.workerEnv, strings.TrimSpace(kv))
		}
	}
	o.Env = f.workerEnv
	if !f.idle {
		return f, nil
	}
	for _, s := range strings.Split(ended, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return f, fmt.Errorf("-ended: %q is not a number of sessions", s)
		}
		f.ended = append(f.ended, n)
	}
	replicas := 1
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "replicas" {
			replicas = o.Replicas
		}
	})
	timeout := soak.IdleOptions{}.WithDefaults().Timeout
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "timeout" {
			timeout = o.Timeout
		}
	})
	f.idleOptions = soak.IdleOptions{Ended: f.ended, Messages: o.Messages, Replicas: replicas, DatabaseURL: o.DatabaseURL,
		SweepInterval: o.SweepInterval, Intervals: o.IdleIntervals, CatchUp: o.CatchUp, Timeout: timeout}
	for _, s := range f.stores {
		v := f.idleOptions
		v.Store, v.Workers = s, []soak.Worker{{Name: "check", Bin: "built later"}}
		if err := v.WithDefaults().Validate(); err != nil {
			return f, err
		}
	}
	return f, nil
}

// runIdle runs the idle measurement of each store and prints its table (with -report, into
// report.md too).
func runIdle(ctx context.Context, f flags, o soak.Options, start time.Time, out string, stdout, stderr io.Writer) int {
	idle := f.idleOptions
	idle.Logger = o.Logger
	name := "after"
	if len(f.workerEnv) > 0 {
		name += " (" + strings.Join(f.workerEnv, ",") + ")"
	}
	idle.Workers = []soak.Worker{{Name: name, Bin: o.WorkerBin, Lease: true, Env: f.workerEnv}}
	if f.beforeBin != "" {
		idle.Workers = append([]soak.Worker{{Name: "before", Bin: f.beforeBin}}, idle.Workers...)
	}
	var reports []soak.IdleReport
	var problems []string
	code := 0
	for _, store := range f.stores {
		idle.Store = store
		r, err := soak.RunIdle(ctx, idle)
		reports = append(reports, r...)
		if err != nil {
			p := fmt.Sprintf("soak: %s store: %v", store, err)
			problems = append(problems, p)
			fmt.Fprintln(stderr, p)
			code = 1
		}
	}
	var table bytes.Buffer
	if err := soak.WriteIdleTable(io.MultiWriter(stdout, &table), reports); err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		code = 1
	}
	if f.report == "" {
		return code
	}
	said := fmt.Sprintf("idle cost measured on %d stores", len(f.stores))
	if len(problems) > 0 {
		said = "idle measurement failed; problems below"
	}
	return writeReport(out, benchreport.Report{Title: "soak -idle", Env: f.env, Elapsed: time.Since(start), Outcome: said,
		Summary: table.String(), Problems: problems}, code, stdout, stderr)
}
