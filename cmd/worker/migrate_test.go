package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/migrations"
)

// A bad migrate command line exits 2 with a message, before anything connects.
func TestMigrateRefusesBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no action", []string{"migrate"}, "migrate needs one of up, down, status"},
		{"unknown action", []string{"migrate", "sideways"}, `unknown migrate action "sideways"`},
		{"negative steps", []string{"migrate", "up", "--max-steps", "-1"}, "--max-steps must not be negative"},
		{"negative target for up", []string{"migrate", "up", "--target-version", "-1"}, "--target-version must not be negative for up"},
		{"unknown target", []string{"migrate", "down", "--target-version", "999"}, "--target-version 999 is no migration this binary knows"},
		{"not a number", []string{"migrate", "up", "--max-steps", "many"}, "invalid value"},
		{"unknown flag", []string{"migrate", "up", "--force"}, "flag provided but not defined"},
		{"flags on status", []string{"migrate", "status", "--dry-run"}, "flag provided but not defined"},
		{"stray argument", []string{"migrate", "up", "now"}, `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, out, errOut := newTestCLI()
			require.Equal(t, 2, c.run(context.Background(), tt.args), errOut.String())
			require.Contains(t, errOut.String(), tt.want)
			require.Empty(t, out.String())
		})
	}
}

// migrate up and down go as far as --target-version and --max-steps say; --dry-run prints the
// SQL and changes nothing; a refused argument changes nothing either.
func TestMigrateFlags(t *testing.T) {
	databaseOfItsOwn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := migrations.Load(migrations.FS())
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 5)

	migrate := func(wantCode int, args ...string) string {
		t.Helper()
		c, out, errOut := newTestCLI()
		require.Equal(t, wantCode, c.run(ctx, append([]string{"migrate"}, args...)), errOut.String())
		return out.String() + errOut.String()
	}
	applied := func() int {
		t.Helper()
		return strings.Count(migrate(0, "status"), "true")
	}

	out := migrate(0, "up", "--dry-run")
	require.Contains(t, out, "-- UP 001_session_state (dry run: not applied)")
	require.Contains(t, out, all[0].SQLUp, "the dry run prints the SQL")
	require.Zero(t, applied(), "a dry run changes nothing")

	require.Contains(t, migrate(0, "up", "--max-steps", "2"), "UP "+all[1].String())
	require.Equal(t, 2, applied())
	migrate(2, "up", "--target-version", "-3")
	require.Equal(t, 2, applied(), "a refused argument changes nothing")
	out = migrate(0, "up", "--target-version", "4")
	require.Contains(t, out, "UP "+all[3].String())
	require.NotContains(t, out, all[4].String())
	require.Equal(t, 4, applied())

	out = migrate(0, "down", "--target-version", "1", "--dry-run")
	require.Contains(t, out, all[3].SQLDown)
	require.Contains(t, out, "-- DOWN "+all[1].String())
	require.Equal(t, 4, applied(), "a dry run changes nothing")
	out = migrate(0, "down", "--target-version", "1", "--max-steps", "1")
	require.Contains(t, out, "DOWN "+all[3].String())
	require.Equal(t, 3, applied())
	migrate(0, "down", "--target-version", "-1")
	require.Zero(t, applied(), "-1 rolls back everything")
	require.Contains(t, migrate(0, "up"), "UP "+all[len(all)-1].String())
	require.Equal(t, len(all), applied())
}
