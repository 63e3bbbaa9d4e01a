package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/worker"
)

// BenchmarkInstrumentation compares, in one run, the bare runner the worker wraps (off:
// sequencer.Runner over the same adapter and store, no metrics, no tracing), the worker with its
// metrics on and tracing off (metrics), and with both on (on: every span recorded and exported to a
// discarding exporter), on the in-process emulator: 20 sessions × 50 messages per iteration,
// each message with a traceparent.
//
//	go test -run '^$' -bench Instrumentation -benchtime 10x -count 3 ./worker/
func BenchmarkInstrumentation(b *testing.B) {
	const sessions, perSession = 20, 50
	for _, mode := range []string{"off", "metrics", "on"} {
		b.Run(mode, func(b *testing.B) {
			srv := emulatortest.Start(b, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
				queue: {RequiresSession: true, LockDuration: 30 * time.Second},
			}})
			var handled atomic.Int64
			h := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { handled.Add(1); return nil })
			engine := sequencer.EngineConfig{IdleTimeout: 100 * time.Millisecond}
			stop := startPipeline(b, srv, mode, h, engine)
			defer stop()

			sender, err := srv.Client.NewSender(queue, nil)
			require.NoError(b, err)
			defer sender.Close(context.Background())
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				publishRound(b, sender, i, sessions, perSession)
				want := int64((i + 1) * sessions * perSession)
				for handled.Load() < want {
					time.Sleep(time.Millisecond)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*sessions*perSession)/time.Since(start).Seconds(), "msg/s")
		})
	}
}

// startPipeline starts the bare runner (mode off) or the worker, with tracing for mode on, and
// returns its stop.
func startPipeline(b *testing.B, srv *emulatortest.Server, mode string, h sequencer.Handler, engine sequencer.EngineConfig) func() {
	b.Helper()
	if mode != "off" {
		var tp trace.TracerProvider = noop.NewTracerProvider()
		if mode == "on" {
			tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		}
		cfg := worker.DefaultConfig() // the engine's defaults, as the bare runner's
		cfg.ConnectionString, cfg.Entity, cfg.HTTPAddr = srv.ConnectionString(), sbadapter.Entity{Queue: queue}, worker.HTTPOff
		cfg.Handler, cfg.TracerProvider, cfg.SweepInterval = h, tp, time.Hour
		cfg.SessionIdleTimeout = engine.IdleTimeout
		w, err := worker.New(cfg)
		require.NoError(b, err)
		require.NoError(b, w.Start(context.Background()))
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(ctx)
			if sdk, ok := tp.(*sdktrace.TracerProvider); ok {
				_ = sdk.Shutdown(ctx)
			}
		}
	}
	client, err := sbadapter.NewClientFromConnectionString(srv.ConnectionString(), nil)
	require.NoError(b, err)
	source, err := sbadapter.NewSource(client, sbadapter.Config{Entity: sbadapter.Entity{Queue: queue}})
	require.NoError(b, err)
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{Source: source, Store: sbstate.New(nil), Handler: h, Engine: engine})
	require.NoError(b, err)
	require.NoError(b, r.Start(context.Background()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
		_ = client.Close(ctx)
	}
}

func publishRound(b *testing.B, sender *azservicebus.Sender, round, sessions, perSession int) {
	b.Helper()
	ctx := context.Background()
	for s := range sessions {
		batch, err := sender.NewMessageBatch(ctx, nil)
		require.NoError(b, err)
		sid := fmt.Sprintf("r%d-s%d", round, s)
		for i := 1; i <= perSession; i++ {
			require.NoError(b, batch.AddMessage(&azservicebus.Message{SessionID: &sid, Body: []byte("x"), ApplicationProperties: map[string]any{
				"Sequence": int64(i), "IsLast": i == perSession,
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			}}, nil))
		}
		require.NoError(b, sender.SendMessageBatch(ctx, batch, nil))
	}
}
