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
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/seqbus/seqbus/internal/bench"
	"github.com/seqbus/seqbus/internal/benchreport"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	opts     bench.Options
	out      string
	format   string
	progress bool
	level    slog.Level
	cpuProf  string
	// report is the folder under which the run's dated report folder is created ("": the
	// outputs go to out, without a report.md).
	report string
}

// run parses args, runs the matrix, writes the outputs and prints a summary. It returns the exit
// code: 2 for bad flags, 1 when the run failed or a cell saw an order violation or did not finish.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if cfg.cpuProf != "" {
		f, err := os.Create(cfg.cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: -cpuprofile: %v\n", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "bench: -cpuprofile: %v\n", err)
			}
		}()
	}
	o := cfg.opts
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.level}))
	// The SDK retries some refusals itself (a throttled settlement or send) and says so only in
	// its own log: at debug level those retries show with the components' logs.
	sbadapter.LogSDKRetries(o.Logger)
	cells := len(o.WithDefaults().Cells())
	var bar *progressbar.ProgressBar
	if cfg.progress {
		bar = progressbar.NewOptions(cells, progressbar.OptionSetWriter(stderr), progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish())
	}
	start := time.Now()
	out := cfg.out
	var env benchreport.Environment
	if cfg.report != "" {
		env = benchreport.Collect(ctx, ".", start, "bench", args)
		if out, err = benchreport.NewDir(cfg.report, "bench", env); err != nil {
			fmt.Fprintf(stderr, "bench: -report: %v\n", err)
			return 1
		}
	}
	results, err := bench.Run(ctx, o, func(done int, next bench.Cell) {
		if bar == nil {
			return
		}
		_ = bar.Set(done)
		if done < cells {
			bar.Describe(next.String())
		}
	})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil && len(results) == 0 {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return finish(outcome{cfg: cfg, out: out, env: env, elapsed: time.Since(start), cells: cells, results: results, err: err}, stdout, stderr)
}

// outcome is what one run of the matrix left: the results of the cells it ran and where they go.
type outcome struct {
	cfg     config
	out     string // the output folder (-out, or the report folder)
	env     benchreport.Environment
	elapsed time.Duration
	cells   int // the cells the matrix has
	results []bench.Result
	err     error // why the run stopped before its last cell
}

// finish writes the outputs of r (the CSV, the charts and, with -report, report.md), reports
// the failed cells and prints the summary table. It returns the exit code.
func finish(r outcome, stdout, stderr io.Writer) int {
	cfg, out, results, cells, elapsed := r.cfg, r.out, r.results, r.cells, r.elapsed
	code := 0
	var problems []string
	problem := func(format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		problems = append(problems, p)
		fmt.Fprintln(stderr, p)
		code = 1
	}
	files, werr := bench.WriteOutputs(out, cfg.format, results)
	for _, f := range files {
		fmt.Fprintf(stdout, "wrote %s\n", f)
	}
	if werr != nil {
		fmt.Fprintf(stderr, "bench: %v\n", werr)
		return 1
	}
	if r.err != nil {
		problem("bench: stopped after %d of %d cells: %v", len(results), cells, r.err)
	}
	for _, c := range results {
		if c.Err != nil || c.Violations > 0 || c.Incomplete > 0 {
			problem("bench: cell %s: %d order violations, %d sessions unfinished, error: %v", c.Cell, c.Violations, c.Incomplete, c.Err)
			for _, v := range c.ViolationSamples {
				problem("bench: cell %s: %s", c.Cell, v)
			}
		}
	}
	var table bytes.Buffer
	if err := bench.WriteTable(io.MultiWriter(stdout, &table), results); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		code = 1
	}
	if cfg.opts.Provider == bench.ProviderSQS {
		w := io.MultiWriter(stdout, &table)
		fmt.Fprintln(w, "\nbudgets:")
		for _, b := range bench.SQSBudgets(results) {
			fmt.Fprintln(w, b)
		}
	}
	fmt.Fprintf(stdout, "%d cells in %s\n", len(results), elapsed.Round(time.Second))
	if cfg.report == "" {
		return code
	}
	said := fmt.Sprintf("%d of %d cells, every one finished in order", len(results), cells)
	if code != 0 {
		said = fmt.Sprintf("%d of %d cells run; failures below", len(results), cells)
	}
	rel := make([]string, len(files))
	for i, f := range files {
		rel[i] = filepath.Base(f)
	}
	path, err := benchreport.Write(out, benchreport.Report{
		Title: "bench", Env: r.env, Elapsed: elapsed, Outcome: said,
		Summary: table.String(), Problems: problems, Files: rel,
	})
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return code
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bench [flags]   (the matrix replicas × pressure × exception rate × arrival; see go doc ./cmd/bench)")
		fs.PrintDefaults()
	}
	var (
		cfg        config
		quick      bool
		replicas   = listFlag[int]{parse: strconv.Atoi}
		pressures  = listFlag[bench.Pressure]{parse: func(s string) (bench.Pressure, error) { return bench.Pressure(s), nil }}
		exceptions = listFlag[float64]{parse: func(s string) (float64, error) { return parseShare("exception rate", s) }}
		arrivals   = listFlag[bench.Arrival]{parse: func(s string) (bench.Arrival, error) { return bench.Arrival(s), nil }}
		early      = listFlag[worker.EarlyMessages]{parse: func(s string) (worker.EarlyMessages, error) { return worker.EarlyMessages(s), nil }}
		entity     sbadapter.Entity
		retryBase  time.Duration
	)
	o := &cfg.opts
	fs.Func("provider", "broker of the cells: servicebus (the in-process emulator, or -connection-string) or sqs (the in-process SQS FIFO, state and early messages in Postgres at -database-url, beside a plain AWS SDK FIFO consumer; pressure none or latency) (default servicebus)", func(v string) error {
		o.Provider = bench.Provider(v)
		return nil
	})
	fs.BoolVar(&quick, "quick", false, "a small matrix that finishes in under a minute (replicas 1,4; exceptions 0,10%; 8 sessions × 20 messages); other flags still apply on top")
	fs.Var(&replicas, "replicas", "worker replicas, comma-separated (default 1,2,4,8)")
	fs.Var(&pressures, "pressure", "pressure levels: none, throttle, latency (default all)")
	fs.Var(&exceptions, "exception-rate", "share of handler calls that fail, e.g. 0,1%,10% or 0,0.01,0.1 (default 0,1%,10%)")
	fs.Var(&arrivals, "arrival", "in-order, shuffled, reversed (default in-order,shuffled)")
	fs.Var(&early, "early", "where the replicas keep early messages beyond the reorder window, comma-separated, each a cell of its own beside the other: defer, store (SEQBUS_EARLY_MESSAGES; store needs -database-url and runs on a partitioned queue; default the worker's, defer)")
	fs.Func("reorder-window", "the replicas' SEQBUS_REORDER_WINDOW (default the worker's); smaller than -messages, early messages reach -early", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not a number: %w", err)
		}
		o.ReorderWindow = &n
		return nil
	})
	fs.IntVar(&o.Sessions, "sessions", 0, "sessions per cell (default 60)")
	fs.IntVar(&o.Messages, "messages", 0, "messages per session (default 50)")
	fs.IntVar(&o.SessionsPerReplica, "sessions-per-replica", 0, "sessions each replica handles at once (default 4)")
	fs.IntVar(&o.SessionConnections, "session-connections", 0, "connections each replica locks sessions on (SEQBUS_SESSION_CONNECTIONS; the plain consumer's too), dividing -sessions-per-replica (default 1)")
	fs.IntVar(&o.ThrottleCredits, "throttle-credits", 0, "credits per second of the throttle pressure (default 1000, the Standard tier's)")
	fs.DurationVar(&o.Latency, "latency", 0, "delay of every answer with the latency pressure (default 5ms)")
	fs.Func("offered", "add to each throttle cell a phase offered this share of the credit-limited rate the cell measured, e.g. 80% (default none)", func(v string) error {
		r, err := parseShare("offered", v)
		o.OfferedShare = r
		return err
	})
	fs.BoolVar(&o.OfferedTrickle, "offered-trickle", false, "with -offered: publish the messages one at a time, round robin over as many sessions as the replicas hold at once, instead of one batch per session")
	pipelineRuns := fs.Bool("pipeline-runs", worker.DefaultConfig().PipelineRuns, "run the replicas with SEQBUS_PIPELINE_RUNS (a recorded run's completions in the background, the worker's default); -pipeline-runs=false awaits each completion")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "keep the replicas' state in Postgres at this URL (SEQBUS_STATE_STORE=postgres, migrations applied at start) instead of the Service Bus session state")
	fs.DurationVar(&retryBase, "retry-base", 0, "the engine's first wait after a failed handler call (default 2ms, doubling up to 20ms, 10 attempts)")
	fs.DurationVar(&o.CellTimeout, "cell-timeout", 0, "bound of one cell (default 3m)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the shuffles (default 1)")
	fs.StringVar(&o.ConnectionString, "connection-string", "", "run against this namespace instead of the in-process emulator (pressure none only)")
	fs.StringVar(&entity.Queue, "queue", "", "with -connection-string: the session-enabled queue, used by the bench alone")
	fs.StringVar(&entity.Topic, "topic", "", "with -connection-string: the topic (with -subscription)")
	fs.StringVar(&entity.Subscription, "subscription", "", "with -connection-string: the session-enabled subscription of -topic")
	fs.StringVar(&cfg.out, "out", "bench-out", "directory for results.csv and the charts")
	fs.StringVar(&cfg.report, "report", "", "write the outputs and a report.md (commit, date, machine, Go version, command line, summary) into a new folder under this one, named <date>-bench-<commit>, instead of -out (e.g. docs/reports)")
	fs.StringVar(&cfg.format, "format", "svg", "format of the charts: svg or png")
	fs.BoolVar(&cfg.progress, "progress", true, "show a progress bar on stderr")
	fs.StringVar(&cfg.cpuProf, "cpuprofile", "", "write a CPU profile of the run to this file, its samples labelled by cell and side (worker, plain, publisher; the emulator's by cell alone): go tool pprof -tags")
	fs.TextVar(&cfg.level, "log-level", slog.LevelError, "log level of the components: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.AwaitCompletions = !*pipelineRuns
	if quick {
		q := bench.Quick()
		o.Replicas, o.Pressures, o.ExceptionRates, o.Arrivals = q.Replicas, q.Pressures, q.ExceptionRates, q.Arrivals
		o.Sessions = cmpOr(o.Sessions, q.Sessions)
		o.Messages = cmpOr(o.Messages, q.Messages)
		o.CellTimeout = cmpOr(o.CellTimeout, q.CellTimeout)
	}
	setList(&o.Replicas, replicas)
	setList(&o.Pressures, pressures)
	setList(&o.ExceptionRates, exceptions)
	setList(&o.Arrivals, arrivals)
	setList(&o.Early, early)
	switch {
	case retryBase < 0:
		return config{}, errors.New("-retry-base must not be negative")
	case retryBase > 0:
		o.HandlerRetry = bench.DefaultHandlerRetry
		o.HandlerRetry.Base, o.HandlerRetry.Cap = retryBase, 10*retryBase
	}
	if o.ConnectionString != "" {
		o.Entity = entity
	} else if entity != (sbadapter.Entity{}) {
		return config{}, errors.New("-queue, -topic and -subscription need -connection-string")
	}
	if err := o.WithDefaults().Validate(); err != nil {
		return config{}, err
	}
	if cfg.out == "" {
		return config{}, errors.New("-out must not be empty")
	}
	if cfg.report != "" {
		var both bool
		fs.Visit(func(f *flag.Flag) { both = both || f.Name == "out" })
		if both {
			return config{}, errors.New("-out and -report: set one (-report creates the output folder)")
		}
	}
	if cfg.format != "svg" && cfg.format != "png" {
		return config{}, fmt.Errorf("-format %q: want svg or png", cfg.format)
	}
	return cfg, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func setList[T any](dst *[]T, l listFlag[T]) {
	if l.set {
		*dst = l.values
	}
}

// listFlag is a comma-separated list flag.
type listFlag[T any] struct {
	parse  func(string) (T, error)
	values []T
	set    bool
}

func (l *listFlag[T]) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(l.values))
	for i, v := range l.values {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

func (l *listFlag[T]) Set(s string) error {
	l.values, l.set = nil, true
	for part := range strings.SplitSeq(s, ",") {
		v, err := l.parse(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		l.values = append(l.values, v)
	}
	return nil
}

// parseShare reads the share of setting name as a fraction (0.1) or a percentage (10%).
func parseShare(name, s string) (float64, error) {
	p, pct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(p, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, s, err)
	}
	if pct {
		v /= 100
	}
	return v, nil
}
