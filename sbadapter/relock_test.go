package sbadapter_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/tcpproxy"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// interceptedSession runs beforeSet once, just before the first SetState goes to the SDK: the
// point between the store's version check (GetState) and its write.
type interceptedSession struct {
	*sbadapter.Session
	once      sync.Once
	beforeSet func()
}

func (s *interceptedSession) SetState(ctx context.Context, state []byte) error {
	s.once.Do(s.beforeSet)
	return s.Session.SetState(ctx, state)
}

// A worker whose connection is cut between the state store's version check and its write must
// not write: another worker may take the session over (the broker released the lock with the
// connection), run it to its end and leave the tombstone, and the SDK, retrying the write on a
// new connection, silently locks the session again for the first worker. Written then, the
// stale state (here: nothing handled yet) replaces the tombstone, and a late copy of sequence 1
// is handed to the handler after the session ended: a call out of order.
func TestStaleHolderCannotOverwriteTombstoneAfterRelock(t *testing.T) {
	t.Parallel()
	b := setup(t, 30*time.Second)
	ctx := testCtx(t)
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()

	proxy, err := tcpproxy.Start(b.srv.AMQPAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	connA := strings.Replace(b.srv.ConnectionString(), b.srv.AMQPAddr(), proxy.Addr(), 1)
	clientA, err := sbadapter.NewClientFromConnectionString(connA, nil) // as the worker makes it
	require.NoError(t, err)
	t.Cleanup(func() { _ = clientA.Close(context.Background()) })
	sourceA, err := sbadapter.NewSource(clientA, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)

	sendSeq(ctx, t, b.sender, "s", 1, false)
	sendSeq(ctx, t, b.sender, "s", 2, false)
	sendSeq(ctx, t, b.sender, "s", 3, true)

	storeA, storeB := sbstate.New(nil), sbstate.New(nil) // two processes
	sessA, err := sourceA.Accept(ctx, "s")
	require.NoError(t, err)
	stA, verA, err := storeA.Load(ctx, sequencer.LoadParams{Session: sessA})
	require.NoError(t, err)
	require.Equal(t, int64(1), stA.Next)

	var handled []int64
	var mu sync.Mutex
	engine, err := sequencer.NewEngine(sequencer.EngineConfig{IdleTimeout: 300 * time.Millisecond},
		sequencer.EngineDeps{Store: storeB, Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, m.Sequence)
			return nil
		})})
	require.NoError(t, err)
	runB := func() sequencer.Outcome {
		t.Helper()
		var sess sequencer.Session
		require.Eventually(t, func() bool {
			sess, err = b.source.Accept(ctx, "s")
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "the session is not released: %v", err)
		out, err := engine.RunSession(ctx, sess, nil)
		require.NoError(t, err)
		return out
	}

	stale := &interceptedSession{Session: sessA.(*sbadapter.Session), beforeSet: func() {
		proxy.Cut()
		require.Equal(t, sequencer.OutcomeEnded, runB(), "worker B takes the session over and ends it")
	}}
	stA.Counters.Deferred++ // A's write, as a deferral record of early messages would be
	_, err = storeA.Save(ctx, sequencer.SaveParams{Session: stale, State: stA, ExpectedVersion: verA})
	require.ErrorIs(t, err, sequencer.ErrLockLost, "the stale holder's write fails")
	_ = sessA.Close(ctx)

	// The tombstone B left is intact: a late copy of sequence 1 is a duplicate.
	sendSeq(ctx, t, b.sender, "s", 1, false)
	require.Equal(t, sequencer.OutcomeIdle, runB())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1, 2, 3}, handled, "sequence 1 is never handed over again after the end")
}

func sendSeq(ctx context.Context, t *testing.T, s *azservicebus.Sender, session string, seq int64, last bool) {
	t.Helper()
	sid := session
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{
		SessionID:             &sid,
		Body:                  []byte("x"),
		ApplicationProperties: map[string]any{"Sequence": seq, "IsLast": last},
	}, nil))
}
