package migrations_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
)

// testFS has three migrations; each up records itself in applied_log so tests can count how often
// it ran.
func testFS() fstest.MapFS {
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	return fstest.MapFS{
		"001_log.up.sql":   f("CREATE TABLE applied_log (version int NOT NULL); INSERT INTO applied_log VALUES (1);"),
		"001_log.down.sql": f("DROP TABLE applied_log;"),
		"002_a.up.sql":     f("CREATE TABLE a (id int); INSERT INTO applied_log VALUES (2);"),
		"002_a.down.sql":   f("DROP TABLE a;"),
		"003_b.up.sql":     f("CREATE TABLE b (id int); INSERT INTO applied_log VALUES (3);"),
		"003_b.down.sql":   f("DROP TABLE b;"),
	}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok))
	return ok
}

func versions(res *migrations.Result) []int {
	var out []int
	for _, a := range res.Migrations {
		out = append(out, a.Migration.Version)
	}
	return out
}

func appliedVersions(t *testing.T, m *migrations.Migrator) []int {
	t.Helper()
	st, err := m.Status(context.Background())
	require.NoError(t, err)
	var out []int
	for _, s := range st {
		if s.Applied {
			out = append(out, s.Version)
		}
	}
	return out
}

func TestEmbedded_UpCreatesStateTableAndDownDropsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	m := migrations.New(pool, nil)

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, st)
	require.Equal(t, "session_state", st[0].Name)
	require.False(t, st[0].Applied, "nothing is applied on a fresh schema")

	res, err := m.Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Migrations[0].Migration.Version)
	require.True(t, tableExists(t, pool, "seqbus_session_state"))

	res, err = m.Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	require.Empty(t, res.Migrations, "a second Up has nothing to do")

	for range len(m.Migrations()) {
		_, err = m.Down(ctx, migrations.DownOptions{})
		require.NoError(t, err)
	}
	require.False(t, tableExists(t, pool, "seqbus_session_state"))
	require.Empty(t, appliedVersions(t, m))
}

func TestUp_Options(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        migrations.UpOptions
		wantRan     []int
		wantApplied []int
	}{
		{name: "all", opts: migrations.UpOptions{}, wantRan: []int{1, 2, 3}, wantApplied: []int{1, 2, 3}},
		{name: "max steps", opts: migrations.UpOptions{MaxSteps: 2}, wantRan: []int{1, 2}, wantApplied: []int{1, 2}},
		{name: "target", opts: migrations.UpOptions{TargetVersion: 1}, wantRan: []int{1}, wantApplied: []int{1}},
		{name: "dry run", opts: migrations.UpOptions{DryRun: true}, wantRan: []int{1, 2, 3}, wantApplied: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, nil)
			m := migrations.New(pool, &migrations.Config{FS: testFS()})
			res, err := m.Up(context.Background(), tt.opts)
			require.NoError(t, err)
			require.Equal(t, migrations.DirectionUp, res.Direction)
			require.Equal(t, tt.wantRan, versions(res))
			require.Equal(t, tt.wantApplied, appliedVersions(t, m))
		})
	}
}

func TestDown_Options(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        migrations.DownOptions
		wantRan     []int
		wantApplied []int
	}{
		{name: "default is one step", opts: migrations.DownOptions{}, wantRan: []int{3}, wantApplied: []int{1, 2}},
		{name: "max steps", opts: migrations.DownOptions{MaxSteps: 2}, wantRan: []int{3, 2}, wantApplied: []int{1}},
		{name: "target", opts: migrations.DownOptions{TargetVersion: 1}, wantRan: []int{3, 2}, wantApplied: []int{1}},
		{name: "everything", opts: migrations.DownOptions{TargetVersion: -1}, wantRan: []int{3, 2, 1}, wantApplied: nil},
		{name: "dry run", opts: migrations.DownOptions{TargetVersion: -1, DryRun: true}, wantRan: []int{3, 2, 1}, wantApplied: []int{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t, nil)
			m := migrations.New(pool, &migrations.Config{FS: testFS()})
			_, err := m.Up(ctx, migrations.UpOptions{})
			require.NoError(t, err)

			res, err := m.Down(ctx, tt.opts)
			require.NoError(t, err)
			require.Equal(t, migrations.DirectionDown, res.Direction)
			require.Equal(t, tt.wantRan, versions(res))
			require.Equal(t, tt.wantApplied, appliedVersions(t, m))
		})
	}
}

func TestUp_FailingMigrationNamedAndRolledBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	fsys := testFS()
	fsys["002_a.up.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE a (id int); SELECT no_such_function();")}
	m := migrations.New(pool, &migrations.Config{FS: fsys})

	_, err := m.Up(ctx, migrations.UpOptions{})
	require.ErrorContains(t, err, "applying 002_a [UP]")
	require.ErrorContains(t, err, "no_such_function")

	require.Equal(t, []int{1}, appliedVersions(t, m), "001 committed, 002 not recorded")
	require.False(t, tableExists(t, pool, "a"), "002's first statement rolled back with it")
	require.False(t, tableExists(t, pool, "b"), "the run stops at the failure")
}

func TestUp_ConcurrentReplicasApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const replicas = 6
	pool := pgtest.NewPool(t, &pgtest.Options{MaxConns: replicas + 2})

	var wg sync.WaitGroup
	errs := make([]error, replicas)
	ran := make([][]int, replicas)
	for i := range replicas {
		wg.Go(func() {
			// Each replica has its own Migrator, as separate processes would.
			m := migrations.New(pool, &migrations.Config{FS: testFS()})
			res, err := m.Up(ctx, migrations.UpOptions{})
			errs[i] = err
			if res != nil {
				ran[i] = versions(res)
			}
		})
	}
	wg.Wait()

	total := 0
	for i := range replicas {
		require.NoError(t, errs[i], "replica %d", i)
		total += len(ran[i])
	}
	require.Equal(t, 3, total, "three migrations applied in all, across replicas")

	rows, err := pool.Query(ctx, "SELECT version, count(*) FROM applied_log GROUP BY version ORDER BY version")
	require.NoError(t, err)
	counts := map[int]int{}
	for rows.Next() {
		var v, n int
		require.NoError(t, rows.Scan(&v, &n))
		counts[v] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, counts)
}

func TestStatus_ReportsVersionsUnknownToTheFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	_, err := migrations.New(pool, &migrations.Config{FS: testFS()}).Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)

	older := testFS()
	delete(older, "003_b.up.sql")
	delete(older, "003_b.down.sql")
	st, err := migrations.New(pool, &migrations.Config{FS: older}).Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, 3)
	require.Equal(t, migrations.Status{Version: 3, Name: "b", Applied: true, AppliedAt: st[2].AppliedAt, Known: false}, st[2])
	require.False(t, st[2].AppliedAt.IsZero())
	require.True(t, st[0].Known)
}

func TestOptions_Invalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	m := migrations.New(pool, &migrations.Config{FS: testFS()})

	_, err := m.Up(ctx, migrations.UpOptions{TargetVersion: 9})
	require.ErrorContains(t, err, "target version 009")
	_, err = m.Down(ctx, migrations.DownOptions{TargetVersion: -2})
	require.Error(t, err)
	require.Empty(t, appliedVersions(t, m))
}

func TestLoad_Validation(t *testing.T) {
	t.Parallel()
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		wantErr string
	}{
		{name: "bad name", fsys: fstest.MapFS{"1_x.up.sql": f("")}, wantErr: `"1_x.up.sql"`},
		{name: "missing down", fsys: fstest.MapFS{"001_x.up.sql": f("")}, wantErr: "001_x: needs both"},
		{name: "two names", fsys: fstest.MapFS{"001_x.up.sql": f(""), "001_y.down.sql": f("")}, wantErr: "two names"},
		{name: "version zero", fsys: fstest.MapFS{"000_x.up.sql": f(""), "000_x.down.sql": f("")}, wantErr: "start at 001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := migrations.Load(tt.fsys)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}

	ms, err := migrations.Load(migrations.FS())
	require.NoError(t, err)
	require.Equal(t, "001_session_state", ms[0].String())
}

func TestDown_FailingMigrationNamedAndRolledBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, nil)
	fsys := testFS()
	fsys["003_b.down.sql"] = &fstest.MapFile{Data: []byte("DROP TABLE b; DROP TABLE no_such_table;")}
	m := migrations.New(pool, &migrations.Config{FS: fsys})
	_, err := m.Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)

	_, err = m.Down(ctx, migrations.DownOptions{})
	require.ErrorContains(t, err, "applying 003_b [DOWN]")
	require.Equal(t, []int{1, 2, 3}, appliedVersions(t, m), "003 is still recorded")
	require.True(t, tableExists(t, pool, "b"), "003's first down statement rolled back with it")
}
