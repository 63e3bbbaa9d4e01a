package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

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
	o, stores, out, level, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
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
	var reports []soak.Report
	code := 0
	for _, store := range stores {
		o.Store = store
		r, err := soak.Run(ctx, o)
		if err != nil {
			fmt.Fprintf(stderr, "soak: %s store: %v\n", store, err)
			code = 1
			continue
		}
		if r.Violations > 0 || r.Missing > 0 {
			fmt.Fprintf(stderr, "soak: %s store: %d order violations, %d messages missing\n", store, r.Violations, r.Missing)
			code = 1
		}
		reports = append(reports, r)
	}
	if len(reports) == 0 {
		return 1
	}
	files, err := soak.WriteOutputs(out, reports)
	for _, f := range files {
		fmt.Fprintf(stdout, "wrote %s\n", f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		code = 1
	}
	if err := soak.WriteTable(stdout, reports); err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		code = 1
	}
	return code
}

func parseFlags(args []string, stderr io.Writer) (soak.Options, []string, string, slog.Level, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: soak [flags]   (many short sessions through several worker processes; see go doc ./cmd/soak)")
		fs.PrintDefaults()
	}
	var (
		o      soak.Options
		stores string
		out    string
		level  = slog.LevelWarn
	)
	fs.StringVar(&o.WorkerBin, "worker", "", "the worker binary the replicas run (default: go build ./cmd/worker into a temporary directory)")
	fs.IntVar(&o.Sessions, "sessions", 100_000, "sessions")
	fs.IntVar(&o.Messages, "messages", 3, "in-order messages per session")
	fs.IntVar(&o.Replicas, "replicas", 4, "worker processes")
	fs.IntVar(&o.SessionsPerReplica, "sessions-per-replica", 8, "SEQBUS_MAX_CONCURRENT_SESSIONS of each replica")
	fs.StringVar(&stores, "store", "servicebus,postgres", "state stores to soak, comma-separated: servicebus, postgres")
	fs.StringVar(&o.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "the Postgres database the postgres store gets a fresh schema in")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", soak.Options{}.WithDefaults().SweepInterval, "SEQBUS_SWEEP_INTERVAL of the replicas")
	fs.IntVar(&o.IdleIntervals, "idle-intervals", 5, "sweep intervals measured idle after the last message")
	fs.DurationVar(&o.Timeout, "timeout", soak.Options{}.WithDefaults().Timeout, "bound of each store's soak")
	fs.StringVar(&out, "out", "soak-out", "directory for soak.csv and the chart")
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return o, nil, "", level, err
	}
	if fs.NArg() > 0 {
		return o, nil, "", level, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var list []string
	for _, s := range strings.Split(stores, ",") {
		list = append(list, strings.TrimSpace(s))
	}
	for _, s := range list {
		v := o
		v.Store, v.WorkerBin = s, "built later" // an empty -worker is built in run
		if err := v.Validate(); err != nil {
			return o, nil, "", level, err
		}
	}
	return o, list, out, level, nil
}
