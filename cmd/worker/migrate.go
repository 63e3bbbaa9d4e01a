package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/migrations"
)

func (c *cli) migrate(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: migrate needs one of up, down, status", errUsage)
	}
	action := args[0]
	switch action {
	case "up", "down", "status":
	default:
		return fmt.Errorf("%w: unknown migrate action %q", errUsage, action)
	}
	cfg, err := workerconfig.LoadMigrate()
	if err != nil {
		return err
	}
	logger := c.logger(cfg.SlogLevel())
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", workerconfig.RedactDatabaseURL(cfg.DatabaseURL), err)
	}
	defer pool.Close()
	m := migrations.New(pool, &migrations.Config{Logger: logger})

	switch action {
	case "up", "down":
		var res *migrations.Result
		if action == "up" {
			res, err = m.Up(ctx, migrations.UpOptions{})
		} else {
			res, err = m.Down(ctx, migrations.DownOptions{})
		}
		if err != nil {
			return fmt.Errorf("migrate %s: %w", action, err)
		}
		if len(res.Migrations) == 0 {
			_, _ = fmt.Fprintf(c.stdout, "migrate %s: nothing to do\n", action)
		}
		for _, a := range res.Migrations {
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
