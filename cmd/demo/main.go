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
	"syscall"

	"github.com/seqbus/seqbus/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errDemoFailed is returned when the demo ran but did not restore every session's order.
var errDemoFailed = errors.New("demo: order not restored (see summary)")

// run parses args, runs the demo and returns the exit code: 0 when every session was restored,
// 1 when not (or the run failed), 2 for a bad command line. A canceled ctx (a signal) ends the
// demo early; the summary still prints.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := runDemo(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	default:
		_, _ = fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
}

var errUsage = errors.New("usage")

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: demo [flags]\n\nPublishes shuffled sessions (with duplicate copies) to an in-process Service Bus emulator\n(or, with -provider sqs, an in-process SQS FIFO with the state in Postgres), runs worker\nreplicas that restore their order, and prints a summary.\n\nFlags:")
		fs.PrintDefaults()
	}
	var o demo.Options
	fs.IntVar(&o.Sessions, "sessions", 8, "sessions to publish")
	fs.IntVar(&o.Messages, "messages", 50, "messages per session")
	fs.IntVar(&o.Duplicates, "duplicates", 3, "duplicate copies per session")
	fs.IntVar(&o.Replicas, "replicas", 2, "worker replicas")
	fs.Uint64Var(&o.Seed, "seed", 1, "shuffle seed")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (default 2m)")
	fs.StringVar(&o.Provider, "provider", demo.ProviderServiceBus, "broker: servicebus (the in-process emulator) or sqs (the in-process SQS FIFO; needs Postgres)")
	fs.StringVar(&o.DatabaseURL, "database-url", demo.DefaultDatabaseURL, "with -provider sqs: the Postgres database the demo makes a schema of its own in (dropped at the end)")
	fs.BoolVar(&o.Crash, "crash", false, "hard-stop one replica a third of the way through and start a replacement")
	fs.BoolVar(&o.Verbose, "v", false, "print every handled message as a JSON line on stdout")
	logLevel := fs.String("log-level", "warn", "log level of the components (debug, info, warn, error)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // -h: the flags are listed on stderr, as asked
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: demo takes no arguments, got %q", errUsage, fs.Args())
	}
	if o.Provider != demo.ProviderServiceBus && o.Provider != demo.ProviderSQS {
		return fmt.Errorf("%w: -provider %q is not one of %s, %s", errUsage, o.Provider, demo.ProviderServiceBus, demo.ProviderSQS)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: -log-level: %w", errUsage, err)
	}
	if o.Duplicates == 0 {
		o.Duplicates = -1 // -duplicates 0 asks for none; demo.Options reads 0 as "the default"
	}
	o.Out = stdout
	o.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	sum, err := demo.Run(ctx, o)
	if err != nil {
		return err
	}
	sum.Print(stdout)
	if !sum.OK() {
		return errDemoFailed
	}
	return nil
}
