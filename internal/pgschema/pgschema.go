package pgschema

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/migrations"
)

// Schema is a migrated schema and a pool whose search_path it is.
type Schema struct {
	// Name is the schema's name; URL the database URL with the schema as its search_path, for a
	// process of its own.
	Name, URL string
	Pool      *pgxpool.Pool
	base      string
}

// Create creates the schema <prefix>_<unix nanoseconds> in the database at url, opens a pool of
// at most maxConns connections on it (0: pgxpool's default) and applies every migration.
func Create(ctx context.Context, url, prefix string, maxConns int32) (*Schema, error) {
	s := &Schema{Name: fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()), base: url}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.Name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", s.Name, err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		s.Drop()
		return nil, fmt.Errorf("the database URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.Name
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if s.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		s.Drop()
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	if _, err := migrations.New(s.Pool, nil).Up(ctx, migrations.UpOptions{}); err != nil {
		s.Drop()
		return nil, fmt.Errorf("migrate schema %s: %w", s.Name, err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s.URL = url + sep + "search_path=" + s.Name
	return s, nil
}

// Drop closes the pool and drops the schema with everything in it.
func (s *Schema) Drop() {
	if s.Pool != nil {
		s.Pool.Close()
	}
	c, err := pgx.Connect(context.Background(), s.base)
	if err != nil {
		return
	}
	_, _ = c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	_ = c.Close(context.Background())
}
