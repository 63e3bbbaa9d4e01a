package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// TestClientCompletesWorkUnderThrottle runs the worker against a namespace throttled far below
// what it would do unthrottled: its session calls are refused with server-busy again and again
// (the adapter retries those itself, the SDK's retries being off for sessions), and still every
// session is handled in order and the queue ends empty. With no reorder window every early
// message is deferred, so that drains complete deferred messages under the throttle too: a
// refused completion leaves a handled message deferred, which the sweeper's wake settles (with
// either store).
func TestClientCompletesWorkUnderThrottle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		window   int
		postgres bool
	}{
		{"default window", worker.DefaultConfig().ReorderWindow, false},
		{"no window: early messages deferred", 0, false},
		{"no window, Postgres store", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testClientCompletesWorkUnderThrottle(t, tc.window, tc.postgres)
		})
	}
}

func testClientCompletesWorkUnderThrottle(t *testing.T, window int, postgres bool) {
	const queue, sessions, messages = "orders", 6, 20
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{queue: {RequiresSession: true, LockDuration: 30 * time.Second}},
		Config: emulator.Config{Pressure: emulator.Pressure{CreditsPerSecond: 60}},
	})
	e, err := srv.Broker().Lookup(queue)
	require.NoError(t, err)
	ids := make([]string, sessions)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%d", i)
		msgs := make([]*amqp.Message, messages)
		for n, seq := range rng.Perm(messages) {
			sid, mid := ids[i], fmt.Sprintf("%s/%d", ids[i], seq+1)
			msgs[n] = &amqp.Message{
				Data:                  [][]byte{[]byte("x")},
				Properties:            &amqp.MessageProperties{GroupID: &sid, MessageID: mid},
				ApplicationProperties: map[string]any{"Sequence": int64(seq + 1), "IsLast": seq+1 == messages},
			}
		}
		// Straight into the broker: the credits go to the worker alone.
		require.NoError(t, e.Send(context.Background(), msgs))
	}

	cfg := worker.DefaultConfig()
	checker := demo.NewReplayChecker(ids, messages, cfg.EngineConfig().ReplayWindow())
	cfg.ConnectionString, cfg.Entity, cfg.Handler, cfg.HTTPAddr = srv.ConnectionString(), sbadapter.Entity{Queue: queue}, checker, worker.HTTPOff
	cfg.SessionIdleTimeout, cfg.MaxConcurrentSessions, cfg.SweepInterval = time.Second, 4, time.Second
	if cfg.ReorderWindow = window; window == 0 {
		cfg.Prefetch = 4 // a receive batch is looked at whole before the window's bound applies
	}
	if postgres {
		_, schema := pgtest.NewPoolWithSchema(t, nil)
		cfg.StateStore, cfg.DatabaseURL, cfg.MigrateOnStart = worker.StateStorePostgres, pgtest.SchemaDSN(schema), true
	}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stopCancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	select {
	case <-checker.Done():
	case <-ctx.Done():
		t.Fatalf("not every session was handled: %v (throttled %d times)", checker.Incomplete(), srv.PressureStats().Throttled)
	}
	require.Empty(t, checker.Violations())
	require.Positive(t, srv.PressureStats().Throttled, "the worker was throttled")
	// A settlement the throttle refused leaves its message locked (go-amqp takes the refusal as
	// final, and the SDK then reports success; the adapter reports it refused): when its session
	// is released, an active message comes back and is dropped as a duplicate, and a deferred one
	// stays deferred, still indexed in the state, and the run the sweeper starts completes it.
	if !assert.Eventually(t, func() bool {
		info, err := srv.Broker().GetQueue(queue)
		return err == nil && info.Counts.Total == 0
	}, time.Minute, 50*time.Millisecond) {
		info, err := srv.Broker().GetQueue(queue)
		st := w.Stats()
		for _, m := range e.Peek(0, 100, "") {
			t.Logf("left: session %s, %v, annotations %v", *m.Properties.GroupID, m.ApplicationProperties, m.Annotations)
		}
		t.Fatalf("the queue does not end empty: %+v (%v); worker: %d sessions, %d duplicates, %d dead-lettered, %d settlements refused, %d active sessions",
			info.Counts, err, st.Sessions, st.Duplicates, st.DeadLettered, st.SettlementsRefused, st.ActiveSessions)
	}
	require.EqualValues(t, sessions*messages, checker.Handled()-checker.Redelivered())
	st := w.Stats()
	t.Logf("emulator %+v; worker: %d handled, %d deferred, %d duplicates, %d settlements refused, %d broker calls, %d store calls",
		srv.PressureStats(), st.Handled, st.Deferred, st.Duplicates, st.SettlementsRefused, st.TotalBrokerCalls(), st.StoreCalls)
}

// A throttled namespace refuses the readiness probe (a session listing, 10 credits) with
// server-busy: the broker answered, so /readyz stays 200. Once the broker cannot be reached at
// all (the emulator stopped: connection refused), /readyz turns 503 naming Service Bus.
func TestReadyWhileThrottledNotWhileUnreachable(t *testing.T) {
	t.Parallel()
	// One credit a second: after the first listing the namespace owes nine seconds of credits,
	// so the management calls that follow are refused.
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{queue: {RequiresSession: true, LockDuration: 10 * time.Second}},
		Config: emulator.Config{Pressure: emulator.Pressure{CreditsPerSecond: 1}},
	})
	var logs testio.SyncBuffer
	w := startWorker(t, srv, func(cfg *worker.Config) {
		cfg.HTTPAddr = "127.0.0.1:0"
		// Shorter than the management client's SDK retries of a refused call (up to about 3 s):
		// the check takes the broker's answer, not its own deadline.
		cfg.ReadyInterval = time.Second
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	})
	readyz := func() (int, readyBody) {
		resp, err := http.Get("http://" + w.HTTPAddr() + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var b readyBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
		return resp.StatusCode, b
	}
	const throttledLog = "readiness probe throttled"
	var checks []string // the checked_at of each readiness check seen
	var notReady []readyBody
	require.Eventually(t, func() bool {
		code, b := readyz()
		if b.CheckedAt == "" {
			return false
		}
		if code != http.StatusOK {
			notReady = append(notReady, b)
		}
		if len(checks) == 0 || checks[len(checks)-1] != b.CheckedAt {
			checks = append(checks, b.CheckedAt)
		}
		return len(checks) >= 2 && strings.Contains(logs.String(), throttledLog)
	}, 30*time.Second, 50*time.Millisecond, "two readiness checks, one of them refused with server-busy")
	require.Empty(t, notReady, "throttled, not down")
	require.Positive(t, srv.PressureStats().Throttled)

	require.NoError(t, srv.Close())
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusServiceUnavailable },
		30*time.Second, 50*time.Millisecond, "the broker is gone")
	_, b := readyz()
	require.Equal(t, "not ready", b.Status)
	require.NotEmpty(t, b.Reasons)
	require.Contains(t, b.Reasons[0], "service bus")
}

type readyBody struct {
	Status    string   `json:"status"`
	CheckedAt string   `json:"checked_at"`
	Reasons   []string `json:"reasons"`
}
