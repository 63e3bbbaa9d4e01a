package sequencertest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBrokerConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	brokers := map[sequencer.SessionSource]*sequencertest.Broker{}
	sequencertest.RunSessionConformance(t, func(t *testing.T) (sequencer.SessionSource, sequencertest.Publisher) {
		b := sequencertest.NewBroker(&sequencertest.BrokerOptions{Blocking: true, Clock: clock.Real(), LockDuration: 2 * time.Second})
		mu.Lock()
		c := b.NewClient(nil)
		brokers[c] = b
		mu.Unlock()
		return c, sequencertest.BrokerPublisher{B: b}
	}, &sequencertest.ConformanceOptions{
		Wait:         400 * time.Millisecond,
		Capabilities: sequencer.Capabilities{Deferral: true, Peek: true, SessionState: true, SessionLock: true},
		DeadLetters: func(_ context.Context, src sequencer.SessionSource, sessionID string) ([]sequencertest.DeadLettered, error) {
			mu.Lock()
			b := brokers[src]
			mu.Unlock()
			var out []sequencertest.DeadLettered
			for _, d := range b.DeadLetters() {
				if d.Message.SessionID == sessionID {
					out = append(out, sequencertest.DeadLettered{SessionID: d.Message.SessionID, Body: d.Message.Body,
						Properties: d.Message.Properties, Reason: d.Reason, Description: d.Description})
				}
			}
			return out, nil
		},
	})
}

func TestBrokerLockExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Time{})
	b := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clk, LockDuration: time.Minute})
	c := b.NewClient(nil)
	b.PublishSeq("s", 1, false)
	sess, err := c.AcceptNext(t.Context())
	require.NoError(t, err)
	require.Equal(t, clk.Now().Add(time.Minute), sess.LockedUntil())
	msgs, err := sess.Receive(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	clk.Advance(59 * time.Second)
	_, err = sess.RenewLock(t.Context())
	require.NoError(t, err)
	clk.Advance(59 * time.Second)
	_, err = c.Accept(t.Context(), "s")
	require.ErrorIs(t, err, sequencer.ErrSessionLocked, "renewed lock still held")
	clk.Advance(2 * time.Second)
	require.ErrorIs(t, sess.Complete(t.Context(), msgs[0]), sequencer.ErrLockLost)
	other, err := c.AcceptNext(t.Context())
	require.NoError(t, err, "an expired lock frees the session")
	again, err := other.Receive(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, uint32(2), again[0].DeliveryCount)
}

func TestBrokerMaxDeliveryCount(t *testing.T) {
	t.Parallel()
	b := sequencertest.NewBroker(&sequencertest.BrokerOptions{MaxDeliveryCount: 2})
	c := b.NewClient(nil)
	b.PublishSeq("s", 1, false)
	for range 2 {
		sess, err := c.AcceptNext(t.Context())
		require.NoError(t, err)
		msgs, err := sess.Receive(t.Context(), 1)
		require.NoError(t, err)
		require.NoError(t, sess.Abandon(t.Context(), msgs[0]))
		require.NoError(t, sess.Close(t.Context()))
	}
	require.Zero(t, b.Len())
	dl := b.DeadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, "MaxDeliveryCountExceeded", dl[0].Reason)
	_, err := c.AcceptNext(t.Context())
	require.ErrorIs(t, err, sequencer.ErrNoSession)
}

func TestProcessCrashReleasesLocksAndFailsLaterCalls(t *testing.T) {
	t.Parallel()
	b := sequencertest.NewBroker(nil)
	store := sequencertest.NewStore()
	p := &sequencertest.Process{}
	var seen []string
	p.Hook = func(c sequencertest.Call) error {
		seen = append(seen, c.String())
		if c.Op == "save" && c.Phase == sequencertest.After {
			return sequencertest.ErrCrash
		}
		return nil
	}
	c := b.NewClient(p)
	sc := store.Client(p)
	b.PublishSeq("s", 1, false)
	sess, err := c.AcceptNext(t.Context())
	require.NoError(t, err)
	_, err = sess.Receive(t.Context(), 1)
	require.NoError(t, err)
	_, err = sc.Save(t.Context(), sequencer.SaveParams{Session: sess, State: sequencer.NewState()})
	require.ErrorIs(t, err, sequencertest.ErrCrashed)
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	require.True(t, p.Crashed())
	require.Equal(t, "save", p.CrashedAt().Op)
	st, ver := store.Get("s")
	require.NotNil(t, st, "a crash after the save keeps the save")
	require.Equal(t, int64(1), ver)
	_, err = sess.Receive(t.Context(), 1)
	require.ErrorIs(t, err, sequencertest.ErrCrashed)

	// Another process takes over at once: the crashed process's locks are gone.
	c2 := b.NewClient(nil)
	sess2, err := c2.AcceptNext(t.Context())
	require.NoError(t, err)
	msgs, err := sess2.Receive(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, uint32(2), msgs[0].DeliveryCount)
	require.Contains(t, seen, "before accept_next()")
}

func TestProcessHookErrorFailsCall(t *testing.T) {
	t.Parallel()
	b := sequencertest.NewBroker(nil)
	p := &sequencertest.Process{Hook: func(c sequencertest.Call) error {
		if c.Op == "complete" && c.Phase == sequencertest.Before {
			return sequencertest.ErrInjected
		}
		return nil
	}}
	c := b.NewClient(p)
	b.PublishSeq("s", 1, false)
	sess, err := c.AcceptNext(t.Context())
	require.NoError(t, err)
	msgs, err := sess.Receive(t.Context(), 1)
	require.NoError(t, err)
	err = sess.Complete(t.Context(), msgs[0])
	require.ErrorIs(t, err, sequencertest.ErrInjected)
	require.False(t, p.Crashed())
	active, _ := b.Pending("s")
	require.Equal(t, 1, active, "a failure before the call leaves it undone")
}

func TestStoreVersions(t *testing.T) {
	t.Parallel()
	b := sequencertest.NewBroker(nil)
	store := sequencertest.NewStore()
	sc := store.Client(nil)
	sess, err := b.NewClient(nil).Accept(t.Context(), "s")
	require.NoError(t, err)
	ctx := context.Background()
	st, ver, err := sc.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	require.Zero(t, ver)
	require.Equal(t, int64(1), st.Next)
	st.Next = 5
	v1, err := sc.Save(ctx, sequencer.SaveParams{Session: sess, State: st})
	require.NoError(t, err)
	_, err = sc.Save(ctx, sequencer.SaveParams{Session: sess, State: st})
	require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	got, ver, err := sc.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	require.Equal(t, v1, ver)
	require.Equal(t, int64(5), got.Next)
	require.ErrorIs(t, sc.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: 7}), sequencer.ErrVersionConflict)
	require.NoError(t, sc.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: v1}))
	require.NoError(t, sc.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: v1}), "deleting a missing state")
	require.Empty(t, store.SessionIDs())
	require.Equal(t, 2, store.Calls()["save"])
	require.True(t, errors.Is(sc.Delete(ctx, sequencer.DeleteParams{Session: sess}), nil))
}
