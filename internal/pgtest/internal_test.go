package pgtest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder captures Fatal and Skip instead of ending the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = args[0].(string) }
func (r *recorder) Skip(args ...any)  { r.skip = args[0].(string) }

func TestRequireReached(t *testing.T) {
	t.Parallel()
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	tests := []struct {
		name      string
		err       error
		ci        bool
		wantFatal bool
		wantSkip  bool
	}{
		{name: "reachable", err: nil, ci: true},
		{name: "down locally skips", err: down, ci: false, wantSkip: true},
		{name: "down in CI fails", err: down, ci: true, wantFatal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			requireReached(r, tt.err, tt.ci)
			require.Equal(t, tt.wantFatal, r.fatal != "", "fatal: %q", r.fatal)
			require.Equal(t, tt.wantSkip, r.skip != "", "skip: %q", r.skip)
			for _, msg := range []string{r.fatal, r.skip} {
				if msg != "" {
					require.Contains(t, msg, "connection refused")
					require.Contains(t, msg, EnvDSN)
					require.Contains(t, msg, "pg_ctlcluster")
				}
			}
		})
	}
}
