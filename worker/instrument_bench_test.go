package worker

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// BenchmarkInstrumentationPerMessage measures what the instrumentation adds to one handled
// message: the tracing and metrics middlewares around the handler, the engine events a handled
// message emits (handled, plus held for an early one) and one instrumented state save, against
// the same handler call and save without them.
//
//	go test -run '^$' -bench InstrumentationPerMessage -benchmem ./worker/
func BenchmarkInstrumentationPerMessage(b *testing.B) {
	msg := &sequencer.Message{SessionID: "s", Sequence: 7, MessageID: "m", Properties: map[string]any{
		PropertyTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}}
	noop := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	sess := storetest.NewSession("s")
	ctx := context.Background()
	save := func(s sequencer.StateStore, ver int64) int64 {
		v, err := s.Save(ctx, sequencer.SaveParams{Session: sess, State: sequencer.NewState(), ExpectedVersion: ver})
		if err != nil {
			b.Fatal(err)
		}
		return v
	}

	b.Run("bare", func(b *testing.B) {
		store := memory.New()
		var ver int64
		b.ReportAllocs()
		for b.Loop() {
			_ = noop.Handle(ctx, msg)
			ver = save(store, ver)
		}
	})
	b.Run("metrics", func(b *testing.B) {
		m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() map[string]uint64 { return nil }, func() float64 { return 0 })
		if err != nil {
			b.Fatal(err)
		}
		h := m.handlerMiddleware(noop)
		s := instrument(memory.New(), m, nil)
		var ver int64
		b.ReportAllocs()
		for b.Loop() {
			_ = h.Handle(ctx, msg)
			m.Observe(sequencer.Event{Kind: sequencer.EventHeld, SessionID: "s", Sequence: 7})
			m.Observe(sequencer.Event{Kind: sequencer.EventHandled, SessionID: "s", Sequence: 7})
			ver = save(s, ver)
		}
	})
	// The publisher's trace sampled (flags 01: the span is recorded), or not (00: the default
	// parent-based sampler drops it, as sampling at the publisher does).
	for _, tc := range []struct {
		name        string
		traceparent string
	}{
		{"metrics+tracing", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"metrics+tracing,unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() map[string]uint64 { return nil }, func() float64 { return 0 })
			if err != nil {
				b.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer tp.Shutdown(ctx)
			h := tracingMiddleware(tp, "orders")(m.handlerMiddleware(noop))
			s := instrument(memory.New(), m, nil)
			tmsg := *msg
			tmsg.Properties = map[string]any{PropertyTraceparent: tc.traceparent}
			var ver int64
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Handle(ctx, &tmsg)
				m.Observe(sequencer.Event{Kind: sequencer.EventHeld, SessionID: "s", Sequence: 7})
				m.Observe(sequencer.Event{Kind: sequencer.EventHandled, SessionID: "s", Sequence: 7})
				ver = save(s, ver)
			}
		})
	}
}
