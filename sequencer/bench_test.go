package sequencer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// BenchmarkEngine runs one session of 100 messages per op on the fake broker and store (their
// cost is included) and reports broker calls per message.
func BenchmarkEngine(b *testing.B) {
	const n = 100
	orders := map[string]func(*rand.Rand) []int64{
		"in-order": func(*rand.Rand) []int64 { return seqs(1, n) },
		"reversed": func(*rand.Rand) []int64 { return seqs(n, 1) },
		"random": func(r *rand.Rand) []int64 {
			s := seqs(1, n)
			r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
			return s
		},
	}
	windows := []struct {
		name string
		size int
		// eachMessage saves after every handler call instead of once per recorded run.
		eachMessage bool
	}{{"window=256", 0, false}, {"window=16", 16, false}, {"no-window", sequencer.NoWindow, false}, {"window=256,save-each", 0, true}}
	for _, w := range windows {
		for _, name := range []string{"in-order", "reversed", "random"} {
			b.Run(fmt.Sprintf("%s/%s", w.name, name), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				clk := clock.NewFake(time.Time{})
				store := sequencertest.NewStore()
				e, err := sequencer.NewEngine(sequencer.EngineConfig{
					Pipelining:     sequencer.Awaited,
					WindowMessages: w.size, ReceiveBatch: 32, DeferredBatch: 32, TombstoneTTL: sequencer.NoTombstone,
					SaveEachMessage: w.eachMessage,
				}, sequencer.EngineDeps{
					Store:   store.Client(nil),
					Handler: sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil }),
					Clock:   clk,
				})
				if err != nil {
					b.Fatal(err)
				}
				var msgs, accepts int
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk})
					client := broker.NewClient(nil)
					for _, s := range orders[name](rng) {
						broker.PublishSeq("s", s, s == n)
					}
					b.StartTimer()
					for {
						sess, err := client.AcceptNext(b.Context())
						if err != nil {
							break
						}
						accepts++
						if _, err := e.RunSession(b.Context(), sess, nil); err != nil {
							b.Fatal(err)
						}
					}
					msgs += n
				}
				st := e.Stats()
				b.ReportMetric(float64(st.TotalBrokerCalls()+uint64(accepts))/float64(msgs), "calls/msg")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
				b.ReportMetric(float64(st.StoreCalls)/float64(msgs), "store-calls/msg")
			})
		}
	}
}

func BenchmarkStateCodec5000(b *testing.B) {
	st := sequencer.NewState()
	for i := range int64(5000) {
		st.Deferred[i+2] = 1<<32 + i*3
	}
	enc, err := st.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := st.MarshalBinary(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc)), "bytes")
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got sequencer.State
			if err := got.UnmarshalBinary(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
