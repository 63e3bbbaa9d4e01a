package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/worker"
)

// migrateSettings are what `worker migrate` reads from the environment: the database only.
type migrateSettings struct {
	worker.Database
	LogLevel string `envconfig:"LOG_LEVEL"`
}

// migrateOpts are the flags of `worker migrate up|down|status`.
type migrateOpts struct {
	action        string
	targetVersion int
	maxSteps      int
	dryRun        bool
}

// parseMigrate parses `migrate ACTION [flags]`; a bad command line changes nothing.
func parseMigrate(args []string) (*migrateOpts, error) {
	if len(args) == 0 {
		return nil, errors.New("migrate needs one of up, down, status")
	}
	o := &migrateOpts{action: args[0]}
	switch o.action {
	case "up", "down", "status":
	default:
		return nil, fmt.Errorf("unknown migrate action %q", o.action)
	}
	fs := flag.NewFlagSet("worker migrate "+o.action, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if o.action != "status" {
		fs.IntVar(&o.targetVersion, "target-version", 0, "up: stop once this version is applied; down: roll back until it is the highest applied (-1: everything)")
		fs.IntVar(&o.maxSteps, "max-steps", 0, "apply or roll back at most this many migrations (0: no limit; down without --target-version: 1)")
		fs.BoolVar(&o.dryRun, "dry-run", false, "print the SQL that would run and change nothing")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.maxSteps < 0:
		return nil, fmt.Errorf("--max-steps must not be negative, got %d", o.maxSteps)
	case o.action == "up" && o.targetVersion < 0:
		return nil, fmt.Errorf("--target-version must not be negative for up, got %d", o.targetVersion)
	case o.targetVersion < -1:
		return nil, fmt.Errorf("--target-version must be -1 (everything) or a version, got %d", o.targetVersion)
	}
	if o.targetVersion > 0 && !knownVersion(o.targetVersion) {
		return nil, fmt.Errorf("--target-version %03d is no migration this binary knows", o.targetVersion)
	}
	return o, nil
}

func knownVersion(v int) bool {
	all, err := migrations.Load(migrations.FS())
	if err != nil {
		return false
	}
	for _, m := range all {
		if m.Version == v {
			return true
		}
	}
	return false
}

func (c *cli) migrate(ctx context.Context, args []string) error {
	o, err := parseMigrate(args)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = fmt.Fprint(c.stdout, migrateUsage)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: migrate: %w", errUsage, err)
	}
	s := migrateSettings{LogLevel: defaultSettings().LogLevel}
	if err := worker.FromEnv(&s); err != nil {
		return err
	}
	st := defaultSettings()
	st.LogLevel = s.LogLevel
	if err := st.validate(); err != nil {
		return err
	}
	if s.DatabaseURL == "" {
		return errors.New("SEQBUS_DATABASE_URL: required for migrate")
	}
	logger := c.logger(st.level())
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("SEQBUS_DATABASE_URL: %s: %w", worker.RedactDatabaseURL(s.DatabaseURL), err)
	}
	defer pool.Close()
	m := migrations.New(pool, &migrations.Config{Logger: logger})

	switch o.action {
	case "up", "down":
		var res *migrations.Result
		if o.action == "up" {
			res, err = m.Up(ctx, migrations.UpOptions{TargetVersion: o.targetVersion, MaxSteps: o.maxSteps, DryRun: o.dryRun})
		} else {
			res, err = m.Down(ctx, migrations.DownOptions{TargetVersion: o.targetVersion, MaxSteps: o.maxSteps, DryRun: o.dryRun})
		}
		if err != nil {
			return fmt.Errorf("migrate %s: %w", o.action, err)
		}
		if len(res.Migrations) == 0 {
			_, _ = fmt.Fprintf(c.stdout, "migrate %s: nothing to do\n", o.action)
		}
		for _, a := range res.Migrations {
			if o.dryRun {
				sql := a.Migration.SQLUp
				if o.action == "down" {
					sql = a.Migration.SQLDown
				}
				_, _ = fmt.Fprintf(c.stdout, "-- %s %s (dry run: not applied)\n%s\n", res.Direction, a.Migration, sql)
				continue
			}
			_, _ = fmt.Fprintf(c.stdout, "%s %s (%s)\n", res.Direction, a.Migration, a.Duration.Round(time.Millisecond))
		}
		return nil
	default:
		st, err := m.Status(ctx)
		if err != nil {
			return fmt.Errorf("migrate status: %w", err)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED\tAPPLIED AT")
		for _, s := range st {
			at := ""
			if s.Applied {
				at = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			name := s.Name
			if !s.Known {
				name += " (unknown to this binary)"
			}
			_, _ = fmt.Fprintf(tw, "%03d\t%s\t%t\t%s\n", s.Version, name, s.Applied, at)
		}
		return tw.Flush()
	}
}

const migrateUsage = `usage: worker migrate up|down [--target-version N] [--max-steps N] [--dry-run]
       worker migrate status

  up       apply pending migrations (all, or up to --target-version, at most --max-steps)
  down     roll back the latest migration (or down to --target-version, -1 for everything,
           at most --max-steps)
  status   list the migrations and whether they are applied
  --dry-run prints the SQL that would run and changes nothing.
`
