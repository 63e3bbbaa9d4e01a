package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
)

func sessionQueue(lock time.Duration) map[string]broker.EntityProperties {
	return map[string]broker.EntityProperties{"sq": {RequiresSession: true, LockDuration: lock, MaxDeliveryCount: 10}}
}

func sendToSession(ctx context.Context, t *testing.T, s *azservicebus.Sender, session string, bodies ...string) {
	t.Helper()
	for _, body := range bodies {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body), SessionID: to.Ptr(session)}, nil))
	}
}

func TestAcceptSessionReceivesOnlyThatSessionInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	sendToSession(ctx, t, s, "a", "a1", "a2")
	sendToSession(ctx, t, s, "b", "b1")
	sendToSession(ctx, t, s, "a", "a3")

	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	require.Equal(t, "a", sr.SessionID())
	require.True(t, sr.LockedUntil().After(time.Now()), "locked until %v", sr.LockedUntil())

	msgs := receiveN(ctx, t, sr, 3)
	for i, m := range msgs {
		require.Equal(t, fmt.Sprintf("a%d", i+1), string(m.Body))
		require.Equal(t, "a", *m.SessionID)
		require.NoError(t, sr.CompleteMessage(ctx, m, nil))
	}
}

func TestSessionLockIsExclusive(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)

	other := b.srv.NewClient(t, testClientOptions())
	_, err = other.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.Error(t, err)
	var amqpErr *amqp.Error
	require.True(t, errors.As(err, &amqpErr), "got %T: %v", err, err)
	require.Equal(t, amqp.ErrCond("com.microsoft:session-cannot-be-locked"), amqpErr.Condition)

	// Once released, the session can be taken.
	require.NoError(t, sr.Close(ctx))
	sr2, err := other.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	require.NoError(t, sr2.Close(ctx))
}

func TestAcceptNextSessionWaitsForAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)

	type result struct {
		sr  *azservicebus.SessionReceiver
		err error
	}
	done := make(chan result, 1)
	go func() {
		sr, err := b.client.AcceptNextSessionForQueue(ctx, "sq", nil)
		done <- result{sr, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("accept-next returned before any session had messages: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	sendToSession(ctx, t, b.sender(t, "sq"), "late", "x")
	r := <-done
	require.NoError(t, r.err)
	defer r.sr.Close(ctx)
	require.Equal(t, "late", r.sr.SessionID())
	m := receiveN(ctx, t, r.sr, 1)[0]
	require.Equal(t, "x", string(m.Body))
	require.NoError(t, r.sr.CompleteMessage(ctx, m, nil))
}

func TestAcceptNextSessionTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.client.AcceptNextSessionForQueue(ctx, "sq", nil)
	requireCode(t, err, azservicebus.CodeTimeout)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestAcceptNextSkipsLockedSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	sendToSession(ctx, t, s, "a", "a1")
	sendToSession(ctx, t, s, "b", "b1")
	first, err := b.client.AcceptNextSessionForQueue(ctx, "sq", nil)
	require.NoError(t, err)
	defer first.Close(ctx)
	second, err := b.client.AcceptNextSessionForQueue(ctx, "sq", nil)
	require.NoError(t, err)
	defer second.Close(ctx)
	require.ElementsMatch(t, []string{"a", "b"}, []string{first.SessionID(), second.SessionID()})
}

func TestSessionStateKeptWhileSessionIsEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	require.NoError(t, err)
	st, err := sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.Nil(t, st)
	require.NoError(t, sr.SetSessionState(ctx, []byte("next=4"), nil))
	require.NoError(t, sr.Close(ctx))

	sr, err = b.client.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	require.NoError(t, err)
	st, err = sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("next=4"), st)

	pager := b.client.NewListSessionsForQueuePager("sq", nil)
	require.True(t, pager.More())
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"s1"}, page.Sessions, "a session with only state is listed")

	require.NoError(t, sr.SetSessionState(ctx, nil, nil))
	st, err = sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.Nil(t, st)
	require.NoError(t, sr.Close(ctx))
}

func TestListSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for _, id := range []string{"c", "a", "b"} {
		sendToSession(ctx, t, s, id, "m")
	}
	var ids []string
	pager := b.client.NewListSessionsForQueuePager("sq", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		ids = append(ids, page.Sessions...)
	}
	require.Equal(t, []string{"a", "b", "c"}, ids)
}

func TestRenewSessionLockAndExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: sessionQueue(30 * time.Second)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1", "a2")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	first := sr.LockedUntil()
	clk.Advance(20 * time.Second)
	require.NoError(t, sr.RenewSessionLock(ctx, nil))
	require.True(t, sr.LockedUntil().After(first), "renewed %v, was %v", sr.LockedUntil(), first)

	m := receiveN(ctx, t, sr, 1)[0]
	clk.Advance(31 * time.Second) // session lock expires
	// The SDK retries a settlement after session-lock loss with its default
	// backoff (about 45 s) before reporting CodeLockLost; within a short
	// deadline it must at least not report success.
	shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.Error(t, sr.CompleteMessage(shortCtx, m, nil), "settling under a lost session lock must not succeed")
	_ = sr.Close(ctx) // reports the session-lock-lost detach

	// The message comes back to whoever takes the session next.
	other := b.srv.NewClient(t, testClientOptions())
	sr2, err := other.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr2.Close(ctx)
	again := receiveN(ctx, t, sr2, 1)[0]
	require.Equal(t, "a1", string(again.Body))
	require.Equal(t, uint32(2), again.DeliveryCount)
	require.NoError(t, sr2.CompleteMessage(ctx, again, nil))
}

func TestExpireSessionLockHook(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	m := receiveN(ctx, t, sr, 1)[0]
	require.NoError(t, b.srv.ExpireSessionLock("sq", "a"))
	shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.Error(t, sr.CompleteMessage(shortCtx, m, nil))
	require.Error(t, b.srv.ExpireSessionLock("sq", "nope"))
}

func TestDeferredMessagesInSession(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "seq2", "seq1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	early := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "seq2", string(early.Body))
	require.NoError(t, sr.DeferMessage(ctx, early, nil))
	next := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "seq1", string(next.Body))
	require.NoError(t, sr.CompleteMessage(ctx, next, nil))

	got, err := sr.ReceiveDeferredMessages(ctx, []int64{*early.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "seq2", string(got[0].Body))
	require.NoError(t, sr.CompleteMessage(ctx, got[0], nil))

	peeked, err := sr.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
	require.NoError(t, err)
	require.Empty(t, peeked)
}

func TestSessionReceiverOnPlainQueueRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	_, err := b.client.AcceptSessionForQueue(ctx, "q1", "a", nil)
	require.Error(t, err)
	var amqpErr *amqp.Error
	require.True(t, errors.As(err, &amqpErr), "got %T: %v", err, err)
	require.Equal(t, amqp.ErrCondNotAllowed, amqpErr.Condition)
}

// TestConcurrentSessionWorkers mimics the seqbus worker: several clients take
// sessions with AcceptNextSession, drain each one in order and close it.
func TestConcurrentSessionWorkers(t *testing.T) {
	t.Parallel()
	const sessions, perSession, workers = 12, 8, 3
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	batchSender := b.sender(t, "sq")
	for i := range perSession {
		batch, err := batchSender.NewMessageBatch(ctx, nil)
		require.NoError(t, err)
		for s := range sessions {
			require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "%d", i), SessionID: to.Ptr(fmt.Sprintf("s%02d", s))}, nil))
		}
		require.NoError(t, batchSender.SendMessageBatch(ctx, batch, nil))
	}

	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for range workers {
		client := b.srv.NewClient(t, testClientOptions())
		wg.Go(func() {
			for {
				actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				sr, err := client.AcceptNextSessionForQueue(actx, "sq", nil)
				cancel()
				if err != nil {
					var sbErr *azservicebus.Error
					if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
						t.Errorf("accept next: %v", err)
					}
					return // no session left
				}
				for n := 0; n < perSession; {
					msgs, err := sr.ReceiveMessages(ctx, perSession, nil)
					if err != nil {
						t.Errorf("receive: %v", err)
						return
					}
					for _, m := range msgs {
						mu.Lock()
						got[sr.SessionID()] = append(got[sr.SessionID()], string(m.Body))
						mu.Unlock()
						if err := sr.CompleteMessage(ctx, m, nil); err != nil {
							t.Errorf("complete: %v", err)
							return
						}
						n++
					}
				}
				if err := sr.Close(ctx); err != nil {
					t.Errorf("close: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, got, sessions)
	want := make([]string, perSession)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	for id, bodies := range got {
		require.Equal(t, want, bodies, "session %s in order, each once", id)
	}
}

func TestSessionSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	require.NoError(t, b.srv.Broker().CreateTopic("events", broker.EntityProperties{}))
	require.NoError(t, b.srv.Broker().CreateSubscription("events", "ordered", broker.EntityProperties{RequiresSession: true}))
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "events"), "k1", "first", "second")

	sr, err := b.client.AcceptSessionForSubscription(ctx, "events", "ordered", "k1", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	msgs := receiveN(ctx, t, sr, 2)
	require.Equal(t, "first", string(msgs[0].Body))
	require.NoError(t, sr.CompleteMessage(ctx, msgs[0], nil))
	require.NoError(t, sr.DeadLetterMessage(ctx, msgs[1], &azservicebus.DeadLetterOptions{Reason: to.Ptr("nope")}))

	dlq, err := b.client.NewReceiverForSubscription("events", "ordered", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	require.NoError(t, err)
	defer dlq.Close(ctx)
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "second", string(d.Body))
	require.Equal(t, "nope", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

// The listing without SessionStateUpdatedAfter names the sessions that have messages at the
// broker (deferred ones count: the service counts them as active) or session state; not a session
// whose messages were all settled or dead-lettered. The scaling signal (worker) relies on it.
func TestListSessionsWhatCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for _, id := range []string{"active", "deferred", "completed", "deadlettered"} {
		sendToSession(ctx, t, s, id, "m")
	}
	settle := func(id string, fn func(*azservicebus.SessionReceiver, *azservicebus.ReceivedMessage) error) {
		sr, err := b.client.AcceptSessionForQueue(ctx, "sq", id, nil)
		require.NoError(t, err)
		require.NoError(t, fn(sr, receiveN(ctx, t, sr, 1)[0]))
		require.NoError(t, sr.Close(ctx))
	}
	settle("deferred", func(sr *azservicebus.SessionReceiver, m *azservicebus.ReceivedMessage) error {
		return sr.DeferMessage(ctx, m, nil)
	})
	settle("completed", func(sr *azservicebus.SessionReceiver, m *azservicebus.ReceivedMessage) error {
		return sr.CompleteMessage(ctx, m, nil)
	})
	settle("deadlettered", func(sr *azservicebus.SessionReceiver, m *azservicebus.ReceivedMessage) error {
		return sr.DeadLetterMessage(ctx, m, nil)
	})
	var ids []string
	pager := b.client.NewListSessionsForQueuePager("sq", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		ids = append(ids, page.Sessions...)
	}
	require.Equal(t, []string{"active", "deferred"}, ids)
}
