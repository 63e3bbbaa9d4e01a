package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// BenchmarkTransition measures state transitions (load + save with the version check) per second
// on one session, as one worker advancing one session does.
func BenchmarkTransition(b *testing.B) {
	ctx := context.Background()
	store := newStore(b, newPool(b), "orders")
	sess := session("bench")
	_, v, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(b, err)

	for b.Loop() {
		st, got, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
		if err != nil || got != v {
			b.Fatalf("load: version %d, want %d: %v", got, v, err)
		}
		st.Next++
		st.Counters.Handled++
		if v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
}

// BenchmarkTransitionParallel runs transitions on many sessions at once, as a worker with
// several sessions locked does.
func BenchmarkTransitionParallel(b *testing.B) {
	ctx := context.Background()
	store := newStore(b, newPool(b), "orders")
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		sess := session(fmt.Sprintf("bench-%d", n.Add(1)))
		var v int64
		for pb.Next() {
			st, _, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
			if err != nil {
				b.Error(err)
				return
			}
			st.Next++
			if v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
}
