package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/seqbus/seqbus/worker"
)

// errDoctorFailed is a doctor run with a failed check (exit code 1); the report says which.
var errDoctorFailed = errors.New("doctor: a check failed")

// doctor runs `worker doctor [--json]`: the worker's settings as `worker run` loads them, the
// checks of worker.RunDoctor, its report as a table or JSON.
func (c *cli) doctor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("worker doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the report as JSON (for scripts) instead of a table")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(c.stdout)
		_, _ = fmt.Fprintf(c.stdout, "usage: worker %s\n\n", commandUsage["doctor"])
		fs.PrintDefaults()
		return nil
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		return &commandUsageError{name: "doctor", err: err}
	}
	cfg, s, err := c.loadWorker()
	if err != nil {
		return err
	}
	// SIGINT or SIGTERM cuts the checks short; the scratch queue of the round trip is still
	// deleted, and the report shows what ran.
	sigs, stopSignals := c.signals()
	defer stopSignals()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, Logger: c.logger(s.level())})
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteTable(c.stdout)
	}
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	if rep.Failed() {
		return errDoctorFailed
	}
	return nil
}
