package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/sqs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run parses args, starts the emulator, prints its connection string and
// blocks until ctx is done. It returns the process exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "emulator: %v\n", err)
		return 2
	}
	cfg := opts.emulator
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: opts.level}))

	var sqsSrv *sqs.Service
	if opts.sqsAddr != "" {
		sqsSrv, err = sqs.Start(ctx, opts.sqsAddr, sqs.Config{Region: opts.sqsRegion, Logger: cfg.Logger})
		if err != nil {
			fmt.Fprintf(stderr, "emulator: -sqs-addr: %v\n", err)
			return 1
		}
	}
	srv, err := emulator.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "emulator: %v\n", err)
		if sqsSrv != nil {
			_ = sqsSrv.Close()
		}
		return 1
	}
	fmt.Fprintln(stdout, srv.ConnectionString())
	cfg.Logger.Info("emulator: ready", slog.String("amqp_addr", srv.AMQPAddr()), slog.String("http_addr", srv.HTTPAddr()), slog.String("cert_file", srv.CertFile()))
	if sqsSrv != nil {
		cfg.Logger.Info("emulator: sqs ready", slog.String("sqs_url", sqsSrv.URL()), slog.String("region", opts.sqsRegion))
	}

	<-ctx.Done()
	code := 0
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "emulator: close: %v\n", err)
		code = 1
	}
	if sqsSrv != nil {
		if err := sqsSrv.Close(); err != nil {
			fmt.Fprintf(stderr, "emulator: close: %v\n", err)
			code = 1
		}
	}
	return code
}

// options is what the command line asks for.
type options struct {
	emulator  emulator.Config
	level     slog.Level
	sqsAddr   string // empty: no SQS front
	sqsRegion string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts options
	cfg := &opts.emulator
	level := &opts.level
	env, err := pressureFromEnv(getenv)
	if err != nil {
		return options{}, err
	}
	var sessionRule broker.SessionIDRule
	if v := getenv(envSessionIDRequired); v != "" {
		if err := sessionRule.UnmarshalText([]byte(v)); err != nil {
			return options{}, fmt.Errorf("%s=%q: %w", envSessionIDRequired, v, err)
		}
	}
	fs.TextVar(level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.ConfigFile, "config", "", "Config.json file declaring queues, topics and subscriptions")
	fs.StringVar(&cfg.AMQPAddr, "amqp-addr", "127.0.0.1:5672", fmt.Sprintf("AMQP listen address (HOST:PORT); with -tls the default port is %d", emulator.DefaultTLSPort))
	var useTLS bool
	var tlsCfg emulator.TLSConfig
	fs.BoolVar(&useTLS, "tls", false, "serve the AMQP port over TLS only (AMQPS, HTTPS management, AMQP over WebSockets), with a generated self-signed certificate unless -tls-cert and -tls-key are given")
	fs.StringVar(&tlsCfg.CertFile, "tls-cert", "", "PEM certificate to serve with -tls (needs -tls-key)")
	fs.StringVar(&tlsCfg.KeyFile, "tls-key", "", "PEM key of -tls-cert")
	fs.StringVar(&tlsCfg.GeneratedCertFile, "tls-cert-out", "", "with -tls and no -tls-cert: where to write the generated certificate for clients to trust (default: a temporary file, logged)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:5300", "HTTP listen address for /health (HOST:PORT)")
	fs.StringVar(&cfg.KeyName, "key-name", envOr(getenv, "SEQBUS_EMULATOR_KEY_NAME", emulator.DefaultKeyName), "shared access key name (env SEQBUS_EMULATOR_KEY_NAME)")
	fs.StringVar(&cfg.Key, "key", envOr(getenv, "SEQBUS_EMULATOR_KEY", emulator.DefaultKey), "shared access key (env SEQBUS_EMULATOR_KEY)")
	fs.Int64Var(&cfg.MaxMessageSize, "max-message-size", emulator.DefaultMaxMessageSize, "largest message accepted, in bytes")
	fs.TextVar(&cfg.SessionIDRule, "session-id-required", sessionRule,
		"which session entities refuse receive-deferred, settlement of such messages and peek without session-id: partitioned (those with partitioning enabled, as the service does) or always (env "+envSessionIDRequired+")")
	p := &cfg.Pressure
	fs.DurationVar(&p.Latency, "latency", env.Latency, "delay of every answer, e.g. 5ms (env "+envLatency+")")
	fs.DurationVar(&p.LatencyJitter, "latency-jitter", env.LatencyJitter, "random extra delay of every answer, up to this (env "+envLatencyJitter+")")
	fs.IntVar(&p.CreditsPerSecond, "credits-per-second", env.CreditsPerSecond,
		fmt.Sprintf("throttle like the Standard tier: credits per second for the namespace, %d as on the service; 0 is off (env %s)", emulator.StandardCreditsPerSecond, envCredits))
	fs.Float64Var(&p.TransientErrorRate, "transient-error-rate", env.TransientErrorRate, "share (0 to 1) of operations refused with a transient error (env "+envTransient+")")
	fs.StringVar(&opts.sqsAddr, "sqs-addr", "", "also serve a local SQS (FIFO queues, JSON protocol) on this address (HOST:PORT); off when empty")
	fs.StringVar(&opts.sqsRegion, "sqs-region", sqs.DefaultRegion, "region in the local SQS's queue ARNs")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !useTLS && (set["tls-cert"] || set["tls-key"] || set["tls-cert-out"]) {
		return options{}, errors.New("-tls-cert, -tls-key and -tls-cert-out need -tls")
	}
	if useTLS {
		if !set["amqp-addr"] {
			cfg.AMQPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(emulator.DefaultTLSPort))
		}
		cfg.TLS = &tlsCfg
	}
	if cfg.KeyName == "" {
		return options{}, errors.New("-key-name must not be empty")
	}
	if cfg.Key == "" {
		return options{}, errors.New("-key must not be empty")
	}
	switch {
	case p.Latency < 0 || p.LatencyJitter < 0:
		return options{}, errors.New("-latency and -latency-jitter must not be negative")
	case p.CreditsPerSecond < 0:
		return options{}, errors.New("-credits-per-second must not be negative")
	case !(p.TransientErrorRate >= 0 && p.TransientErrorRate <= 1):
		return options{}, errors.New("-transient-error-rate must be between 0 and 1")
	}
	if set["sqs-region"] && opts.sqsAddr == "" {
		return options{}, errors.New("-sqs-region needs -sqs-addr")
	}
	if opts.sqsRegion == "" {
		return options{}, errors.New("-sqs-region must not be empty")
	}
	return opts, nil
}

// The environment variables that set the defaults of the pressure flags.
const (
	envLatency       = "SEQBUS_EMULATOR_LATENCY"
	envLatencyJitter = "SEQBUS_EMULATOR_LATENCY_JITTER"
	envCredits       = "SEQBUS_EMULATOR_CREDITS_PER_SECOND"
	envTransient     = "SEQBUS_EMULATOR_TRANSIENT_ERROR_RATE"
	// envSessionIDRequired sets the default of -session-id-required.
	envSessionIDRequired = "SEQBUS_EMULATOR_SESSION_ID_REQUIRED"
)

// pressureFromEnv reads the pressure defaults from the environment, naming the variable that
// does not parse.
func pressureFromEnv(getenv func(string) string) (emulator.Pressure, error) {
	var p emulator.Pressure
	var errs []error
	parse := func(key string, set func(string) error) {
		if v := getenv(key); v != "" {
			if err := set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	}
	parse(envLatency, func(v string) (err error) { p.Latency, err = time.ParseDuration(v); return err })
	parse(envLatencyJitter, func(v string) (err error) { p.LatencyJitter, err = time.ParseDuration(v); return err })
	parse(envCredits, func(v string) (err error) { p.CreditsPerSecond, err = strconv.Atoi(v); return err })
	parse(envTransient, func(v string) (err error) { p.TransientErrorRate, err = strconv.ParseFloat(v, 64); return err })
	return p, errors.Join(errs...)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
