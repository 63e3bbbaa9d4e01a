package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/outbox"
)

// bundle is a test's emulator, client and migrated database.
type bundle struct {
	srv    *emulator.Server
	client *azservicebus.Client
	pool   *pgxpool.Pool
}

// sessionQueue is what the worker reads: sessions, duplicate detection.
var sessionQueue = broker.EntityProperties{RequiresSession: true, RequiresDuplicateDetection: true}

func setup(t *testing.T, maxConns int32, queues ...string) *bundle {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	for _, q := range queues {
		require.NoError(t, srv.Broker().CreateQueue(q, sessionQueue))
	}
	return &bundle{srv: srv, client: newClient(t, srv.ConnectionString()), pool: newPool(t, maxConns)}
}

func newClient(t *testing.T, conn string) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(conn, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	})
	return client
}

// testLogger logs to the test output when SEQBUS_TEST_LOG is set.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SEQBUS_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// relayConfig is a RelayConfig with test-sized intervals.
func (b *bundle) relayConfig(t *testing.T) *outbox.RelayConfig {
	return &outbox.RelayConfig{
		Pool:         b.pool,
		Client:       b.client,
		Logger:       testLogger(t),
		BatchSize:    10,
		PollInterval: 500 * time.Millisecond,
		MinBackoff:   50 * time.Millisecond,
		MaxBackoff:   400 * time.Millisecond,
		SendTimeout:  3 * time.Second,
	}
}

// running is a relay running in the background.
type running struct {
	relay  *outbox.Relay
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg *outbox.RelayConfig) *running {
	t.Helper()
	r, err := outbox.NewRelay(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{relay: r, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(func() { run.stop(t) })
	return run
}

// stop cancels the relay and waits for Run to return (once).
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			require.NoError(t, err)
			close(r.done)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not stop within 20s")
	}
}

// pending counts the messages waiting for a relay.
func pending(t testing.TB, pool *pgxpool.Pool) int64 {
	return count(t, pool, "SELECT count(*) FROM seqbus_outbox WHERE sent_at IS NULL")
}

// spy wraps the relay's real senders: it records every message the broker accepted, and
// its hooks can fail a send before it happens or act after it succeeded.
type spy struct {
	mu       sync.Mutex
	accepted map[string]int // MessageId → how often the broker accepted it
	before   func(msgs []*azservicebus.Message) error
	after    func(ctx context.Context, msgs []*azservicebus.Message) (int, error)
}

func newSpy() *spy { return &spy{accepted: map[string]int{}} }

func (s *spy) senders(client *azservicebus.Client) func(context.Context, string) (outbox.Sender, error) {
	base := outbox.ClientSenders(client)
	return func(ctx context.Context, entity string) (outbox.Sender, error) {
		inner, err := base(ctx, entity)
		if err != nil {
			return nil, err
		}
		return &spySender{inner: inner, spy: s}, nil
	}
}

func (s *spy) hooks() (func([]*azservicebus.Message) error, func(context.Context, []*azservicebus.Message) (int, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.before, s.after
}

// duplicates returns the MessageIds the broker accepted more than once.
func (s *spy) duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, n := range s.accepted {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

func (s *spy) times(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[id]
}

type spySender struct {
	inner outbox.Sender
	spy   *spy
}

func (s *spySender) SendMessages(ctx context.Context, msgs []*azservicebus.Message) (int, error) {
	before, after := s.spy.hooks()
	if before != nil {
		if err := before(msgs); err != nil {
			return 0, err
		}
	}
	n, err := s.inner.SendMessages(ctx, msgs)
	s.spy.mu.Lock()
	for _, m := range msgs[:n] {
		s.spy.accepted[*m.MessageID]++
	}
	s.spy.mu.Unlock()
	if err == nil && after != nil {
		return after(ctx, msgs)
	}
	return n, err
}

func (s *spySender) Close(ctx context.Context) error { return s.inner.Close(ctx) }

// received is one message as the tests check it.
type received struct {
	seq  int64
	body string
	last bool
}

// receiveSessions takes every session of want from the queue (receive and delete) and
// returns, per session, its messages in the order the broker delivered them. want gives
// how many messages each session must have.
func receiveSessions(ctx context.Context, t *testing.T, client *azservicebus.Client, queue string, want map[string]int) map[string][]*azservicebus.ReceivedMessage {
	t.Helper()
	got := map[string][]*azservicebus.ReceivedMessage{}
	for len(got) < len(want) {
		r, err := client.AcceptNextSessionForQueue(ctx, queue, &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		require.NoError(t, err, "accepting a session (%d of %d taken)", len(got), len(want))
		id := r.SessionID()
		n, ok := want[id]
		require.True(t, ok, "unexpected session %q", id)
		require.NotContains(t, got, id, "session %q offered twice", id)
		var msgs []*azservicebus.ReceivedMessage
		for len(msgs) < n {
			batch, err := r.ReceiveMessages(ctx, n-len(msgs), nil)
			require.NoError(t, err)
			msgs = append(msgs, batch...)
		}
		got[id] = msgs
		require.NoError(t, r.Close(ctx))
	}
	return got
}

var errInjected = errors.New("injected send failure")
