package migrations

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var embedded embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return embedded }

// DefaultLockKey is the pg_advisory_lock key held during a run (the bytes "seqbus" followed by 0x00 0x06).
const DefaultLockKey int64 = 0x7365716275730006

// Direction is the way a migration runs.
type Direction string

// Directions.
const (
	DirectionUp   Direction = "UP"
	DirectionDown Direction = "DOWN"
)

// Migration is one numbered schema change.
type Migration struct {
	// Version is the number in the file name (001 → 1).
	Version int
	// Name is the part of the file name after the number, without suffixes.
	Name string
	// SQLUp and SQLDown are the contents of the .up.sql and .down.sql files.
	SQLUp, SQLDown string
}

// String returns the migration's file stem, such as "001_session_state".
func (m Migration) String() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// Config configures a Migrator. A nil *Config means all defaults.
type Config struct {
	// FS holds the migration files at its root (default: the embedded files, see FS).
	FS fs.FS
	// Logger receives one record per applied migration (default: discard).
	Logger *slog.Logger
	// LockKey is the advisory lock key held during a run (default DefaultLockKey).
	LockKey int64
}

// Migrator applies and rolls back migrations on one database.
type Migrator struct {
	pool       *pgxpool.Pool
	logger     *slog.Logger
	lockKey    int64
	migrations []Migration // sorted by version
}

// New returns a Migrator for pool. It panics if the configured files are malformed (a programmer
// error: the files are embedded at build time).
func New(pool *pgxpool.Pool, cfg *Config) *Migrator {
	if pool == nil {
		panic("migrations: New: pool is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	fsys := cfg.FS
	if fsys == nil {
		fsys = embedded
	}
	ms, err := Load(fsys)
	if err != nil {
		panic(fmt.Sprintf("migrations: New: Config.FS: %v", err))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Migrator{
		pool:       pool,
		logger:     logger,
		lockKey:    cmp.Or(cfg.LockKey, DefaultLockKey),
		migrations: ms,
	}
}

// Migrations returns the known migrations, sorted by version.
func (m *Migrator) Migrations() []Migration { return slices.Clone(m.migrations) }

var fileName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// Load reads migrations from the root of fsys. Every version must have both an up and a down file,
// and names must match NNN_name.(up|down).sql. Other files are an error, so a typo cannot hide a
// migration.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migration directory: %w", err)
	}
	byVersion := map[int]*Migration{}
	type seen struct{ up, down bool }
	files := map[int]*seen{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		match := fileName.FindStringSubmatch(e.Name())
		if match == nil {
			return nil, fmt.Errorf("file %q: name must look like 001_name.up.sql or 001_name.down.sql", e.Name())
		}
		version, _ := strconv.Atoi(match[1])
		if version == 0 {
			return nil, fmt.Errorf("file %q: versions start at 001", e.Name())
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading %q: %w", e.Name(), err)
		}
		mig, ok := byVersion[version]
		if !ok {
			mig = &Migration{Version: version, Name: match[2]}
			byVersion[version] = mig
			files[version] = &seen{}
		} else if mig.Name != match[2] {
			return nil, fmt.Errorf("version %03d has two names: %q and %q", version, mig.Name, match[2])
		}
		if match[3] == "up" {
			mig.SQLUp = string(body)
			files[version].up = true
		} else {
			mig.SQLDown = string(body)
			files[version].down = true
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for v, mig := range byVersion {
		if !files[v].up || !files[v].down {
			return nil, fmt.Errorf("migration %s: needs both an .up.sql and a .down.sql file", mig)
		}
		out = append(out, *mig)
	}
	slices.SortFunc(out, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

// UpOptions tune Up. The zero value applies every pending migration.
type UpOptions struct {
	// TargetVersion stops after this version is applied (0: the latest).
	TargetVersion int
	// MaxSteps applies at most this many migrations (0: no limit).
	MaxSteps int
	// DryRun reports what would run without changing anything.
	DryRun bool
}

// DownOptions tune Down. The zero value rolls back one migration.
type DownOptions struct {
	// TargetVersion rolls back until this version is the highest applied; -1 rolls back
	// everything. 0 means unset: one step unless MaxSteps says otherwise.
	TargetVersion int
	// MaxSteps rolls back at most this many migrations (0: one when TargetVersion is 0, otherwise
	// no limit).
	MaxSteps int
	// DryRun reports what would run without changing anything.
	DryRun bool
}

// Applied is one migration that a run applied or rolled back.
type Applied struct {
	Migration Migration
	Duration  time.Duration
}

// Result describes a run.
type Result struct {
	Direction Direction
	// Migrations lists what ran (or, with DryRun, what would run), in order.
	Migrations []Applied
}

// Status is one migration as Status reports it.
type Status struct {
	Version int
	Name    string
	Applied bool
	// AppliedAt is when it was applied (zero when not applied).
	AppliedAt time.Time
	// Known is false for a version recorded in the database but absent from the files (applied by
	// a newer binary).
	Known bool
}

// versionTable records applied migrations.
const (
	sqlCreateVersionTable = `CREATE TABLE IF NOT EXISTS seqbus_migration (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	sqlSelectApplied   = `SELECT version, name, applied_at FROM seqbus_migration ORDER BY version`
	sqlInsertVersion   = `INSERT INTO seqbus_migration (version, name) VALUES ($1, $2)`
	sqlDeleteVersion   = `DELETE FROM seqbus_migration WHERE version = $1`
	sqlLock            = `SELECT pg_advisory_lock($1)`
	sqlUnlock          = `SELECT pg_advisory_unlock($1)`
	sqlVersionTableExt = `SELECT to_regclass('seqbus_migration') IS NOT NULL`
)

type appliedRow struct {
	name string
	at   time.Time
}

// Up applies pending migrations in version order.
func (m *Migrator) Up(ctx context.Context, opts UpOptions) (*Result, error) {
	if opts.TargetVersion < 0 || opts.MaxSteps < 0 {
		return nil, fmt.Errorf("migrations: up: TargetVersion and MaxSteps must not be negative")
	}
	if opts.TargetVersion > 0 && !m.known(opts.TargetVersion) {
		return nil, fmt.Errorf("migrations: up: target version %03d: %w", opts.TargetVersion, errUnknownVersion)
	}
	res := &Result{Direction: DirectionUp}
	err := m.locked(ctx, func(conn *pgxpool.Conn, applied map[int]appliedRow) error {
		var plan []Migration
		for _, mig := range m.migrations {
			if opts.TargetVersion > 0 && mig.Version > opts.TargetVersion {
				break
			}
			if _, ok := applied[mig.Version]; ok {
				continue
			}
			if opts.MaxSteps > 0 && len(plan) == opts.MaxSteps {
				break
			}
			plan = append(plan, mig)
		}
		return m.run(ctx, conn, DirectionUp, plan, opts.DryRun, res)
	})
	return res, err
}

// Down rolls back applied migrations, highest version first. By default it rolls back one.
func (m *Migrator) Down(ctx context.Context, opts DownOptions) (*Result, error) {
	if opts.TargetVersion < -1 || opts.MaxSteps < 0 {
		return nil, fmt.Errorf("migrations: down: TargetVersion must be ≥ -1 and MaxSteps ≥ 0")
	}
	if opts.TargetVersion > 0 && !m.known(opts.TargetVersion) {
		return nil, fmt.Errorf("migrations: down: target version %03d: %w", opts.TargetVersion, errUnknownVersion)
	}
	maxSteps := opts.MaxSteps
	if maxSteps == 0 && opts.TargetVersion == 0 {
		maxSteps = 1
	}
	res := &Result{Direction: DirectionDown}
	err := m.locked(ctx, func(conn *pgxpool.Conn, applied map[int]appliedRow) error {
		var plan []Migration
		for _, mig := range slices.Backward(m.migrations) {
			if opts.TargetVersion > 0 && mig.Version <= opts.TargetVersion {
				break
			}
			if _, ok := applied[mig.Version]; !ok {
				continue
			}
			if maxSteps > 0 && len(plan) == maxSteps {
				break
			}
			plan = append(plan, mig)
		}
		return m.run(ctx, conn, DirectionDown, plan, opts.DryRun, res)
	})
	return res, err
}

var errUnknownVersion = errors.New("no such migration")

// Status lists every known migration, and versions recorded in the database that the files do not
// know, in version order.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: acquiring connection: %w", err)
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, sqlVersionTableExt).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: status: checking version table: %w", err)
	}
	applied := map[int]appliedRow{}
	if exists {
		if applied, err = readApplied(ctx, conn); err != nil {
			return nil, fmt.Errorf("migrations: status: %w", err)
		}
	}
	out := make([]Status, 0, len(m.migrations))
	for _, mig := range m.migrations {
		row, ok := applied[mig.Version]
		out = append(out, Status{Version: mig.Version, Name: mig.Name, Applied: ok, AppliedAt: row.at, Known: true})
	}
	for v, row := range applied {
		if !m.known(v) {
			out = append(out, Status{Version: v, Name: row.name, Applied: true, AppliedAt: row.at})
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

func (m *Migrator) known(version int) bool {
	_, ok := slices.BinarySearchFunc(m.migrations, version, func(mig Migration, v int) int {
		return cmp.Compare(mig.Version, v)
	})
	return ok
}

// locked runs fn on one connection holding the advisory lock, with the version table present and
// the applied versions read after the lock was taken.
func (m *Migrator) locked(ctx context.Context, fn func(*pgxpool.Conn, map[int]appliedRow) error) (err error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: acquiring connection: %w", err)
	}
	if _, err := conn.Exec(ctx, sqlLock, m.lockKey); err != nil {
		conn.Release()
		return fmt.Errorf("migrations: taking advisory lock %d: %w", m.lockKey, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, sqlUnlock, m.lockKey); uerr != nil {
			// The lock is tied to the session: closing the connection releases it.
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, sqlCreateVersionTable); err != nil {
		return fmt.Errorf("migrations: creating version table: %w", err)
	}
	applied, err := readApplied(ctx, conn)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return fn(conn, applied)
}

func readApplied(ctx context.Context, conn *pgxpool.Conn) (map[int]appliedRow, error) {
	rows, err := conn.Query(ctx, sqlSelectApplied)
	if err != nil {
		return nil, fmt.Errorf("reading applied versions: %w", err)
	}
	applied := map[int]appliedRow{}
	var (
		v   int
		row appliedRow
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &row.name, &row.at}, func() error {
		applied[v] = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading applied versions: %w", err)
	}
	return applied, nil
}

// run executes plan, each migration and its version row in one transaction.
func (m *Migrator) run(ctx context.Context, conn *pgxpool.Conn, dir Direction, plan []Migration, dryRun bool, res *Result) error {
	for _, mig := range plan {
		if dryRun {
			res.Migrations = append(res.Migrations, Applied{Migration: mig})
			continue
		}
		start := time.Now()
		if err := applyOne(ctx, conn, dir, mig); err != nil {
			return fmt.Errorf("migrations: applying %s [%s]: %w", mig, dir, err)
		}
		d := time.Since(start)
		res.Migrations = append(res.Migrations, Applied{Migration: mig, Duration: d})
		m.logger.InfoContext(ctx, "migrations: applied",
			slog.String("migration", mig.String()), slog.String("direction", string(dir)),
			slog.Duration("duration", d))
	}
	return nil
}

func applyOne(ctx context.Context, conn *pgxpool.Conn, dir Direction, mig Migration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		body, record, args := mig.SQLUp, sqlInsertVersion, []any{mig.Version, mig.Name}
		if dir == DirectionDown {
			body, record, args = mig.SQLDown, sqlDeleteVersion, []any{mig.Version}
		}
		if _, err := tx.Exec(ctx, body); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, record, args...); err != nil {
			return fmt.Errorf("recording version: %w", err)
		}
		return nil
	})
}
