package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/worker"
)

// TestSQSCellMeasuresWorkerAndPlainConsumer runs one tiny cell on the local SQS FIFO under each
// of SQS's default pressures (none, latency): every message handled in order by the replicas and
// deleted by the plain consumer, each side's SQS calls counted apart (the plain consumer's a
// delete per message plus receives, the worker's a receive and a batch of deletes per session).
func TestSQSCellMeasuresWorkerAndPlainConsumer(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{
		Provider: ProviderSQS, DatabaseURL: pgtest.SchemaDSN(schema),
		Replicas: []int{2}, ExceptionRates: []float64{0.1}, Arrivals: []Arrival{ArrivalShuffled},
		Sessions: 4, Messages: 15, CellTimeout: 45 * time.Second,
	}, nil)
	require.NoError(t, err)
	require.Len(t, results, 2)
	require.Equal(t, []Pressure{PressureNone, PressureLatency}, []Pressure{results[0].Pressure, results[1].Pressure})
	for _, r := range results {
		require.NoError(t, r.Err)
		require.Equal(t, worker.EarlyMessagesStore, r.Early)
		require.Zero(t, r.Violations)
		require.Zero(t, r.Incomplete)
		require.Positive(t, r.HandlerErrors, "a tenth of the calls failed")
		require.Positive(t, r.Rate)
		require.Positive(t, r.PlainRate)
		require.GreaterOrEqual(t, r.BrokerCalls, uint64(2*60/10), "a receive and a batch of deletes per 10 messages at least")
		require.Greater(t, r.PlainBrokerCalls, uint64(60), "a delete per message and the receives")
		require.Less(t, r.BrokerCalls, r.PlainBrokerCalls, "a session's deletes in one call, the plain consumer's one by one")
		require.Positive(t, r.StoreCalls)
	}
	// Every call of the latency cell waits 5 ms: its 60 messages take the plain consumer's 8
	// loops at least 60 × 5 ms ÷ 8.
	require.Less(t, results[1].PlainRate, 60/(60*0.005/8))
}

func TestSQSBudgets(t *testing.T) {
	t.Parallel()
	cell := func(a Arrival) Cell { return Cell{Replicas: 2, Pressure: PressureNone, Arrival: a} }
	res := func(a Arrival, rate, plain float64, calls uint64) Result {
		return Result{Cell: cell(a), Messages: 100, Rate: rate, PlainRate: plain, BrokerCalls: calls}
	}
	tests := []struct {
		name    string
		results []Result
		want    []bool
	}{
		{name: "within", results: []Result{res(ArrivalInOrder, 80, 100, 120), res(ArrivalShuffled, 50, 100, 150)}, want: []bool{true, true}},
		{name: "slow in order", results: []Result{res(ArrivalInOrder, 79, 100, 120)}, want: []bool{false}},
		{name: "shuffled costs more", results: []Result{res(ArrivalInOrder, 90, 100, 120), res(ArrivalReversed, 50, 100, 151)}, want: []bool{true, false}},
		{name: "shuffled alone", results: []Result{res(ArrivalShuffled, 50, 100, 500)}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []bool
			for _, b := range SQSBudgets(tt.results) {
				got = append(got, b.Pass)
			}
			require.Equal(t, tt.want, got)
		})
	}
}
