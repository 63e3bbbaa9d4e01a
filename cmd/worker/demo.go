package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/seqbus/seqbus/internal/demo"
)

// errDemoFailed is returned when the demo ran but did not restore every session's order.
var errDemoFailed = errors.New("demo: order not restored (see summary)")

func (c *cli) demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var o demo.Options
	fs.IntVar(&o.Sessions, "sessions", 8, "sessions to publish")
	fs.IntVar(&o.Messages, "messages", 50, "messages per session")
	fs.IntVar(&o.Duplicates, "duplicates", 3, "duplicate copies per session")
	fs.IntVar(&o.Replicas, "replicas", 2, "worker replicas")
	fs.Uint64Var(&o.Seed, "seed", 1, "shuffle seed")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (default 2m)")
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: -log-level: %w", errUsage, err)
	}
	if o.Duplicates == 0 {
		o.Duplicates = -1 // -duplicates 0 asks for none; demo.Options reads 0 as "the default"
	}
	o.Out = c.stdout
	o.Logger = c.logger(level)

	// A signal ends the demo early; the summary still prints.
	sigs, stop := c.signals()
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()

	sum, err := demo.Run(ctx, o)
	if err != nil {
		return err
	}
	sum.Print(c.stdout)
	if !sum.OK() {
		return errDemoFailed
	}
	return nil
}
