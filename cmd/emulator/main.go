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

	"github.com/seqbus/seqbus/emulator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run parses args, starts the emulator, prints its connection string and
// blocks until ctx is done. It returns the process exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, level, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "emulator: %v\n", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	srv, err := emulator.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "emulator: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, srv.ConnectionString())
	cfg.Logger.Info("emulator: ready", slog.String("amqp_addr", srv.AMQPAddr()), slog.String("http_addr", srv.HTTPAddr()))

	<-ctx.Done()
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "emulator: close: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (emulator.Config, slog.Level, error) {
	fs := flag.NewFlagSet("emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg emulator.Config
	level := slog.LevelInfo
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.ConfigFile, "config", "", "Config.json file declaring queues, topics and subscriptions")
	fs.StringVar(&cfg.AMQPAddr, "amqp-addr", "127.0.0.1:5672", "AMQP listen address (HOST:PORT)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:5300", "HTTP listen address for /health (HOST:PORT)")
	fs.StringVar(&cfg.KeyName, "key-name", envOr(getenv, "SEQBUS_EMULATOR_KEY_NAME", emulator.DefaultKeyName), "shared access key name (env SEQBUS_EMULATOR_KEY_NAME)")
	fs.StringVar(&cfg.Key, "key", envOr(getenv, "SEQBUS_EMULATOR_KEY", emulator.DefaultKey), "shared access key (env SEQBUS_EMULATOR_KEY)")
	fs.Int64Var(&cfg.MaxMessageSize, "max-message-size", emulator.DefaultMaxMessageSize, "largest message accepted, in bytes")
	if err := fs.Parse(args); err != nil {
		return emulator.Config{}, 0, err
	}
	if fs.NArg() > 0 {
		return emulator.Config{}, 0, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.KeyName == "" {
		return emulator.Config{}, 0, errors.New("-key-name must not be empty")
	}
	if cfg.Key == "" {
		return emulator.Config{}, 0, errors.New("-key must not be empty")
	}
	return cfg, level, nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
