package sbadapter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

type bundle struct {
	srv    *emulator.Server
	client *azservicebus.Client
	sender *azservicebus.Sender
	source *sbadapter.Source
}

func setup(t *testing.T, lock time.Duration) *bundle {
	t.Helper()
	sessions := broker.EntityProperties{RequiresSession: true, LockDuration: lock}
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{"sq": sessions},
		Topics:        map[string]emulatortest.Topic{"t": {Subscriptions: map[string]emulatortest.Subscription{"sub": {Properties: sessions}}}},
		ClientOptions: clientOptions(),
	})
	client := srv.Client
	sender, err := client.NewSender("sq", nil)
	require.NoError(t, err)
	source, err := sbadapter.NewSource(client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	return &bundle{srv: srv.Server, client: client, sender: sender, source: source}
}

// clientOptions are the options the adapter requires: the SDK's retries off (see "Lock tenure"
// in the package documentation).
func clientOptions() *azservicebus.ClientOptions { return sbadapter.ClientOptions(nil) }

// newClient connects a client with clientOptions to conn.
func newClient(t *testing.T, conn string) *azservicebus.Client {
	t.Helper()
	client, err := sbadapter.NewClientFromConnectionString(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	})
	return client
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func send(ctx context.Context, t *testing.T, s *azservicebus.Sender, session string, seqs ...int64) {
	t.Helper()
	for _, n := range seqs {
		sid, mid := session, fmt.Sprintf("%s-%d", session, n)
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{
			SessionID:             &sid,
			MessageID:             &mid,
			Body:                  fmt.Appendf(nil, "body %d", n),
			ApplicationProperties: map[string]any{"Sequence": n},
		}, nil))
	}
}

func receiveN(ctx context.Context, t *testing.T, s sequencer.Session, n int) []*sequencer.Message {
	t.Helper()
	var out []*sequencer.Message
	for len(out) < n {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := s.Receive(rctx, n-len(out))
		cancel()
		require.NoError(t, err)
		require.NotEmpty(t, got, "messages stopped arriving after %d of %d", len(out), n)
		out = append(out, got...)
	}
	return out
}

func TestAcceptNextReceiveComplete(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1, 2, 3)

	sess, err := b.source.AcceptNext(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", sess.ID())
	require.True(t, sess.LockedUntil().After(time.Now()))

	msgs := receiveN(ctx, t, sess, 3)
	for i, m := range msgs {
		require.Equal(t, "a", m.SessionID)
		require.Equal(t, fmt.Sprintf("a-%d", i+1), m.MessageID)
		require.Equal(t, fmt.Appendf(nil, "body %d", i+1), m.Body)
		require.EqualValues(t, i+1, m.Properties["Sequence"])
		require.Positive(t, m.BrokerSequence)
		require.Equal(t, uint32(1), m.DeliveryCount)
		require.False(t, m.EnqueuedTime.IsZero())
		require.NoError(t, sess.Complete(ctx, m))
	}

	// Nothing more: an idle receive returns empty, not an error.
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	got, err := sess.Receive(rctx, 5)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, sess.Close(ctx))
	require.NoError(t, sess.Close(ctx), "second close is harmless")
}

func TestAcceptNextNoSession(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.source.AcceptNext(ctx)
	require.ErrorIs(t, err, sequencer.ErrNoSession)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestAcceptByIDAndLockedElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1)

	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "a", sess.ID())

	other, err := sbadapter.NewSource(newClient(t, b.srv.ConnectionString()), sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	_, err = other.Accept(ctx, "a")
	require.ErrorIs(t, err, sequencer.ErrSessionLocked)

	require.NoError(t, sess.Close(ctx))
	require.Eventually(t, func() bool {
		s2, err := other.Accept(ctx, "a")
		if err != nil {
			return false
		}
		_ = s2.Close(ctx)
		return true
	}, 5*time.Second, 50*time.Millisecond, "the session is free once closed")
}

func TestDeferAndReceiveDeferred(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 3, 2, 1)

	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 3)
	bySeq := map[int64]int64{}
	for _, m := range msgs {
		bySeq[m.Properties["Sequence"].(int64)] = m.BrokerSequence
	}
	require.NoError(t, sess.(sequencer.DeferringSession).Defer(ctx, msgs[0]))
	require.NoError(t, sess.(sequencer.DeferringSession).Defer(ctx, msgs[1]))
	require.NoError(t, sess.Complete(ctx, msgs[2]))

	// 999999 does not exist: it is left out without an error.
	got, err := sess.(sequencer.DeferringSession).ReceiveDeferred(ctx, []int64{bySeq[2], 999999, bySeq[3]})
	require.NoError(t, err)
	require.Len(t, got, 2)
	seqs := []int64{got[0].BrokerSequence, got[1].BrokerSequence}
	slices.Sort(seqs)
	want := []int64{bySeq[2], bySeq[3]}
	slices.Sort(want)
	require.Equal(t, want, seqs)
	for _, m := range got {
		require.Equal(t, "a", m.SessionID)
		require.NoError(t, sess.Complete(ctx, m))
	}
	got, err = sess.(sequencer.DeferringSession).ReceiveDeferred(ctx, []int64{bySeq[2]})
	require.NoError(t, err)
	require.Empty(t, got, "completed deferred messages are gone")
	require.NoError(t, sess.Close(ctx))
}

// TestPeekShowsActiveAndDeferredOfTheSession: Peek lists the locked session's messages, deferred
// ones too, without those of other sessions and without settling anything.
func TestPeekShowsActiveAndDeferredOfTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1, 2, 3)
	send(ctx, t, b.sender, "b", 1)

	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 3)
	require.NoError(t, sess.(sequencer.DeferringSession).Defer(ctx, msgs[1]))
	require.NoError(t, sess.Complete(ctx, msgs[0]))

	peeked, err := sess.(*sbadapter.Session).Peek(ctx, 0, 10)
	require.NoError(t, err)
	var got []string
	for _, m := range peeked {
		require.Equal(t, "a", *m.SessionID)
		got = append(got, fmt.Sprintf("%d:%d", m.ApplicationProperties["Sequence"], m.State))
	}
	require.Equal(t, []string{"2:1", "3:0"}, got, "sequence 2 deferred, 3 active (locked by this receiver), 1 completed")

	from := msgs[2].BrokerSequence
	peeked, err = sess.(*sbadapter.Session).Peek(ctx, from, 10)
	require.NoError(t, err)
	require.Len(t, peeked, 1, "from a broker sequence number on")
	require.NoError(t, sess.Close(ctx))
}

// TestHoldingPeeksPageByPage: Holding finds the numbers asked about past its first peek's page,
// with other messages of the session (and other sessions') between them.
func TestHoldingPeeksPageByPage(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	var seqs []int64
	for i := range int64(70) {
		seqs = append(seqs, i+1)
	}
	send(ctx, t, b.sender, "a", seqs...)
	send(ctx, t, b.sender, "b", 1)

	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 70)
	require.NoError(t, sess.Complete(ctx, msgs[69]))
	require.NoError(t, sess.(sequencer.DeferringSession).Defer(ctx, msgs[1]))
	hs := sess.(sequencer.HoldingSession)
	held, err := hs.Holding(ctx, []int64{msgs[69].BrokerSequence, msgs[0].BrokerSequence, msgs[1].BrokerSequence, msgs[68].BrokerSequence})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{msgs[0].BrokerSequence, msgs[68].BrokerSequence}, held,
		"the first and the 69th (second page) active; the 70th completed, the second deferred")
	require.NoError(t, sess.Close(ctx))
}

func TestAbandonAndDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1, 2)

	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 2)
	require.NoError(t, sess.DeadLetter(ctx, msgs[1], sequencer.DeadLetterParams{Reason: "InvalidSequence", Description: "test"}))
	require.NoError(t, sess.Abandon(ctx, msgs[0]))
	again := receiveN(ctx, t, sess, 1)
	require.Equal(t, msgs[0].MessageID, again[0].MessageID)
	require.Equal(t, uint32(2), again[0].DeliveryCount, "abandon counts a delivery")
	require.NoError(t, sess.Complete(ctx, again[0]))
	require.NoError(t, sess.Close(ctx))

	dlq, err := b.client.NewReceiverForQueue("sq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	require.NoError(t, err)
	defer dlq.Close(ctx)
	dl, err := dlq.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	require.Equal(t, "InvalidSequence", *dl[0].DeadLetterReason)
	require.Equal(t, "test", *dl[0].DeadLetterErrorDescription)
}

func TestSessionStateAndRenew(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	src, err := b.source.Accept(ctx, "s")
	require.NoError(t, err)
	sess := src.(*sbadapter.Session)

	st, err := sess.GetState(ctx)
	require.NoError(t, err)
	require.Nil(t, st)
	require.NoError(t, sess.SetState(ctx, []byte("state-1")))
	st, err = sess.GetState(ctx)
	require.NoError(t, err)
	require.Equal(t, []byte("state-1"), st)

	before := sess.LockedUntil()
	time.Sleep(20 * time.Millisecond)
	until, err := sess.RenewLock(ctx)
	require.NoError(t, err)
	require.True(t, until.After(before), "renewed %v after %v", until, before)
	require.NoError(t, sess.Close(ctx))

	// State outlives the lock.
	again, err := b.source.Accept(ctx, "s")
	require.NoError(t, err)
	st, err = again.(*sbadapter.Session).GetState(ctx)
	require.NoError(t, err)
	require.Equal(t, []byte("state-1"), st)
	require.NoError(t, again.(*sbadapter.Session).SetState(ctx, nil))
	st, err = again.(*sbadapter.Session).GetState(ctx)
	require.NoError(t, err)
	require.Nil(t, st)
	require.NoError(t, again.Close(ctx))
}

func TestLockLostIsMapped(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	send(ctx, t, b.sender, "a", 1)
	sess, err := b.source.Accept(ctx, "a")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 1)

	// Another client takes the session once its lock expires, so this receiver cannot re-lock it.
	require.NoError(t, b.srv.ExpireSessionLock("sq", "a"))
	thief, err := sbadapter.NewSource(newClient(t, b.srv.ConnectionString()), sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	stolen, err := thief.Accept(ctx, "a")
	require.NoError(t, err)
	defer stolen.Close(ctx)

	err = sess.Complete(ctx, msgs[0])
	require.Error(t, err)
	require.ErrorIs(t, err, sequencer.ErrLockLost, "got %v (class %s)", err, sbadapter.Classify(err))
	require.Equal(t, sbadapter.ClassLockLost, sbadapter.Classify(err))
	_ = sess.Close(ctx)
}

func TestSubscriptionAndListSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	ts, err := b.client.NewSender("t", nil)
	require.NoError(t, err)
	send(ctx, t, ts, "x", 1)
	send(ctx, t, ts, "y", 1)

	src, err := sbadapter.NewSource(b.client, sbadapter.Config{Entity: sbadapter.Entity{Topic: "t", Subscription: "sub"}})
	require.NoError(t, err)
	ids, err := src.ListSessions(ctx)
	require.NoError(t, err)
	slices.Sort(ids)
	require.Equal(t, []string{"x", "y"}, ids)

	withState, err := src.ListSessionsWithState(ctx)
	require.NoError(t, err)
	require.Empty(t, withState, "no session has state yet")

	sess, err := src.AcceptNext(ctx)
	require.NoError(t, err)
	require.Contains(t, []string{"x", "y"}, sess.ID())
	require.NoError(t, sess.(*sbadapter.Session).SetState(ctx, []byte("s")))
	withState, err = src.ListSessionsWithState(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{sess.ID()}, withState)
	msgs := receiveN(ctx, t, sess, 1)
	require.Equal(t, sess.ID(), msgs[0].SessionID)
	require.NoError(t, sess.Complete(ctx, msgs[0]))
	require.NoError(t, sess.Close(ctx))
}

func TestMissingEntityIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	src, err := sbadapter.NewSource(b.client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "nope"}})
	require.NoError(t, err)
	_, err = src.Accept(ctx, "a")
	require.ErrorIs(t, err, sequencer.ErrNotFound)
	require.Equal(t, sbadapter.ClassFatal, sbadapter.Classify(err))

	err = src.Probe(ctx)
	require.ErrorIs(t, err, sequencer.ErrNotFound, "got %v", err)
	require.Equal(t, sbadapter.ClassFatal, sbadapter.Classify(err))
	require.NoError(t, b.source.Probe(ctx))
}

func TestWrongKeyIsUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	conn := strings.Replace(b.srv.ConnectionString(), emulator.DefaultKey, "wrong-key", 1)
	src, err := sbadapter.NewSource(newClient(t, conn), sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	err = src.Probe(ctx)
	require.ErrorIs(t, err, sbadapter.ErrUnauthorized, "got %v", err)
	require.Equal(t, sbadapter.ClassFatal, sbadapter.Classify(err))
	_, err = src.Accept(ctx, "a")
	require.ErrorIs(t, err, sbadapter.ErrUnauthorized, "got %v", err)
}
