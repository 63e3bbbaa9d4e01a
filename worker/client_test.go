package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

const queue = "orders"

func startEmulator(t *testing.T) *emulatortest.Server {
	t.Helper()
	return emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
		queue: {RequiresSession: true, LockDuration: 10 * time.Second},
	}})
}

func send(t *testing.T, srv *emulatortest.Server, session string, seq int64, last bool, props map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sender, err := srv.Client.NewSender(queue, nil)
	require.NoError(t, err)
	defer sender.Close(ctx)
	p := map[string]any{"Sequence": seq, "IsLast": last}
	for k, v := range props {
		p[k] = v
	}
	require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{SessionID: &session, Body: []byte("x"), ApplicationProperties: p}, nil))
}

func startWorker(t *testing.T, srv *emulatortest.Server, configure func(cfg *worker.Config)) *worker.Client {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.ConnectionString = srv.ConnectionString()
	cfg.Entity = sbadapter.Entity{Queue: queue}
	cfg.SessionIdleTimeout = 200 * time.Millisecond
	cfg.HTTPAddr = worker.HTTPOff
	configure(&cfg)
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
		<-w.Stopped()
	})
	return w
}

// The handler span of a message is a child of the publisher's trace context, whether the
// publisher put it in traceparent (OpenTelemetry) or Diagnostic-Id (the Azure SDKs); the
// handler's logs made with its ctx carry the trace id.
func TestHandlerSpanContinuesThePublishersTrace(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var logs testio.SyncBuffer
	logger := slog.New(worker.LogHandler(slog.NewJSONHandler(&logs, nil)))
	handled := make(chan int64, 3)
	startWorker(t, srv, func(cfg *worker.Config) {
		cfg.TracerProvider = tp
		cfg.Handler = sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			logger.InfoContext(ctx, "handling", slog.Int64("sequence", m.Sequence))
			handled <- m.Sequence
			return nil
		})
	})

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent1 = "00f067aa0ba902b7"
		parent2 = "00f067aa0ba902b8"
	)
	send(t, srv, "s", 1, false, map[string]any{"traceparent": "00-" + traceID + "-" + parent1 + "-01"})
	send(t, srv, "s", 2, false, map[string]any{"Diagnostic-Id": "00-" + traceID + "-" + parent2 + "-01"})
	send(t, srv, "s", 3, true, nil)
	for want := int64(1); want <= 3; want++ {
		select {
		case got := <-handled:
			require.Equal(t, want, got)
		case <-time.After(20 * time.Second):
			t.Fatalf("sequence %d was not handled", want)
		}
	}

	spans := waitSpans(t, exporter, 3) // one span per handler call
	bySeq := map[int64]tracetest.SpanStub{}
	for _, s := range spans {
		attrs := attrMap(s.Attributes)
		require.Equal(t, "s", attrs["seqbus.session_id"].AsString())
		require.Equal(t, int64(1), attrs["messaging.servicebus.message.delivery_count"].AsInt64())
		require.Equal(t, "handled", attrs["seqbus.outcome"].AsString())
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		require.Equal(t, "process "+queue, s.Name)
		bySeq[attrs["seqbus.sequence"].AsInt64()] = s
	}
	for seq, parent := range map[int64]string{1: parent1, 2: parent2} {
		s := bySeq[seq]
		require.Equal(t, traceID, s.SpanContext.TraceID().String(), "sequence %d continues the publisher's trace", seq)
		require.Equal(t, parent, s.Parent.SpanID().String(), "sequence %d is a child of the publisher's span", seq)
		require.True(t, s.Parent.IsRemote())
	}
	require.False(t, bySeq[3].Parent.IsValid(), "without a trace context the span is a root")

	var withTrace int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["trace_id"] == traceID {
			withTrace++
		}
	}
	require.Equal(t, 2, withTrace, "the handler's logs carry the trace id of its span")
}

// A failed call is a span with the error recorded and outcome failed.
func TestHandlerSpanRecordsFailure(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var calls sync.Map
	done := make(chan struct{})
	startWorker(t, srv, func(cfg *worker.Config) {
		cfg.TracerProvider = tp
		cfg.MaxHandlerAttempts, cfg.RetryBase, cfg.RetryMax = 3, 0, 0
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error {
			n, _ := calls.LoadOrStore("n", new(int))
			*n.(*int)++
			if *n.(*int) == 1 {
				return fmt.Errorf("downstream unavailable")
			}
			close(done)
			return nil
		})
	})
	send(t, srv, "s", 1, true, nil)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not handled")
	}
	spans := waitSpans(t, exporter, 2)
	failed := attrMap(spans[0].Attributes)
	require.Equal(t, "failed", failed["seqbus.outcome"].AsString())
	require.Len(t, spans[0].Events, 1, "the error is recorded")
	require.Equal(t, "handled", attrMap(spans[1].Attributes)["seqbus.outcome"].AsString())
}

// waitSpans waits for n spans: a handler span ends after the handler returns, so after the
// handler told the test it ran.
func waitSpans(t *testing.T, exporter *tracetest.InMemoryExporter, n int) tracetest.SpanStubs {
	t.Helper()
	require.Eventually(t, func() bool { return len(exporter.GetSpans()) >= n }, 10*time.Second, 5*time.Millisecond,
		"want %d spans", n)
	spans := exporter.GetSpans()
	require.Len(t, spans, n)
	return spans
}

func attrMap(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// /healthz answers while the process runs; /readyz once the broker answered; /metrics serves the
// worker's metrics and the Go collectors.
func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t)
	w := startWorker(t, srv, func(cfg *worker.Config) {
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.ReadyInterval = 100 * time.Millisecond
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	})
	base := "http://" + w.HTTPAddr()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	_, body = get("/readyz")
	require.Contains(t, body, `"status":"ready"`)
	_, body = get("/metrics")
	for _, name := range []string{"seqbus_messages_total{outcome=\"handled\"} 0", "seqbus_sessions_active 0", "seqbus_ready 1", "seqbus_deferred_fetch_failures_total ", "go_goroutines", "process_cpu_seconds_total"} {
		require.Contains(t, body, name)
	}
}

// A Config with problems is refused, each problem naming its field (and its variable).
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	h := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	valid := func(mutate func(c *worker.Config)) worker.Config {
		c := worker.DefaultConfig()
		c.ConnectionString, c.Entity, c.Handler = "Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b", sbadapter.Entity{Queue: "q"}, h
		mutate(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  worker.Config
		want []string
	}{
		{"empty", worker.Config{}, []string{"Config.ConnectionString", "Config.Entity", "Config.Handler"}},
		{"postgres without database", valid(func(c *worker.Config) { c.StateStore = worker.StateStorePostgres }), []string{"Config.DatabaseURL"}},
		{"journal with service bus", valid(func(c *worker.Config) { c.Handler, c.Journal = nil, true }), []string{"Config.Transactional"}},
		{"bad engine policy", valid(func(c *worker.Config) { c.PoisonPolicy = "ignore" }), []string{"Config.PoisonPolicy", `SEQBUS_POISON_POLICY: "ignore"`}},
		{"bad gap policy", valid(func(c *worker.Config) { c.GapPolicy = "drop" }), []string{"Config.GapPolicy", `SEQBUS_GAP_POLICY: "drop"`}},
		{"journal with pass-through", valid(func(c *worker.Config) {
			c.Handler, c.Journal, c.StateStore, c.DatabaseURL = nil, true, worker.StateStorePostgres, "postgres://localhost/x"
			c.Unsequenced = sequencer.UnsequencedPassThrough
		}), []string{"Config.Journal", "sequence"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := worker.New(tt.cfg)
			require.Error(t, err)
			var ce *worker.ConfigError
			require.ErrorAs(t, err, &ce)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// With SEQBUS_SESSION_CONNECTIONS above 1 the runner locks sessions on several connections in
// turn (each with its own claims to negotiate); every session is still handled in order.
func TestSessionConnectionsHandleEverySessionInOrder(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t)
	const sessions, perSession = 6, 3
	var mu sync.Mutex
	got := map[string][]int64{}
	handled := 0
	done := make(chan struct{})
	startWorker(t, srv, func(cfg *worker.Config) {
		cfg.SessionConnections = 3
		cfg.Handler = sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			got[m.SessionID] = append(got[m.SessionID], m.Sequence)
			if handled++; handled == sessions*perSession {
				close(done)
			}
			return nil
		})
	})
	for s := range sessions {
		for seq := int64(1); seq <= perSession; seq++ {
			send(t, srv, fmt.Sprintf("s%d", s), seq, seq == perSession, nil)
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message was handled")
	}
	mu.Lock()
	defer mu.Unlock()
	for s := range sessions {
		require.Equal(t, []int64{1, 2, 3}, got[fmt.Sprintf("s%d", s)])
	}
}
