package sbadapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// A dropped connection takes the session lock with it (the broker releases the session at
// once), and the SDK silently re-locks the same session on the next call when nobody else holds
// it. These tests pin down that a holder which lived through such a drop can neither go on as
// if nothing happened nor overwrite what another worker stored meanwhile.

func TestConnectionDropDuringReceiveIsLockLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	defer sess.Close(ctx)

	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := sess.Receive(rctx, 5)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the receive wait for messages
	require.Equal(t, 1, b.srv.DropConnections())
	select {
	case err := <-done:
		require.ErrorIs(t, err, sequencer.ErrLockLost)
	case <-time.After(8 * time.Second):
		t.Fatal("Receive did not notice the dropped connection")
	}
}

// A message received before the drop can never be settled: its lock went with the link. The SDK
// retries such a settlement for about 45s; the adapter gives up after SettleTimeout and says
// the lock is lost, so the engine stops instead of holding the session meanwhile.
func TestSettlementAfterConnectionDropIsLockLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1, 2)
	src, err := sbadapter.NewSource(b.client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}, SettleTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	sess, err := src.Accept(ctx, "a")
	require.NoError(t, err)
	defer sess.Close(ctx)
	msgs := receiveN(ctx, t, sess, 2)

	require.Equal(t, 1, b.srv.DropConnections())
	start := time.Now()
	err = sess.Complete(ctx, msgs[0])
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	require.Less(t, time.Since(start), 3*time.Second)
	require.NoError(t, ctx.Err())

	// Nothing was lost: another receiver gets both messages once the session is free. (Closing
	// the dead link reports the EOF; the lock is gone either way.)
	_ = sess.Close(ctx)
	otherSource, err := sbadapter.NewSource(newClient(t, b.srv.ConnectionString()), sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	other, err := otherSource.Accept(ctx, "a")
	require.NoError(t, err)
	defer other.Close(ctx)
	again := receiveN(ctx, t, other, 2)
	require.ElementsMatch(t, []int64{msgs[0].BrokerSequence, msgs[1].BrokerSequence}, []int64{again[0].BrokerSequence, again[1].BrokerSequence})
}

func TestStaleHolderCannotOverwriteStateAfterReconnect(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)

	// Worker A holds the session and has saved once.
	storeA := sbstate.New(nil)
	sessA, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	defer sessA.Close(ctx)
	st, v0, err := storeA.Load(ctx, sequencer.LoadParams{Session: sessA})
	require.NoError(t, err)
	st.Next = 2
	vA, err := storeA.Save(ctx, sequencer.SaveParams{Session: sessA, State: st, ExpectedVersion: v0})
	require.NoError(t, err)

	// A's connection drops; worker B takes the session, advances it and releases it.
	require.Equal(t, 1, b.srv.DropConnections())
	clientB := newClient(t, b.srv.ConnectionString())
	sourceB, err := sbadapter.NewSource(clientB, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	storeB := sbstate.New(nil)
	sessB, err := sourceB.Accept(ctx, "a")
	require.NoError(t, err)
	stB, vB, err := storeB.Load(ctx, sequencer.LoadParams{Session: sessB})
	require.NoError(t, err)
	require.Equal(t, vA, vB)
	stB.Next = 7
	_, err = storeB.Save(ctx, sequencer.SaveParams{Session: sessB, State: stB, ExpectedVersion: vB})
	require.NoError(t, err)
	require.NoError(t, sessB.Close(ctx))

	// A, unaware, saves on top of the version it knew: the SDK re-locks the session for it, so
	// only the version check can refuse the stale write.
	st.Next = 3
	_, err = storeA.Save(ctx, sequencer.SaveParams{Session: sessA, State: st, ExpectedVersion: vA})
	require.Error(t, err, "a stale holder overwrote the state another worker saved")
	require.True(t, errorIsAny(err, sequencer.ErrVersionConflict, sequencer.ErrLockLost), "got %v", err)
	require.NoError(t, sessA.Close(ctx))

	sessC, err := sourceB.Accept(ctx, "a")
	require.NoError(t, err)
	defer sessC.Close(ctx)
	got, _, err := storeB.Load(ctx, sequencer.LoadParams{Session: sessC})
	require.NoError(t, err)
	require.Equal(t, int64(7), got.Next, "B's progress survives")
}

func errorIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// TestRunnersSurviveConnectionDrops runs two replicas (a client each) over the emulator while
// every connection is dropped again and again. Each drop releases every session lock; the SDK
// reconnects and re-locks sessions on its own. Whatever happened, every session must end handled
// in order: a sequence is handled again only right after itself (the one at-least-once window),
// never skipped, and nothing is left behind at the broker.
func TestRunnersSurviveConnectionDrops(t *testing.T) {
	t.Parallel()
	const sessions, perSession = 6, 40
	// A lock long enough that no renewal runs: the SDK's RenewSessionLock and its link recovery
	// write the receiver's lock expiry unguarded, a data race inside the SDK that -race would
	// report here (the adapter itself never reads that field after accept).
	b := setup(t, time.Minute)
	ctx := testCtx(t)

	var all []*azservicebus.Message
	for s := range sessions {
		sid := fmt.Sprintf("s%d", s)
		for i := range perSession {
			n := int64(i + 1)
			if i%5 == 1 && i+1 < perSession { // some pairs arrive swapped: early messages
				n++
			} else if i%5 == 2 {
				n--
			}
			all = append(all, &azservicebus.Message{SessionID: &sid, Body: []byte("x"),
				ApplicationProperties: map[string]any{"Sequence": n, "IsLast": n == perSession}})
		}
	}
	for _, m := range all {
		require.NoError(t, b.sender.SendMessage(ctx, m, nil))
	}

	var mu sync.Mutex
	last := map[string]int64{}
	var violations []string
	h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		prev := last[m.SessionID]
		if m.Sequence != prev+1 && m.Sequence != prev {
			violations = append(violations, fmt.Sprintf("%s: %d after %d", m.SessionID, m.Sequence, prev))
		}
		last[m.SessionID] = m.Sequence
		time.Sleep(2 * time.Millisecond) // keep sessions busy across the drops
		return nil
	})
	ended := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range last {
			if v == perSession {
				n++
			}
		}
		return n
	}

	var runners []*sequencer.Runner
	for i := range 2 {
		client := newClient(t, b.srv.ConnectionString())
		if i == 0 {
			client = b.client
		}
		src, err := sbadapter.NewSource(client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}, SettleTimeout: 300 * time.Millisecond})
		require.NoError(t, err)
		r, err := sequencer.NewRunner(sequencer.RunnerConfig{
			Source: src, Store: sbstate.New(nil), Handler: h,
			Engine: sequencer.EngineConfig{WindowMessages: 2, ReceiveBatch: 4, IdleTimeout: 300 * time.Millisecond,
				Pipelining: sequencer.Awaited}, // the order check allows no replay
			MaxConcurrentSessions: 3, AcceptTimeout: 300 * time.Millisecond, ErrorBackoff: 20 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		runners = append(runners, r)
	}
	defer func() {
		for _, r := range runners {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = r.StopAndCancel(sctx)
			cancel()
		}
	}()

	drops := 0
	for ; drops < 4 && ended() < sessions; drops++ {
		time.Sleep(60 * time.Millisecond)
		b.srv.DropConnections()
	}
	require.GreaterOrEqual(t, drops, 2, "the sessions ended before the connections were dropped twice")
	if !eventually(func() bool { return ended() == sessions }, 15*time.Second) {
		mu.Lock()
		t.Logf("last handled: %v", last)
		mu.Unlock()
		for i, r := range runners {
			t.Logf("runner %d: %+v", i, r.Stats())
		}
		t.Fatalf("sessions did not all end after %d drops", drops)
	}
	mu.Lock()
	require.Empty(t, violations)
	mu.Unlock()
}

func eventually(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}
