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

// BenchmarkHeldReversed measures the store's side of a session whose messages arrive in reverse
// order with early messages held in the store: each early message held with the state (one
// Hold each), then the first handled (a save), then the held ones read in one Held call and
// handed over one save each. It reports the store calls and the time per message.
func BenchmarkHeldReversed(b *testing.B) {
	const n = 50
	ctx := context.Background()
	store := newStore(b, newPool(b), "orders")
	body := make([]byte, 1024)
	var sessions, calls int
	for b.Loop() {
		sessions++
		sess := session(fmt.Sprintf("rev-%d", sessions))
		st := sequencer.NewState()
		var v int64
		for seq := int64(n); seq >= 2; seq-- {
			m := &sequencer.HeldMessage{Sequence: seq, MessageID: fmt.Sprint(seq), Body: body,
				Properties: map[string]any{"Sequence": seq, "IsLast": seq == n}}
			res, err := store.Hold(ctx, sequencer.HoldParams{Session: sess, State: st, ExpectedVersion: v, Messages: []*sequencer.HeldMessage{m}})
			if err != nil {
				b.Fatal(err)
			}
			v = res.Version
			calls++
		}
		var err error
		st.Next = 2
		if v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v}); err != nil {
			b.Fatal(err)
		}
		held, err := store.Held(ctx, sequencer.HeldParams{Session: sess, From: st.Next})
		if err != nil || len(held) != n-1 {
			b.Fatalf("held %d messages, want %d: %v", len(held), n-1, err)
		}
		calls += 2
		for _, m := range held {
			st.Next = m.Sequence + 1
			if v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v}); err != nil {
				b.Fatal(err)
			}
			calls++
		}
		if stats, err := store.HeldStats(ctx, sequencer.HeldStatsParams{Session: sess}); err != nil || stats.Messages != 0 {
			b.Fatalf("%d messages left held: %v", stats.Messages, err)
		}
	}
	msgs := float64(sessions * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
	b.ReportMetric(float64(calls)/msgs, "store-calls/msg")
}
