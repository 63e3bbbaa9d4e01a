package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sbadapter"
)

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "defaults", opts: Options{}},
		{name: "zero replicas", opts: Options{Replicas: []int{1, 0}}, wantErr: "replicas: 0"},
		{name: "unknown pressure", opts: Options{Pressures: []Pressure{"heavy"}}, wantErr: `pressure: "heavy"`},
		{name: "exception rate of 1", opts: Options{ExceptionRates: []float64{1}}, wantErr: "exception rate: 1 is outside"},
		{name: "unknown arrival", opts: Options{Arrivals: []Arrival{"reversed"}}, wantErr: `arrival: "reversed"`},
		{
			name:    "throttle against a connection string",
			opts:    Options{ConnectionString: "Endpoint=sb://x/", Entity: entityQueue("q"), Pressures: []Pressure{PressureThrottle}},
			wantErr: "needs the in-process emulator",
		},
		{name: "connection string without entity", opts: Options{ConnectionString: "Endpoint=sb://x/"}, wantErr: "entity:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.opts.WithDefaults().Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestCellsCoverTheMatrix(t *testing.T) {
	t.Parallel()
	cells := Options{}.WithDefaults().Cells()
	require.Len(t, cells, 4*3*3*2)
	seen := map[Cell]bool{}
	for _, c := range cells {
		require.False(t, seen[c], "cell %s twice", c)
		seen[c] = true
	}
	require.Equal(t, []Pressure{PressureNone}, Options{ConnectionString: "cs"}.WithDefaults().Pressures,
		"a namespace given by connection string brings its own pressure")
}

// TestRunTinyMatrix runs four small cells of each pressure and checks what a user reads in the
// outputs: every message handled in order, the exceptions seen, the calls counted, a CSV row per
// cell and the charts.
func TestRunTinyMatrix(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress []int
	results, err := Run(ctx, Options{
		Replicas: []int{2}, ExceptionRates: []float64{0, 0.2},
		Sessions: 4, Messages: 10, ThrottleCredits: 300, CellTimeout: time.Minute,
	}, func(done int, _ Cell) { progress = append(progress, done) })
	require.NoError(t, err)
	require.Len(t, results, 12)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, progress)
	for _, r := range results {
		require.NoError(t, r.Err, r.Cell.String())
		require.Zero(t, r.Violations, r.Cell.String())
		require.Zero(t, r.Incomplete, r.Cell.String())
		require.Equal(t, 40, r.Messages)
		require.Positive(t, r.Rate)
		require.Positive(t, r.BrokerCalls)
		require.Positive(t, r.StoreCalls)
		require.Positive(t, r.StateWrites)
		require.Positive(t, r.LatencyP99)
		require.GreaterOrEqual(t, r.HandlerCalls, uint64(40))
		if r.ExceptionRate > 0 {
			require.Positive(t, r.HandlerErrors, "a 20%% exception rate over 40+ calls fails some")
		} else {
			require.Zero(t, r.HandlerErrors)
		}
	}

	dir := t.TempDir()
	files, err := WriteOutputs(dir, "svg", results)
	require.NoError(t, err)
	require.Len(t, files, 5, "results.csv and four charts")
	f, err := os.Open(filepath.Join(dir, "results.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 13, "a header and one row per cell")
	require.Equal(t, csvHeader, rows[0])
	for _, name := range []string{ChartThroughputReplicas, ChartThroughputException, ChartLatencyReplicas, ChartCallsArrival} {
		b, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		require.NoError(t, err)
		require.Contains(t, string(b), "<svg")
	}
}

func TestWriteCSVReportsCellErrors(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, []Result{{
		Cell: Cell{Replicas: 1, Pressure: PressureNone, Arrival: ArrivalInOrder}, Messages: 10,
		Err: errors.New("bench: cell did not finish within 1s"),
	}}))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "bench: cell did not finish within 1s", rows[1][len(rows[1])-1])
}

func entityQueue(q string) sbadapter.Entity { return sbadapter.Entity{Queue: q} }
