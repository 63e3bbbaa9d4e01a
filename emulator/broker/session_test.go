package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func sessionQueue(t *testing.T, tb *bundle, p broker.EntityProperties) *broker.Entity {
	t.Helper()
	p.RequiresSession = true
	return tb.queue(t, "sq", p)
}

func accept(t *testing.T, e *broker.Entity, id string) *broker.SessionLock {
	t.Helper()
	l, err := e.AcceptSession(context.Background(), id, "link-"+id)
	require.NoError(t, err)
	return l
}

func inSession(l *broker.SessionLock) broker.ReceiveOptions {
	return broker.ReceiveOptions{Mode: broker.PeekLock, Session: l}
}

func TestSessionEntityRules(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	q := tb.queue(t, "plain", broker.EntityProperties{})

	require.ErrorIs(t, sq.Send(context.Background(), []*amqp.Message{sessionMsg("a", "ok"), msg("no session")}),
		broker.ErrNotAllowed)
	require.Empty(t, sq.Peek(1, 10, ""), "the refused batch left nothing behind")
	send(t, q, sessionMsg("a", "session ids are fine on plain queues"))

	_, err := sq.TryReceive(1, peekLock)
	require.ErrorIs(t, err, broker.ErrNotAllowed, "non-session receiver on a session queue")
	_, err = q.AcceptSession(context.Background(), "a", "link")
	require.ErrorIs(t, err, broker.ErrNotAllowed, "session receiver on a plain queue")

	l := accept(t, sq, "a")
	_, err = q.TryReceive(1, inSession(l))
	require.ErrorIs(t, err, broker.ErrNotAllowed, "a session lock of another entity")

	// The dead-letter queue of a session queue is read without sessions.
	send(t, sq, sessionMsg("a", "x"))
	d := receiveOne(t, sq, inSession(l))
	require.NoError(t, sq.DeadLetter(d.LockToken, "r", "", nil))
	got := receiveOne(t, tb.lookup(t, "sq/$DeadLetterQueue"), peekLock)
	require.Equal(t, "x", string(got.Message.GetData()))
}

func TestSessionReceiveIsFIFOWithinTheSession(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	send(t, sq, sessionMsg("a", "a1"), sessionMsg("b", "b1"), sessionMsg("a", "a2"), sessionMsg("b", "b2"))

	la, lb := accept(t, sq, "a"), accept(t, sq, "b")
	da := receiveNow(t, sq, 10, inSession(la))
	db := receiveNow(t, sq, 10, inSession(lb))
	require.Equal(t, []string{"a1", "a2"}, bodies(da))
	require.Equal(t, []int64{1, 3}, seqs(da), "numbers are per entity")
	require.Equal(t, []string{"b1", "b2"}, bodies(db))
	require.Equal(t, la.LockedUntil(), da[0].LockedUntil, "message locks follow the session lock")
	require.Equal(t, la.LockedUntil(), da[0].Message.Annotations[broker.AnnotationLockedUntil])
	for _, d := range da {
		require.NoError(t, sq.Complete(d.LockToken))
	}
	require.Equal(t, []string{"b1", "b2"}, peekBodies(sq.Peek(1, 10, "")))
	require.Equal(t, []string{"b2"}, peekBodies(sq.Peek(4, 10, "b")))
	require.Empty(t, sq.Peek(1, 10, "a"))
}

func TestAcceptSessionIsExclusive(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	l := accept(t, sq, "a")
	_, err := sq.AcceptSession(context.Background(), "a", "other-link")
	require.ErrorIs(t, err, broker.ErrSessionCannotBeLocked)
	l.Release()
	l.Release() // twice is fine
	require.False(t, l.Held())
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after Release")
	}
	_, err = l.Renew()
	require.ErrorIs(t, err, broker.ErrSessionLockLost)
	_, err = sq.TryReceive(1, inSession(l))
	require.ErrorIs(t, err, broker.ErrSessionLockLost)
	l2 := accept(t, sq, "a")
	require.Equal(t, "a", l2.ID())
	require.Equal(t, "link-a", l2.Owner())

	empty, err := sq.AcceptNamedSession("", "link")
	require.NoError(t, err, "the empty session id can be locked by name")
	require.Equal(t, "", empty.ID())
}

func TestAcceptNextSession(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})

	// Nothing available: times out.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := sq.AcceptSession(ctx, "", "link")
	require.ErrorIs(t, err, broker.ErrTimeout)

	// A session with only deferred messages is not offered.
	send(t, sq, sessionMsg("deferred-only", "d"))
	l := accept(t, sq, "deferred-only")
	d := receiveOne(t, sq, inSession(l))
	require.NoError(t, sq.Defer(d.LockToken, nil))
	l.Release()

	send(t, sq, sessionMsg("b", "b1"), sessionMsg("a", "a1"))
	locked := accept(t, sq, "b") // b is held by another receiver
	next := accept(t, sq, "")
	require.Equal(t, "a", next.ID())
	_ = locked

	// Waiting: a message arriving in a free session wakes the acceptor.
	got := make(chan string, 1)
	go func() {
		l, err := sq.AcceptSession(t.Context(), "", "waiter")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- l.ID()
	}()
	send(t, sq, sessionMsg("b", "b2")) // b is locked: not offered
	send(t, sq, sessionMsg("c", "c1"))
	select {
	case id := <-got:
		require.Equal(t, "c", id)
	case <-time.After(5 * time.Second):
		t.Fatal("AcceptSession did not wake")
	}
}

func TestAcceptNextPicksOldestAvailableSession(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	send(t, sq, sessionMsg("z", "1"), sessionMsg("y", "2"), sessionMsg("x", "3"))
	for _, want := range []string{"z", "y", "x"} {
		require.Equal(t, want, accept(t, sq, "").ID())
	}
}

func TestSessionLockExpiry(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{LockDuration: 30 * time.Second})
	send(t, sq, sessionMsg("a", "a1"))
	l := accept(t, sq, "a")
	d := receiveOne(t, sq, inSession(l))

	tb.clk.Advance(20 * time.Second)
	until, err := l.Renew()
	require.NoError(t, err)
	require.Equal(t, epoch.Add(50*time.Second), until)
	require.Equal(t, until, l.LockedUntil())
	tb.clk.Advance(20 * time.Second)
	require.True(t, l.Held(), "renewed")

	tb.clk.Advance(10 * time.Second)
	require.False(t, l.Held())
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed on expiry")
	}
	require.ErrorIs(t, sq.Complete(d.LockToken), broker.ErrLockLost)
	_, err = l.State()
	require.ErrorIs(t, err, broker.ErrSessionLockLost)

	l2 := accept(t, sq, "")
	require.Equal(t, "a", l2.ID())
	again := receiveOne(t, sq, inSession(l2))
	require.Equal(t, uint32(2), deliveryCount(again))
}

func TestExpireSessionLockFaultHookWakesReceiver(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	l := accept(t, sq, "a")
	errc := make(chan error, 1)
	go func() {
		_, err := sq.Receive(t.Context(), 1, inSession(l))
		errc <- err
	}()
	require.ErrorIs(t, sq.ExpireSessionLock("nope"), broker.ErrSessionLockLost)
	require.NoError(t, sq.ExpireSessionLock("a"))
	select {
	case err := <-errc:
		require.ErrorIs(t, err, broker.ErrSessionLockLost)
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not notice the lost session lock")
	}
}

func TestSessionMessageLocksDoNotExpireInsideTheSessionLock(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{LockDuration: 30 * time.Second})
	send(t, sq, sessionMsg("a", "a1"))
	l := accept(t, sq, "a")
	d := receiveOne(t, sq, inSession(l))
	for range 3 {
		tb.clk.Advance(25 * time.Second)
		_, err := l.Renew()
		require.NoError(t, err)
	}
	require.NoError(t, sq.Complete(d.LockToken))
}

func TestReceiveDeferredInSessions(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	send(t, sq, sessionMsg("a", "a1"), sessionMsg("b", "b1"))
	la, lb := accept(t, sq, "a"), accept(t, sq, "b")
	for _, l := range []*broker.SessionLock{la, lb} {
		d := receiveOne(t, sq, inSession(l))
		require.NoError(t, sq.Defer(d.LockToken, nil))
	}
	_, err := sq.ReceiveDeferred([]int64{2}, inSession(la))
	require.ErrorIs(t, err, broker.ErrMessageNotFound, "b's message through a's lock")
	_, err = sq.ReceiveDeferred([]int64{1}, peekLock)
	require.ErrorIs(t, err, broker.ErrNotAllowed, "no session lock")
	got, err := sq.ReceiveDeferred([]int64{1}, inSession(la))
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, bodies(got))
	require.NoError(t, sq.Complete(got[0].LockToken))
}

func TestSessionState(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	l := accept(t, sq, "a")
	st, err := l.State()
	require.NoError(t, err)
	require.Nil(t, st)

	in := []byte("next=7")
	require.NoError(t, l.SetState(in))
	in[0] = 'X'
	st, err = l.State()
	require.NoError(t, err)
	require.Equal(t, []byte("next=7"), st)

	// The state outlives the lock even though the session has no messages.
	l.Release()
	l2 := accept(t, sq, "a")
	st, err = l2.State()
	require.NoError(t, err)
	require.Equal(t, []byte("next=7"), st)

	require.NoError(t, l2.SetState([]byte{})) // the SDK's "nil" is an empty binary
	st, err = l2.State()
	require.NoError(t, err)
	require.Nil(t, st)
}

func TestListSessions(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	send(t, sq, sessionMsg("m1", "x"), sessionMsg("m2", "x"), sessionMsg("m1", "y"))
	l := accept(t, sq, "stateonly")
	tb.clk.Advance(time.Minute / 2)
	require.NoError(t, l.SetState([]byte("s")))
	l.Release()
	accept(t, sq, "lockedonly") // a lock alone does not make a session listed

	sdkAll := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		lastUpdated time.Time
		skip, top   int
		want        []string
	}{
		{"all", sdkAll, 0, 100, []string{"m1", "m2", "stateonly"}},
		{"zero time means all", time.Time{}, 0, 0, []string{"m1", "m2", "stateonly"}},
		{"paged", sdkAll, 1, 1, []string{"m2"}},
		{"past the end", sdkAll, 5, 100, []string{}},
		{"state updated after", epoch, 0, 100, []string{"stateonly"}},
		{"state updated after (none)", epoch.Add(time.Minute), 0, 100, []string{}},
	}
	for _, tt := range tests {
		ids, err := sq.ListSessions(tt.lastUpdated, tt.skip, tt.top)
		require.NoError(t, err, tt.name)
		if ids == nil {
			ids = []string{}
		}
		require.Equal(t, tt.want, ids, tt.name)
	}
	_, err := tb.queue(t, "plain", broker.EntityProperties{}).ListSessions(sdkAll, 0, 10)
	require.ErrorIs(t, err, broker.ErrNotAllowed)
}

func TestSessionSubscription(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{RequiresSession: true}))
	topic := tb.lookup(t, "t")
	require.ErrorIs(t, topic.Send(context.Background(), []*amqp.Message{msg("no session")}), broker.ErrNotAllowed)
	send(t, topic, sessionMsg("a", "a1"))
	sub := tb.lookup(t, "t/Subscriptions/s")
	l := accept(t, sub, "")
	require.Equal(t, "a", l.ID())
	require.Equal(t, []string{"a1"}, bodies(receiveNow(t, sub, 5, inSession(l))))
}

func TestSessionReleaseReturnsLockedMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	send(t, sq, sessionMsg("a", "a1"), sessionMsg("a", "a2"))
	l := accept(t, sq, "a")
	ds := receiveNow(t, sq, 2, inSession(l))
	require.NoError(t, sq.Complete(ds[0].LockToken))
	l.Release()
	require.ErrorIs(t, sq.Complete(ds[1].LockToken), broker.ErrLockLost)

	l2 := accept(t, sq, "")
	again := receiveNow(t, sq, 5, inSession(l2))
	require.Equal(t, []string{"a2"}, bodies(again))
	require.Equal(t, uint32(1), deliveryCount(again[0]), "a session closed by its receiver does not count a delivery")

	// The lock expiring does count (ExpireSessionLock stands for the time running out).
	require.NoError(t, sq.ExpireSessionLock("a"))
	l3 := accept(t, sq, "")
	third := receiveNow(t, sq, 5, inSession(l3))
	require.Equal(t, []string{"a2"}, bodies(third))
	require.Equal(t, uint32(2), deliveryCount(third[0]))
}

// TestAcceptNextFollowsEachSessionsFirstAvailableMessage: accept-next keeps
// choosing the session whose first available message is oldest as sessions
// are locked, drained and released, and TryAcceptNextSession says when there
// is none.
func TestAcceptNextFollowsEachSessionsFirstAvailableMessage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sq := sessionQueue(t, tb, broker.EntityProperties{})
	// Sequence numbers: a1=1, b1=2, a2=3, c1=4.
	send(t, sq, sessionMsg("a", "a1"), sessionMsg("b", "b1"), sessionMsg("a", "a2"), sessionMsg("c", "c1"))

	a, err := sq.TryAcceptNextSession("w1")
	require.NoError(t, err)
	require.Equal(t, "a", a.ID(), "a1 is the oldest message")
	first := receiveOne(t, sq, inSession(a))
	require.NoError(t, sq.Complete(first.LockToken))
	a.Release() // a now starts at a2 (3): b (2) is older

	b := accept(t, sq, "")
	require.Equal(t, "b", b.ID())
	a = accept(t, sq, "")
	require.Equal(t, "a", a.ID())
	c := accept(t, sq, "")
	require.Equal(t, "c", c.ID())

	none, err := sq.TryAcceptNextSession("w2")
	require.NoError(t, err)
	require.Nil(t, none, "every session with messages is locked")

	// Abandoning b1 makes b available again, the oldest once released.
	b1 := receiveOne(t, sq, inSession(b))
	require.NoError(t, sq.Abandon(b1.LockToken, nil))
	b.Release()
	a.Release()
	next, err := sq.TryAcceptNextSession("w3")
	require.NoError(t, err)
	require.Equal(t, "b", next.ID())
}
