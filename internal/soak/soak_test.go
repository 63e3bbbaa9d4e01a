package soak_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/soak"
)

// TestSoakSmall runs a small soak with each store and checks that its report adds up: every
// message handled once and in order, a rate for every tenth, the replicas' calls and RSS read,
// the sweeper's reads counted with the Service Bus store and none with Postgres.
func TestSoakSmall(t *testing.T) {
	for _, store := range []string{soak.StoreServiceBus, soak.StorePostgres} {
		t.Run(store, func(t *testing.T) {
			o := soak.Options{
				WorkerBin: workerBin, Sessions: 60, Messages: 3, Replicas: 2, SessionsPerReplica: 4,
				Store: store, SweepInterval: time.Second, IdleIntervals: 2, CatchUp: 30 * time.Second,
				Timeout: 3 * time.Minute,
			}
			if store == soak.StorePostgres {
				pgtest.RequireServer(t)
				o.DatabaseURL = pgtest.DSN()
			}
			r, err := soak.Run(context.Background(), o)
			require.NoError(t, err)
			require.Zero(t, r.Violations, "order violations")
			require.Zero(t, r.Missing, "messages never handled")
			for k, rate := range r.SliceRates {
				require.Positive(t, rate, "rate of tenth %d", k+1)
			}
			require.Len(t, r.PeakRSS, 2)
			for _, p := range r.PeakRSS {
				require.Greater(t, p, int64(1<<20), "peak RSS")
			}
			// Each message is at least received and completed.
			require.GreaterOrEqual(t, r.PerMessage(r.EngineCalls), 1.0)
			require.Positive(t, r.Credits)
			if store == soak.StoreServiceBus {
				require.Positive(t, r.SweepCalls, "the sweeper reads the sessions the run changed")
			} else {
				require.Zero(t, r.SweepCalls, "with Postgres the sweeper asks the database, not the broker")
			}

			dir := t.TempDir()
			files, err := soak.WriteOutputs(dir, []soak.Report{r})
			require.NoError(t, err)
			require.Equal(t, []string{filepath.Join(dir, "soak.csv"), filepath.Join(dir, soak.ChartFile)}, files)
			csv, err := os.ReadFile(files[0])
			require.NoError(t, err)
			require.Equal(t, 2, bytes.Count(csv, []byte("\n")), "a header and one row")
			var table bytes.Buffer
			require.NoError(t, soak.WriteTable(&table, []soak.Report{r}))
			require.Contains(t, table.String(), store)
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := soak.Options{WorkerBin: "w"}.WithDefaults()
	for _, tc := range []struct {
		name   string
		change func(*soak.Options)
		want   string
	}{
		{"no worker", func(o *soak.Options) { o.WorkerBin = "" }, "worker binary"},
		{"no sessions", func(o *soak.Options) { o.Sessions = 0 }, "at least 1"},
		{"unknown store", func(o *soak.Options) { o.Store = "redis" }, `unknown store "redis"`},
		{"postgres without a URL", func(o *soak.Options) { o.Store = soak.StorePostgres }, "database URL"},
		{"negative interval", func(o *soak.Options) { o.SweepInterval = -time.Second }, "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			require.ErrorContains(t, o.Validate(), tc.want)
		})
	}
	require.NoError(t, valid.Validate())
}

// TestIdleSmall runs the idle measurement on a few ended sessions with the Service Bus store and
// checks that its report adds up: the baseline first, then the ended sessions, each measured
// over its intervals with what the emulator and the worker counted.
func TestIdleSmall(t *testing.T) {
	o := soak.IdleOptions{
		Workers: []soak.Worker{{Name: "current", Bin: workerBin, Lease: true}},
		Ended:   []int{20}, SweepInterval: time.Second, Intervals: 2, CatchUp: 20 * time.Second, Timeout: 2 * time.Minute,
	}
	rs, err := soak.RunIdle(context.Background(), o)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, 0, rs[0].Ended, "the baseline first")
	require.Equal(t, 20, rs[1].Ended)
	for _, r := range rs {
		require.Equal(t, soak.StoreServiceBus, r.Store)
		require.Equal(t, "current", r.Worker)
		// The runner's accept-next loops attach links whatever the sessions.
		require.Positive(t, r.Attaches, "link attaches counted")
		require.GreaterOrEqual(t, r.MaxAttaches, r.Attaches)
		require.Positive(t, r.Credits)
	}
	require.Positive(t, rs[1].Seed)
	require.Positive(t, rs[1].CatchUp)
	var table bytes.Buffer
	require.NoError(t, soak.WriteIdleTable(&table, rs))
	require.Contains(t, table.String(), "baseline")
}

func TestIdleOptionsValidate(t *testing.T) {
	valid := soak.IdleOptions{Workers: []soak.Worker{{Name: "w", Bin: "w"}}}.WithDefaults()
	require.NoError(t, valid.Validate())
	for _, tc := range []struct {
		name   string
		change func(*soak.IdleOptions)
		want   string
	}{
		{"no worker", func(o *soak.IdleOptions) { o.Workers = nil }, "worker binary is required"},
		{"unnamed worker", func(o *soak.IdleOptions) { o.Workers = []soak.Worker{{Bin: "w"}} }, "a name and a binary"},
		{"negative ended", func(o *soak.IdleOptions) { o.Ended = []int{-1} }, "must not be negative"},
		{"no intervals", func(o *soak.IdleOptions) { o.Intervals = 0 }, "at least 1"},
		{"unknown store", func(o *soak.IdleOptions) { o.Store = "redis" }, `unknown store "redis"`},
		{"postgres without a URL", func(o *soak.IdleOptions) { o.Store = soak.StorePostgres }, "database URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			require.ErrorContains(t, o.Validate(), tc.want)
		})
	}
}
