package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/internal/tcpproxy"
	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/publisher"
)

// TestRelay_MessageShape checks what the worker gets: SessionId as enqueued, the
// sequence and last properties under the configured names (the user's properties of
// those names replaced), the user's properties with their types, Diagnostic-Id from the
// traceparent, MessageId <session>/<sequence> (hashed when too long), sent to a topic as
// well as a queue.
func TestRelay_MessageShape(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders")
	require.NoError(t, b.srv.Broker().CreateTopic("events", broker.EntityProperties{RequiresDuplicateDetection: true}))
	require.NoError(t, b.srv.Broker().CreateSubscription("events", "workers", broker.EntityProperties{RequiresSession: true}))

	long := strings.Repeat("ü", 128)
	e := func(p outbox.EnqueueParams) { enqueue(ctx, t, b.pool, p) }
	e(outbox.EnqueueParams{Entity: "orders", SessionID: "Order-1", Body: []byte("one"), Traceparent: traceparent,
		Properties: map[string]any{"kind": "created", "n": int64(1) << 60, "ratio": 0.25, "flag": false, "Seq": "mine", "End": true}})
	e(outbox.EnqueueParams{Entity: "orders", SessionID: "order-1", Body: []byte("two")}) // same session, other casing
	e(outbox.EnqueueParams{Entity: "ORDERS", SessionID: "Order-1", Body: []byte("three"), Last: true})
	e(outbox.EnqueueParams{Entity: "orders", SessionID: long, Body: []byte("long")})
	e(outbox.EnqueueParams{Entity: "events", SessionID: "e", Body: []byte("to a topic"), Last: true})

	cfg := b.relayConfig(t)
	cfg.SequenceProperty, cfg.LastProperty = "Seq", "End"
	r := start(t, cfg)
	require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 30*time.Second, 20*time.Millisecond)

	// The emulator's sessions are case-sensitive (Service Bus's are not): take the casings
	// one by one.
	got := receiveSessions(ctx, t, b.client, "orders", map[string]int{"Order-1": 2, "order-1": 1, long: 1})
	first, second, third := got["Order-1"][0], got["order-1"][0], got["Order-1"][1]
	require.Equal(t, []byte("one"), first.Body)
	require.Equal(t, "Order-1/1", first.MessageID)
	require.Equal(t, map[string]any{"kind": "created", "n": int64(1) << 60, "ratio": 0.25, "flag": false,
		"Seq": int64(1), outbox.DiagnosticIDProperty: traceparent}, first.ApplicationProperties)
	require.Equal(t, "order-1/2", second.MessageID)
	require.Equal(t, map[string]any{"Seq": int64(2)}, second.ApplicationProperties)
	require.Equal(t, []byte("three"), third.Body)
	require.Equal(t, map[string]any{"Seq": int64(3), "End": true}, third.ApplicationProperties)
	require.Equal(t, publisher.MessageID(long, 1), got[long][0].MessageID)
	require.Regexp(t, `^[0-9a-f]{64}/1$`, got[long][0].MessageID)

	sr, err := b.client.AcceptSessionForSubscription(ctx, "events", "workers", "e", nil)
	require.NoError(t, err)
	msgs, err := sr.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("to a topic"), msgs[0].Body)
	require.Equal(t, map[string]any{"Seq": int64(1), "End": true}, msgs[0].ApplicationProperties)
	require.NoError(t, sr.CompleteMessage(ctx, msgs[0], nil))
	require.NoError(t, sr.Close(ctx))

	st := r.relay.Stats()
	require.Equal(t, int64(5), st.Sent)
	require.Equal(t, int64(5), st.Batches, "one SessionId per batch: Order-1, order-1, Order-1, long, e")
	require.Equal(t, int64(0), st.Failures)
	// Sent last messages wait for the purge; nothing else is left.
	require.Equal(t, int64(2), count(t, b.pool, "SELECT count(*) FROM seqbus_outbox WHERE sent_at IS NOT NULL AND is_last"))
	require.Equal(t, int64(2), count(t, b.pool, "SELECT count(*) FROM seqbus_outbox"))
}

// TestRelay_WakesOnNotify: with a poll interval of an hour, a committed message still
// goes out at once: the relay hears of it through LISTEN/NOTIFY. A message enqueued
// with notifications switched off waits, until the next notification wakes the relay.
func TestRelay_WakesOnNotify(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "wakeup")
	cfg := b.relayConfig(t)
	cfg.PollInterval = time.Hour
	cfg.Entities = []string{"wakeup"} // other tests notify for their own entities
	r := start(t, cfg)
	// Its LISTEN has begun.
	require.Eventually(t, func() bool { return r.relay.Stats().Listening }, 10*time.Second, 5*time.Millisecond)

	for i := 1; i <= 3; i++ {
		enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "wakeup", SessionID: "s", Body: fmt.Appendf(nil, "%d", i)})
		began := time.Now()
		require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 10*time.Second, 10*time.Millisecond)
		t.Logf("message %d went out %v after its commit", i, time.Since(began))
	}

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL seqbus.outbox_notify = 'off'"); err != nil {
			return err
		}
		_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "wakeup", SessionID: "s", Body: []byte("4")})
		return err
	}))
	time.Sleep(time.Second)
	require.Equal(t, int64(1), pending(t, b.pool), "without a notification the relay waits for its poll")
	enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "wakeup", SessionID: "s", Body: []byte("5")})
	require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 10*time.Second, 10*time.Millisecond)

	got := receiveSessions(ctx, t, b.client, "wakeup", map[string]int{"s": 5})
	for i, m := range got["s"] {
		require.Equal(t, int64(i+1), m.ApplicationProperties["Sequence"])
	}
}

// TestRelay_FailedSessionPausesAndOthersGoOn: sends of one session fail; its later
// messages wait (none overtakes the failed one), it is retried with growing backoff,
// the error is visible in seqbus_outbox_paused, other sessions are sent meanwhile, and
// once sends succeed again the session goes out in order and the pause ends.
func TestRelay_FailedSessionPausesAndOthersGoOn(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders")
	s := newSpy()
	var attempts []time.Time
	failing := true
	s.before = func(msgs []*azservicebus.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if *msgs[0].SessionID == "bad" {
			attempts = append(attempts, time.Now())
			if failing {
				return errInjected
			}
		}
		return nil
	}
	for i := range 3 {
		for _, session := range []string{"bad", "good-1", "good-2"} {
			enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: session, Body: fmt.Appendf(nil, "%d", i+1)})
		}
	}
	cfg := b.relayConfig(t)
	cfg.NewSender = s.senders(b.client)
	cfg.MinBackoff, cfg.MaxBackoff = 40*time.Millisecond, 2*time.Second
	cfg.BatchSize = 2 // "bad" needs two batches: the second must never go first
	r := start(t, cfg)

	got := receiveSessions(ctx, t, b.client, "orders", map[string]int{"good-1": 3, "good-2": 3})
	require.Len(t, got, 2)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(attempts) >= 4
	}, 30*time.Second, 10*time.Millisecond)

	s.mu.Lock()
	for _, id := range []string{"bad/1", "bad/2", "bad/3"} {
		require.Zero(t, s.accepted[id], "%s sent while its session is paused", id)
	}
	// Growing backoff with equal jitter: the k-th wait is at least half of 40ms·2^(k-1).
	for k := 1; k < 4; k++ {
		wait := attempts[k].Sub(attempts[k-1])
		require.GreaterOrEqual(t, wait, 20*time.Millisecond<<(k-1), "wait %d: %v", k, wait)
	}
	s.mu.Unlock()

	// While the sends still fail: the pause records them (a failure is written to the table a
	// moment after the send returns, so wait for the fourth) and the rows stay.
	var (
		n       int
		lastErr string
	)
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT attempts, last_error FROM seqbus_outbox_paused WHERE session_key = 'bad'`).Scan(&n, &lastErr))
		return n >= 4
	}, 10*time.Second, 5*time.Millisecond, "attempts recorded: %d", n)
	require.Contains(t, lastErr, "injected send failure")
	require.Contains(t, lastErr, "send from sequence 1")
	require.Equal(t, int64(3), pending(t, b.pool))
	require.Eventually(t, func() bool { return r.relay.Stats().Failures >= 4 }, 10*time.Second, 5*time.Millisecond,
		"failures counted after their commit")
	require.Equal(t, int64(6), r.relay.Stats().Sent)
	s.mu.Lock()
	failing = false
	s.mu.Unlock()

	got = receiveSessions(ctx, t, b.client, "orders", map[string]int{"bad": 3})
	for i, m := range got["bad"] {
		require.Equal(t, int64(i+1), m.ApplicationProperties["Sequence"])
	}
	require.Eventually(t, func() bool {
		return count(t, b.pool, `SELECT count(*) FROM seqbus_outbox_paused`) == 0 && pending(t, b.pool) == 0
	}, 10*time.Second, 10*time.Millisecond, "the pause ends with the first successful send")
}

// TestRelay_BrokerOutage: while the broker cannot be reached the relay keeps every row
// (failing sends pause their sessions); when it is back the relay resumes and every
// message arrives once, in order.
func TestRelay_BrokerOutage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	b := setup(t, 8, "orders")
	px, err := tcpproxy.Start(b.srv.AMQPAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	client := newClient(t, strings.Replace(b.srv.ConnectionString(), b.srv.AMQPAddr(), px.Addr(), 1))
	cfg := b.relayConfig(t)
	cfg.Client = client
	cfg.SendTimeout = 2 * time.Second
	r := start(t, cfg)

	sessions := []string{"a", "b", "c"}
	e := func(round int) {
		for _, s := range sessions {
			for range 4 {
				enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: s, Body: fmt.Appendf(nil, "round %d", round)})
			}
		}
	}
	e(1)
	require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 30*time.Second, 10*time.Millisecond)

	px.Pause() // the broker is unreachable: open connections cut, new ones refused
	px.Cut()
	e(2)
	require.Eventually(t, func() bool {
		st := r.relay.Stats()
		return st.Failures >= 3 && st.PausedSessions >= 1
	}, 60*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(12), pending(t, b.pool), "every row is kept")
	info, err := b.srv.Broker().GetQueue("orders")
	require.NoError(t, err)
	require.Equal(t, int64(12), info.Counts.Active, "nothing of round 2 reached the broker")
	var lastErr string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT last_error FROM seqbus_outbox_paused LIMIT 1`).Scan(&lastErr))
	t.Logf("while cut: %+v; a paused session's error: %s", r.relay.Stats(), lastErr)

	px.Resume()
	require.Eventually(t, func() bool { return pending(t, b.pool) == 0 }, 60*time.Second, 20*time.Millisecond)
	got := receiveSessions(ctx, t, b.client, "orders", map[string]int{"a": 8, "b": 8, "c": 8})
	for s, msgs := range got {
		for i, m := range msgs {
			require.Equal(t, int64(i+1), m.ApplicationProperties["Sequence"], s)
			require.Equal(t, fmt.Sprintf("round %d", i/4+1), string(m.Body), s)
		}
	}
	info, err = b.srv.Broker().GetQueue("orders")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "no extra copies")
	require.Eventually(t, func() bool { return count(t, b.pool, `SELECT count(*) FROM seqbus_outbox_paused`) == 0 },
		10*time.Second, 10*time.Millisecond)
}

// TestRelay_RefusedMessagesAreNeverSent: invalid session ids and oversized messages are
// refused at enqueue, so the relay has nothing to send; the largest message the outbox
// accepts does go through the SDK's batch to the broker.
func TestRelay_RefusedMessagesAreNeverSent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders")
	r := start(t, b.relayConfig(t))

	for _, p := range []outbox.EnqueueParams{
		{Entity: "orders", SessionID: ""},
		{Entity: "orders", SessionID: strings.Repeat("x", 129)},
		{Entity: "orders", SessionID: "bell\a"},
		{Entity: "orders", SessionID: "big", Body: make([]byte, 300*1024)},
	} {
		require.Error(t, enqueueErr(t, b.pool, p))
	}
	_, err := b.pool.Exec(ctx, `SELECT seqbus_outbox_enqueue('orders', E'tab\t', 'x')`)
	require.ErrorContains(t, err, "SQ001")
	msgs, counters := stored(t, b.pool)
	require.Zero(t, msgs)
	require.Zero(t, counters)

	// The largest accepted message, with a session id of 128 four-byte characters,
	// properties and a traceparent: the estimate leaves room for all of it.
	session := strings.Repeat("😀", 128)
	props := map[string]any{"a": "x", "b": int64(1), "c": 1.5, "d": true}
	propsJSON := `{"a": "x", "b": 1, "c": 1.5, "d": true}`
	size := 262144 - 1024 - 4*len(session) - len(propsJSON) - 16*len(props)
	enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: session, Body: make([]byte, size),
		Properties: props, Traceparent: traceparent})
	require.ErrorIs(t, enqueueErr(t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: session, Body: make([]byte, size+1),
		Properties: props}), outbox.ErrMessageTooLarge)
	got := receiveSessions(ctx, t, b.client, "orders", map[string]int{session: 1})
	require.Len(t, got[session][0].Body, size)
	require.Zero(t, r.relay.Stats().Failures)
	info, err := b.srv.Broker().GetQueue("orders")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "nothing else was sent")
}

// TestRelay_PurgeLetsAnEndedSessionStartAgain: the relay's purge forgets an ended
// session EndedRetention after its last message was sent; until then the session
// refuses further messages.
func TestRelay_PurgeLetsAnEndedSessionStartAgain(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders")
	cfg := b.relayConfig(t)
	cfg.EndedRetention = 500 * time.Millisecond
	cfg.PurgeInterval = 50 * time.Millisecond
	r := start(t, cfg)

	enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s", Last: true})
	require.ErrorIs(t, enqueueErr(t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s"}), outbox.ErrSessionEnded)
	require.Eventually(t, func() bool {
		msgs, counters := stored(t, b.pool)
		return msgs == 0 && counters == 0
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(1), enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s"}))
	require.Equal(t, int64(2), r.relay.Stats().Purged, "the last message and the session")
}

// TestRelay_OnlyItsEntities: a relay restricted to some entities leaves the others'
// messages alone.
func TestRelay_OnlyItsEntities(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders", "payments")
	cfg := b.relayConfig(t)
	cfg.Entities = []string{"Orders"}
	clk := clock.NewFake(time.Now())
	cfg.Clock = clk
	r := start(t, cfg)
	enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "payments", SessionID: "p"})
	enqueue(ctx, t, b.pool, outbox.EnqueueParams{Entity: "orders", SessionID: "o"})
	receiveSessions(ctx, t, b.client, "orders", map[string]int{"o": 1})
	// The relay counts a send once its transaction committed, which may be after the message
	// reached the receiver.
	require.Eventually(t, func() bool { return r.relay.Stats().Sent == 1 }, 10*time.Second, 5*time.Millisecond)
	// Its poll comes round: a whole scan, which finds no session of its entities to send.
	scans := r.relay.Stats().Scans
	require.Eventually(t, func() bool {
		clk.Advance(cfg.PollInterval) // until the relay's poll timer was set and fired
		return r.relay.Stats().Scans > scans
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, int64(1), count(t, b.pool, "SELECT count(*) FROM seqbus_outbox WHERE entity = 'payments'"))
	require.Equal(t, int64(1), r.relay.Stats().Sent, "the order only")
}

func TestNewRelay_Invalid(t *testing.T) {
	t.Parallel()
	pool := newPoolUnmigrated(t)
	sender := func(context.Context, string) (outbox.Sender, error) { return nil, nil }
	tests := []struct {
		name string
		cfg  *outbox.RelayConfig
		want string
	}{
		{"nil", nil, "Pool is required"},
		{"no sender", &outbox.RelayConfig{Pool: pool}, "Client or NewSender is required"},
		{"entity", &outbox.RelayConfig{Pool: pool, NewSender: sender, Entities: []string{"a b"}}, `Entities: invalid entity "a b"`},
		{"batch", &outbox.RelayConfig{Pool: pool, NewSender: sender, BatchSize: -1}, "BatchSize -1 must be at least 1"},
		{"poll", &outbox.RelayConfig{Pool: pool, NewSender: sender, PollInterval: -time.Second}, "PollInterval -1s must be positive"},
		{"backoff", &outbox.RelayConfig{Pool: pool, NewSender: sender, MinBackoff: time.Minute, MaxBackoff: time.Second},
			"MaxBackoff 1s is below MinBackoff 1m0s"},
		{"retention", &outbox.RelayConfig{Pool: pool, NewSender: sender, EndedRetention: -2}, "EndedRetention -2ns must not be negative"},
		{"properties", &outbox.RelayConfig{Pool: pool, NewSender: sender, SequenceProperty: "X", LastProperty: "X"}, `both "X"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.NewRelay(tt.cfg)
			require.ErrorContains(t, err, "outbox relay: RelayConfig: ")
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRelay_RunRefusesAMissingSchemaAndASecondRun(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	sender := func(context.Context, string) (outbox.Sender, error) { return nil, nil }
	r, err := outbox.NewRelay(&outbox.RelayConfig{Pool: newPoolUnmigrated(t), NewSender: sender})
	require.NoError(t, err)
	require.ErrorContains(t, r.Run(ctx), "is migration 003_outbox applied?")
	require.ErrorContains(t, r.Run(ctx), "Run called twice")

	r, err = outbox.NewRelay(&outbox.RelayConfig{Pool: newPool(t, 4), NewSender: sender})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, r.Run(rctx), "a cancelled context is a clean stop")
}

// TestRelay_MessageTheBrokerNeverTakes: a message under the outbox's limit (raised for
// Premium) but over the entity's keeps its session paused with the reason recorded;
// the session's later messages wait behind it and other sessions go on.
func TestRelay_MessageTheBrokerNeverTakes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	b := setup(t, 8, "orders") // the emulator takes 256 KiB
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL seqbus.outbox_max_message_bytes = '1048576'"); err != nil {
			return err
		}
		for _, p := range []outbox.EnqueueParams{
			{Entity: "orders", SessionID: "huge", Body: make([]byte, 512*1024)},
			{Entity: "orders", SessionID: "huge", Body: []byte("after")},
			{Entity: "orders", SessionID: "fine", Body: []byte("ok")},
		} {
			if _, err := outbox.Enqueue(ctx, tx, p); err != nil {
				return err
			}
		}
		return nil
	}))
	r := start(t, b.relayConfig(t))
	receiveSessions(ctx, t, b.client, "orders", map[string]int{"fine": 1})
	require.Eventually(t, func() bool {
		return count(t, b.pool, `SELECT coalesce(max(attempts), 0) FROM seqbus_outbox_paused WHERE session_key = 'huge'`) >= 2
	}, 30*time.Second, 10*time.Millisecond)
	var lastErr string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT last_error FROM seqbus_outbox_paused WHERE session_key = 'huge'`).Scan(&lastErr))
	t.Logf("the paused session's error: %s", lastErr)
	require.Contains(t, lastErr, "too large")
	require.Equal(t, int64(2), pending(t, b.pool))
	require.GreaterOrEqual(t, r.relay.Stats().Failures, int64(2))
	info, err := b.srv.Broker().GetQueue("orders")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "nothing of the paused session was sent")
}
