package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/worker"
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
		{name: "unknown arrival", opts: Options{Arrivals: []Arrival{"sideways"}}, wantErr: `arrival: "sideways"`},
		{
			name:    "throttle against a connection string",
			opts:    Options{ConnectionString: "Endpoint=sb://x/", Entity: entityQueue("q"), Pressures: []Pressure{PressureThrottle}},
			wantErr: "needs the in-process emulator",
		},
		{name: "offered share above 1", opts: Options{OfferedShare: 1.5}, wantErr: "offered share: 1.5 is outside (0, 1]"},
		{name: "offered share without throttle", opts: Options{OfferedShare: 0.8, Pressures: []Pressure{PressureNone}}, wantErr: "applies to the throttle pressure"},
		{name: "connection string without entity", opts: Options{ConnectionString: "Endpoint=sb://x/"}, wantErr: "entity:"},
		{name: "session connections", opts: Options{SessionsPerReplica: 8, SessionConnections: 4}},
		{name: "early messages side by side", opts: Options{Early: []worker.EarlyMessages{worker.EarlyMessagesDefer, worker.EarlyMessagesStore}, DatabaseURL: "postgres://127.0.0.1/test"}},
		{name: "unknown early messages", opts: Options{Early: []worker.EarlyMessages{"drop"}}, wantErr: `early messages: "drop" is neither defer nor store`},
		{name: "early store without a database", opts: Options{Early: []worker.EarlyMessages{worker.EarlyMessagesStore}}, wantErr: "store holds them in Postgres and needs a database url"},
		{name: "negative reorder window", opts: Options{ReorderWindow: ptr(-1)}, wantErr: "reorder window: -1 is negative"},
		{name: "sqs", opts: Options{Provider: ProviderSQS, DatabaseURL: "postgres://127.0.0.1/test"}},
		{name: "unknown provider", opts: Options{Provider: "kafka"}, wantErr: `provider: "kafka" is neither servicebus nor sqs`},
		{name: "sqs without a database", opts: Options{Provider: ProviderSQS}, wantErr: "provider sqs: the replicas keep their state and early messages in Postgres"},
		{name: "sqs with throttle", opts: Options{Provider: ProviderSQS, DatabaseURL: "postgres://127.0.0.1/test", Pressures: []Pressure{PressureThrottle}}, wantErr: "the local SQS has pressures none and latency only"},
		{name: "sqs deferring", opts: Options{Provider: ProviderSQS, DatabaseURL: "postgres://127.0.0.1/test", Early: []worker.EarlyMessages{worker.EarlyMessagesDefer}}, wantErr: "holds early messages in the store (early store) only"},
		{name: "session connections not dividing", opts: Options{SessionsPerReplica: 8, SessionConnections: 3}, wantErr: "session connections 3 must be positive and divide sessions per replica 8"},
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

func ptr[T any](v T) *T { return &v }

// The modes of early messages run side by side, each input once per mode; without -early the
// cells name no mode (the worker's default).
func TestCellsEarlySideBySide(t *testing.T) {
	t.Parallel()
	o := Options{Replicas: []int{1, 2}, Pressures: []Pressure{PressureNone}, ExceptionRates: []float64{0},
		Arrivals: []Arrival{ArrivalShuffled, ArrivalReversed}, Early: []worker.EarlyMessages{worker.EarlyMessagesDefer, worker.EarlyMessagesStore}}
	cells := o.WithDefaults().Cells()
	require.Len(t, cells, 8)
	for i := 0; i < len(cells); i += 2 {
		d, s := cells[i], cells[i+1]
		require.Equal(t, worker.EarlyMessagesDefer, d.Early)
		require.Equal(t, worker.EarlyMessagesStore, s.Early)
		d.Early, s.Early = "", ""
		require.Equal(t, d, s, "the same input, side by side")
	}
	require.Contains(t, cells[1].String(), "early store")
	for _, c := range (Options{}).WithDefaults().Cells() {
		require.Empty(t, c.Early)
		require.NotContains(t, c.String(), "early")
	}
}

func TestSessionSeqs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	require.Equal(t, []int64{1, 2, 3, 4}, sessionSeqs(4, ArrivalInOrder, rng))
	require.Equal(t, []int64{4, 3, 2, 1}, sessionSeqs(4, ArrivalReversed, rng))
	shuffled := sessionSeqs(20, ArrivalShuffled, rng)
	require.ElementsMatch(t, sessionSeqs(20, ArrivalInOrder, rng), shuffled)
	require.NotEqual(t, sessionSeqs(20, ArrivalInOrder, rng), shuffled)
}

// TestRunEarlySideBySide runs reversed sessions with a reorder window of one message, early
// messages deferred at the broker on a plain queue and held in Postgres on a partitioned one:
// both hand every message over in order; the store's cell makes fewer broker calls per message,
// deferring nothing and fetching nothing back.
func TestRunEarlySideBySide(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{
		Replicas: []int{1}, Pressures: []Pressure{PressureNone}, ExceptionRates: []float64{0}, Arrivals: []Arrival{ArrivalReversed},
		Early: []worker.EarlyMessages{worker.EarlyMessagesDefer, worker.EarlyMessagesStore}, ReorderWindow: ptr(1),
		DatabaseURL: pgtest.SchemaDSN(schema), Sessions: 4, Messages: 100, CellTimeout: time.Minute,
	}, nil)
	require.NoError(t, err)
	require.Len(t, results, 2)
	for _, r := range results {
		require.NoError(t, r.Err, r.Cell.String())
		require.Zero(t, r.Violations, r.Cell.String())
		require.Zero(t, r.Incomplete, r.Cell.String())
		require.Positive(t, r.Rate, r.Cell.String())
	}
	def, store := results[0], results[1]
	t.Logf("defer %.2f broker calls/msg %.0f msg/s; store %.2f broker calls/msg %.0f msg/s", def.perMessage(def.BrokerCalls), def.Rate, store.perMessage(store.BrokerCalls), store.Rate)
	require.Equal(t, worker.EarlyMessagesStore, store.Early)
	require.Less(t, store.perMessage(store.BrokerCalls), def.perMessage(def.BrokerCalls),
		"holding in the store spares the defer and the fetch of each early message")
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, results))
	require.Contains(t, buf.String(), "broker calls/msg")
	require.Contains(t, buf.String(), " store ")
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
		require.Positive(t, r.PlainRate, "the plain consumer ran in the same cell")
		require.Positive(t, r.PlainBrokerCalls)
		require.InDelta(t, r.Rate/r.PlainRate, r.Ratio(), 1e-9)
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

// TestTinyCellMeasuresWorkerAndPlainConsumer runs one tiny cell and checks that it yields both
// rates, each from all of its messages, and that the CSV and the table carry them and the ratio.
func TestTinyCellMeasuresWorkerAndPlainConsumer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{
		Replicas: []int{1}, Pressures: []Pressure{PressureNone}, ExceptionRates: []float64{0}, Arrivals: []Arrival{ArrivalShuffled},
		Sessions: 3, Messages: 40, CellTimeout: 45 * time.Second,
	}, nil)
	require.NoError(t, err)
	require.Len(t, results, 1)
	r := results[0]
	require.NoError(t, r.Err)
	require.Zero(t, r.Violations)
	require.Positive(t, r.Rate)
	require.Positive(t, r.PlainRate)
	require.Positive(t, r.PlainElapsed)
	// Every message of the plain consumer's 3 sessions was completed once at least: 120
	// completions, plus an accept, a receive and a close per session.
	require.GreaterOrEqual(t, r.PlainBrokerCalls, uint64(120+3*3))
	require.InDelta(t, r.Rate/r.PlainRate, r.Ratio(), 1e-9)

	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, results))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	col := func(name string) string { return rows[1][slices.Index(rows[0], name)] }
	require.Equal(t, strconv.FormatFloat(r.PlainRate, 'f', 1, 64), col("plain_rate_msg_per_s"))
	require.Equal(t, strconv.FormatFloat(r.Ratio(), 'f', 3, 64), col("worker_plain_ratio"))

	buf.Reset()
	require.NoError(t, WriteTable(&buf, results))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "plain msg/s")
	require.Contains(t, lines[1], fmt.Sprintf("%.0f", r.PlainRate))
	require.Contains(t, lines[1], fmt.Sprintf("%.2f", r.Ratio()))
}

// TestThrottleCellOffersARate runs a tiny throttle cell with the offered-rate phase and checks
// that it offered the share asked of the credit-limited rate measured before it, handled every
// message of it in order, and reports its latency in the CSV and the table.
func TestThrottleCellOffersARate(t *testing.T) {
	t.Parallel()
	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("trickle=%v", trickle), func(t *testing.T) {
			t.Parallel()
			testThrottleCellOffersARate(t, trickle)
		})
	}
}

func testThrottleCellOffersARate(t *testing.T, trickle bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{
		Replicas: []int{1}, Pressures: []Pressure{PressureThrottle}, ExceptionRates: []float64{0}, Arrivals: []Arrival{ArrivalShuffled},
		Sessions: 4, Messages: 10, ThrottleCredits: 400, OfferedShare: 0.5, OfferedTrickle: trickle, CellTimeout: 45 * time.Second,
	}, nil)
	require.NoError(t, err)
	require.Len(t, results, 1)
	r := results[0]
	require.NoError(t, r.Err)
	require.Zero(t, r.Violations)
	require.Zero(t, r.Incomplete)
	require.InDelta(t, 0.5*r.CreditLimitedRate(), r.Offered.Rate, 1e-9)
	require.Positive(t, r.Offered.Handled)
	require.Positive(t, r.Offered.LatencyP99)
	require.GreaterOrEqual(t, r.Offered.LatencyP99, r.Offered.LatencyP50)
	// 40 messages offered at the rate take 30/rate at least (the last session is due then) or,
	// one at a time, 39/rate.
	least := 30.0
	if trickle {
		least = 39
	}
	require.GreaterOrEqual(t, r.Offered.Elapsed.Seconds(), least/r.Offered.Rate)

	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, results))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	col := func(name string) string { return rows[1][slices.Index(rows[0], name)] }
	require.Equal(t, strconv.FormatFloat(r.Offered.Rate, 'f', 1, 64), col("offered_rate_msg_per_s"))
	require.Equal(t, strconv.FormatFloat(float64(r.Offered.LatencyP99.Microseconds())/1000, 'f', 1, 64), col("offered_latency_p99_ms"))
	buf.Reset()
	require.NoError(t, WriteTable(&buf, results))
	require.Contains(t, buf.String(), "offered p99 ms")
	require.Contains(t, buf.String(), fmt.Sprintf("%.0f", r.Offered.Rate))
}

// The plain consumer refuses a configuration it cannot run.
func TestPlainConsumerNeedsWork(t *testing.T) {
	t.Parallel()
	_, err := (&PlainConsumer{SessionsPerClient: 1}).Run(context.Background())
	require.ErrorContains(t, err, "0 clients")
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
