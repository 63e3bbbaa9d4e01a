package operator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// stores are the state stores every session test runs with.
var stores = []string{"servicebus", "postgres"}

const queue = "orders"

// bundle is one test's emulator, store, operator and a worker engine on the same entity.
type bundle struct {
	srv      *emulatortest.Server
	entity   sbadapter.Entity
	store    sequencer.StateStore
	lister   sessionstate.Lister
	op       *operator.Operator
	progress *testio.SyncBuffer
	// worker is a session source on a client of its own: it plays the part of a worker.
	worker *sbadapter.Source
	sender *azservicebus.Sender

	mu sync.Mutex
	// handled lists the sequences the worker engine handled, per session, in order.
	handled map[string][]int64
	// failing makes the handler fail these "session/sequence" keys.
	failing map[string]bool
	engine  *sequencer.Engine
}

type setupOptions struct {
	queue   broker.EntityProperties
	topics  map[string]emulatortest.Topic
	entity  sbadapter.Entity
	noQueue bool
}

func setup(t testing.TB, store string, opts *setupOptions) *bundle {
	t.Helper()
	if opts == nil {
		opts = &setupOptions{}
	}
	qp := opts.queue
	qp.RequiresSession = true
	queues := map[string]broker.EntityProperties{queue: qp}
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: queues, Topics: opts.topics, ClientOptions: sbadapter.ClientOptions(nil)})
	entity := opts.entity
	if entity == (sbadapter.Entity{}) {
		entity = sbadapter.Entity{Queue: queue}
	}
	b := &bundle{srv: srv, entity: entity, progress: &testio.SyncBuffer{}, handled: map[string][]int64{}, failing: map[string]bool{}}

	source, err := sbadapter.NewSource(srv.Client, sbadapter.Config{Entity: entity})
	require.NoError(t, err)
	mgmt := srv.NewClient(t, nil)
	var lister sessionstate.Lister
	switch store {
	case "servicebus":
		sb := sbstate.New(nil)
		b.store = sb
		mgmtSource, err := sbadapter.NewSource(mgmt, sbadapter.Config{Entity: entity})
		require.NoError(t, err)
		lister = sessionstate.NewScanLister(sessionstate.ScanConfig{
			IDs: mgmtSource.ListSessionsWithState, Source: source, Store: sb, Concurrency: 16, // as cmd/worker
		})
	case "postgres":
		pool := pgtest.NewPool(t, &pgtest.Options{Setup: func(ctx context.Context, p *pgxpool.Pool) error {
			_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
			return err
		}})
		pg, err := postgres.New(pool, &postgres.Config{Entity: entity.String()})
		require.NoError(t, err)
		b.store, lister = pg, pg
	default:
		t.Fatalf("unknown store %q", store)
	}
	b.lister = lister
	b.op, err = operator.New(operator.Config{
		Entity: entity, Client: mgmt, Sessions: source, Store: b.store, Lister: lister, Progress: b.progress,
	})
	require.NoError(t, err)

	b.worker, err = sbadapter.NewSource(srv.NewClient(t, sbadapter.ClientOptions(nil)), sbadapter.Config{Entity: entity})
	require.NoError(t, err)
	b.engine, err = sequencer.NewEngine(sequencer.EngineConfig{
		Retry: sequencer.RetryPolicy{Attempts: 1}, IdleTimeout: 300 * time.Millisecond, TombstoneTTL: time.Hour,
	}, sequencer.EngineDeps{Store: b.store, Handler: sequencer.HandlerFunc(b.handle)})
	require.NoError(t, err)
	sendTo := entity.Queue
	if sendTo == "" {
		sendTo = entity.Topic
	}
	b.sender, err = srv.Client.NewSender(sendTo, nil)
	require.NoError(t, err)
	return b
}

func (b *bundle) handle(_ context.Context, m *sequencer.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing[fmt.Sprintf("%s/%d", m.SessionID, m.Sequence)] {
		return errors.New("handler bug")
	}
	b.handled[m.SessionID] = append(b.handled[m.SessionID], m.Sequence)
	return nil
}

func (b *bundle) fail(key string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing[key] = on
}

func (b *bundle) handledOf(id string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.handled[id])
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publish sends the given sequences of session id (the last of n marked last), each with the
// MessageId "<id>/<seq>".
func (b *bundle) publish(t *testing.T, id string, n int64, seqs ...int64) {
	t.Helper()
	ctx := testCtx(t)
	for _, s := range seqs {
		sid, mid := id, fmt.Sprintf("%s/%d", id, s)
		require.NoError(t, b.sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, MessageID: &mid, Body: fmt.Appendf(nil, "%s step %d", id, s),
			ApplicationProperties: map[string]any{"Sequence": s, "IsLast": s == n, "Kind": "step"},
		}, nil))
	}
}

// run runs the worker engine on session id (locked by id) until it releases it.
func (b *bundle) run(t *testing.T, id string) sequencer.Outcome {
	t.Helper()
	ctx := testCtx(t)
	sess, err := b.worker.Accept(ctx, id)
	require.NoError(t, err)
	out, err := b.engine.RunSession(ctx, sess, nil)
	require.NoError(t, err)
	return out
}

// park publishes 1..n for session id and runs the engine with sequence poison failing: the
// session parks there, poison is dead-lettered and the later ones deferred.
func (b *bundle) park(t *testing.T, id string, n, poison int64) {
	t.Helper()
	key := fmt.Sprintf("%s/%d", id, poison)
	b.fail(key, true)
	defer b.fail(key, false)
	var all []int64
	for i := int64(1); i <= n; i++ {
		all = append(all, i)
	}
	b.publish(t, id, n, all...)
	require.Equal(t, sequencer.OutcomeParked, b.run(t, id))
}

// state loads the stored state of session id, locking it briefly.
func (b *bundle) state(t *testing.T, id string) (*sequencer.State, int64) {
	t.Helper()
	ctx := testCtx(t)
	sess, err := b.worker.Accept(ctx, id)
	require.NoError(t, err)
	defer func() { require.NoError(t, sess.Close(ctx)) }()
	st, v, err := b.store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	return st, v
}

// queueMessages receives (and completes) every message of session id in the queue, in order.
func (b *bundle) drainSession(t *testing.T, id string) []*azservicebus.ReceivedMessage {
	t.Helper()
	ctx := testCtx(t)
	r, err := b.srv.Client.AcceptSessionForQueue(ctx, queue, id, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close(ctx)) }()
	var out []*azservicebus.ReceivedMessage
	for {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		msgs, _ := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			require.NoError(t, r.CompleteMessage(ctx, m, nil))
		}
		out = append(out, msgs...)
	}
}

// deadLetters lists the dead letters as "session/sequence reason".
func (b *bundle) deadLetters(t *testing.T) []string {
	t.Helper()
	res, err := b.op.DLQList(testCtx(t), operator.DLQListParams{})
	require.NoError(t, err)
	var out []string
	for _, m := range res.Messages {
		out = append(out, fmt.Sprintf("%s/%d %s", m.SessionID, m.Sequence, m.Reason))
	}
	return out
}

func seqs(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
