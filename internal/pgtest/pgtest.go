package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvDSN is the environment variable holding the test database's connection string.
const EnvDSN = "SEQBUS_TEST_DATABASE_URL"

// DefaultDSN is used when EnvDSN is unset: the local cluster with trust auth.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// startWait bounds how long pgtest waits for a cluster it has started.
const startWait = 20 * time.Second

// DSN returns the test database's connection string.
func DSN() string {
	if v := os.Getenv(EnvDSN); v != "" {
		return v
	}
	return DefaultDSN
}

var (
	reachOnce sync.Once
	reachErr  error
)

// Options tune NewPool. A nil *Options means defaults.
type Options struct {
	// MaxConns is the pool size (default 8).
	MaxConns int32
	// Setup, when set, runs once on the new schema before the pool is returned, for example to
	// apply migrations:
	//
	//	Setup: func(ctx context.Context, p *pgxpool.Pool) error {
	//		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
	//		return err
	//	}
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
}

// SchemaDSN returns DSN() with schema as its search_path: what a process of its own (a worker,
// a command) is given to work in a schema NewPoolWithSchema made.
func SchemaDSN(schema string) string {
	dsn := DSN()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// NewPool returns a pool on a new schema named test_<random> that is the pool's search_path. The
// schema and pool are removed in t.Cleanup. It fails (CI=true) or skips the test when Postgres is
// unreachable.
func NewPool(t testing.TB, opts *Options) *pgxpool.Pool {
	t.Helper()
	pool, _ := NewPoolWithSchema(t, opts)
	return pool
}

// NewPoolWithSchema is NewPool that also returns the schema's name.
func NewPoolWithSchema(t testing.TB, opts *Options) (*pgxpool.Pool, string) {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	RequireServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	schema := "test_" + randomHex(8)
	admin, err := pgx.Connect(ctx, DSN())
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", redact(DSN()), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating schema %s: %v", schema, err)
	}

	cfg, err := pgxpool.ParseConfig(DSN())
	if err != nil {
		t.Fatalf("pgtest: parsing %s: %v", EnvDSN, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 8
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: opening pool on schema %s: %v", schema, err)
	}

	t.Cleanup(func() {
		pool.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		conn, err := pgx.Connect(cctx, DSN())
		if err != nil {
			t.Errorf("pgtest: connecting to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(cctx)
		if _, err := conn.Exec(cctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: dropping schema %s: %v", schema, err)
		}
	})
	if opts.Setup != nil {
		if err := opts.Setup(ctx, pool); err != nil {
			t.Fatalf("pgtest: setting up schema %s: %v", schema, err)
		}
	}
	return pool, schema
}

// RequireServer makes sure the test database answers, starting the local cluster once per process
// if needed. If it stays unreachable the test fails when CI=true and is skipped otherwise.
func RequireServer(t testing.TB) {
	t.Helper()
	requireReached(t, Reach(), os.Getenv("CI") == "true")
}

// Reach makes sure the test database answers, as RequireServer does, and returns why it does
// not: for a TestMain that has no test to skip.
func Reach() error {
	reachOnce.Do(func() { reachErr = reach() })
	return reachErr
}

// requireReached fails (in CI) or skips t when err says the server is unreachable.
func requireReached(t testing.TB, err error, ci bool) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("pgtest: Postgres at %s is unreachable: %v\n"+
		"Start a local server (for example: pg_ctlcluster --skip-systemctl-redirect <version> main start) "+
		"or set %s to a reachable database.", redact(DSN()), err, EnvDSN)
	if ci {
		t.Fatal(msg + " (CI=true: Postgres tests must not be skipped)")
		return
	}
	t.Skip(msg + " (skipped; with CI=true this fails)")
}

func reach() error {
	if err := ping(5 * time.Second); err == nil {
		return nil
	}
	startErr := startCluster()
	deadline := time.Now().Add(startWait)
	var err error
	for time.Now().Before(deadline) {
		if err = ping(2 * time.Second); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	if startErr != nil {
		return errors.Join(err, fmt.Errorf("starting the local cluster: %w", startErr))
	}
	return err
}

func ping(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// startCluster runs pg_ctlcluster for the first version found under /etc/postgresql.
func startCluster() error {
	versions, err := filepath.Glob("/etc/postgresql/*")
	if err != nil || len(versions) == 0 {
		return errors.New("no cluster under /etc/postgresql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect",
		filepath.Base(versions[0]), "main", "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctlcluster: %w: %s", err, out)
	}
	return nil
}

// redact hides a password in a DSN for messages.
func redact(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
