package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/sbadmin"
)

const usage = `usage: topology <command> [flags] FILE

  validate FILE         check the file without contacting any broker
  plan FILE             print the changes apply would make to the namespace
  apply [--prune] FILE  create and update entities until the namespace matches the file;
                        --prune also deletes entities the file does not declare and
                        replaces those whose requiresSession/requiresDuplicateDetection differ
  render [--resource-group RG] [--namespace-name NS] FILE
                        print a bash script of "az servicebus" commands creating the entities

namespace (plan, apply):
  --connection-string S  or SEQBUS_CONNECTION_STRING (UseDevelopmentEmulator=true: seqbus emulator)
  --namespace NS         or SEQBUS_NAMESPACE (NS.servicebus.windows.net, DefaultAzureCredential)

Exit codes: 0 success, 1 failure (invalid file, broker error), 2 usage,
3 plan: changes pending (with --detailed-exitcode).
`

// errUsage marks a command line the CLI does not understand (exit code 2).
var errUsage = errors.New("usage")

// errPending is returned by plan --detailed-exitcode when there are changes (exit code 3).
var errPending = errors.New("changes pending")

// cli holds what every subcommand writes to and how it reaches a namespace, so tests
// can capture output and plug in a fake.
type cli struct {
	stdout, stderr io.Writer
	// connect returns the Admin for the namespace flags.
	connect func(sbadmin.Config) (topology.Admin, error)
	// readFile reads the topology file.
	readFile func(string) ([]byte, error)
}

func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{
		stdout: stdout, stderr: stderr,
		connect: func(cfg sbadmin.Config) (topology.Admin, error) {
			c, err := sbadmin.Connect(cfg)
			if err != nil {
				return nil, err
			}
			return sbadmin.New(c), nil
		},
		readFile: os.ReadFile,
	}
}

// run dispatches args and returns the process exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		_, _ = fmt.Fprint(c.stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "validate":
		err = c.validate(args)
	case "plan":
		err = c.plan(ctx, args)
	case "apply":
		err = c.apply(ctx, args)
	case "render":
		err = c.render(args)
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprint(c.stdout, usage)
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errPending):
		return 3
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintf(c.stderr, "topology: %v\n\n%s", err, usage)
		return 2
	case errors.Is(err, topology.ErrInvalid):
		_, _ = fmt.Fprintf(c.stderr, "%v\n", err)
		return 1
	}
	_, _ = fmt.Fprintf(c.stderr, "topology: %v\n", err)
	return 1
}

// flags parses a subcommand's flags (which may come before or after FILE) and returns
// the file name.
func (c *cli) flags(fs *flag.FlagSet, args []string) (string, error) {
	fs.SetOutput(io.Discard)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", fmt.Errorf("%w: %s: %w", errUsage, fs.Name(), err)
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) != 1 {
		return "", fmt.Errorf("%w: %s takes one FILE, found %d", errUsage, fs.Name(), len(rest))
	}
	return rest[0], nil
}

// load reads, validates and expands the file, printing warnings on stderr.
func (c *cli) load(file string) (*topology.Namespace, error) {
	data, err := c.readFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %w", err)
	}
	ns, warns, err := topology.Load(file, data)
	for _, w := range warns {
		_, _ = fmt.Fprintln(c.stderr, w.String())
	}
	return ns, err
}

func (c *cli) validate(args []string) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	file, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	ns, err := c.load(file)
	if err != nil {
		return err
	}
	subs := 0
	for _, t := range ns.Topics {
		subs += len(t.Subscriptions)
	}
	_, err = fmt.Fprintf(c.stdout, "%s: valid (%d queues, %d topics, %d subscriptions)\n", file, len(ns.Queues), len(ns.Topics), subs)
	return err
}

type namespaceFlags struct {
	connStr, namespace string
}

func (n *namespaceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.connStr, "connection-string", os.Getenv("SEQBUS_CONNECTION_STRING"), "")
	fs.StringVar(&n.namespace, "namespace", os.Getenv("SEQBUS_NAMESPACE"), "")
}

func (c *cli) admin(n namespaceFlags) (topology.Admin, error) {
	if n.connStr == "" && n.namespace == "" {
		return nil, fmt.Errorf("%w: set --connection-string (SEQBUS_CONNECTION_STRING) or --namespace (SEQBUS_NAMESPACE)", errUsage)
	}
	a, err := c.connect(sbadmin.Config{ConnectionString: n.connStr, Namespace: n.namespace})
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return a, nil
}

// planFor loads the file and diffs it against the namespace.
func (c *cli) planFor(ctx context.Context, file string, n namespaceFlags) (topology.Admin, *topology.Plan, error) {
	want, err := c.load(file)
	if err != nil {
		return nil, nil, err
	}
	a, err := c.admin(n)
	if err != nil {
		return nil, nil, err
	}
	live, err := topology.Fetch(ctx, a, want)
	if err != nil {
		return nil, nil, fmt.Errorf("read namespace: %w", err)
	}
	return a, topology.Diff(want, live), nil
}

func (c *cli) plan(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var n namespaceFlags
	n.register(fs)
	detailed := fs.Bool("detailed-exitcode", false, "")
	file, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	_, p, err := c.planFor(ctx, file, n)
	if err != nil {
		return err
	}
	if err := p.Write(c.stdout); err != nil {
		return err
	}
	if *detailed && !p.Empty() {
		return errPending
	}
	return nil
}

func (c *cli) apply(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	var n namespaceFlags
	n.register(fs)
	prune := fs.Bool("prune", false, "")
	file, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	a, p, err := c.planFor(ctx, file, n)
	if err != nil {
		return err
	}
	if err := p.Write(c.stdout); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := topology.Apply(ctx, a, p, &topology.ApplyOptions{Prune: *prune, Logger: log})
	_, _ = fmt.Fprintf(c.stdout, "Applied %d changes", len(res.Applied))
	if len(res.Skipped) > 0 {
		_, _ = fmt.Fprintf(c.stdout, "; skipped %d destructive changes (rerun with --prune to make them)", len(res.Skipped))
	}
	_, _ = fmt.Fprintln(c.stdout, ".")
	return err
}

func (c *cli) render(args []string) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	var opts topology.RenderOptions
	fs.StringVar(&opts.ResourceGroup, "resource-group", "", "")
	fs.StringVar(&opts.Namespace, "namespace-name", "", "")
	file, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	ns, err := c.load(file)
	if err != nil {
		return err
	}
	return topology.Render(c.stdout, ns, &opts)
}
