package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// Stress scenarios with the real SDK: each one a way of using a client that
// a worker meets under load or failure.

func TestManyClientsAtOnce(t *testing.T) {
	t.Parallel()
	const clients, perClient = 40, 5
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {}}})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	errs := make(chan error, 2*clients)
	for c := range clients {
		client := b.srv.NewClient(t, testClientOptions())
		wg.Go(func() {
			s, err := client.NewSender("q", nil)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close(ctx)
			for i := range perClient {
				if err := s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d-%d", c, i)}, nil); err != nil {
					errs <- fmt.Errorf("client %d send %d: %w", c, i, err)
					return
				}
			}
		})
		wg.Go(func() {
			r, err := client.NewReceiverForQueue("q", nil)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close(ctx)
			for range perClient {
				msgs, err := r.ReceiveMessages(ctx, 1, nil)
				if err != nil {
					errs <- fmt.Errorf("client %d receive: %w", c, err)
					return
				}
				for _, m := range msgs {
					if err := r.CompleteMessage(ctx, m, nil); err != nil {
						errs <- fmt.Errorf("client %d complete: %w", c, err)
						return
					}
					mu.Lock()
					seen[string(m.Body)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	requireNoErrs(t, errs)
	require.Len(t, seen, clients*perClient)
	for body, n := range seen {
		require.Equal(t, 1, n, "message %s completed %d times", body, n)
	}
	require.Equal(t, clients, b.srv.DropConnections(), "one connection per client")
}

// TestLinksRecoverFromDetachDuringSendsAndReceives detaches the links of a
// sender and a receiver over and over while they work. Nothing may be lost
// and no stored message may be handed out twice.
//
// go-amqp decides a send or settlement that races with the detach by a
// select over "outcome arrived" and "link done" (SendReceipt.Wait,
// Receiver.sendDisposition), so it can report failure for an operation the
// emulator carried out; Service Bus sees the same. The SDK then repeats it:
// a repeated send stores the message twice (at-least-once; two sequence
// numbers), a repeated completion gets CodeLockLost for a message already
// gone. The test accepts both and checks what the emulator controls.
func TestLinksRecoverFromDetachDuringSendsAndReceives(t *testing.T) {
	t.Parallel()
	const total = 150
	// A message that reaches a link just as it is detached stays locked
	// until the lock expires, as on Service Bus (the SDK's releaser can no
	// longer release it): short locks bring such messages back quickly.
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {LockDuration: time.Second}}})
	ctx := testCtx(t)
	// Retries enough to ride out a detach every millisecond or so.
	client := b.srv.NewClient(t, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 20, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond},
	})
	s, err := client.NewSender("q", nil)
	require.NoError(t, err)
	r, err := client.NewReceiverForQueue("q", nil)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var progress atomic.Int64
	sent := make(chan struct{})
	wg.Go(func() {
		defer close(sent)
		for i := range total {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d", i)}, nil); err != nil {
				errs <- fmt.Errorf("send %d: %w", i, err)
				return
			}
			progress.Add(1)
		}
	})
	bodies := map[string]int{}
	seqs := map[int64]int{}
	lockLost, expired := 0, 0
	received := make(chan struct{})
	wg.Go(func() {
		defer close(received)
		for ctx.Err() == nil {
			select {
			case <-sent:
				if info, err := b.srv.Broker().GetQueue("q"); err == nil && info.Counts.Total == 0 {
					return // everything sent has been completed
				}
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			msgs, err := r.ReceiveMessages(rctx, 10, nil)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs <- fmt.Errorf("receive: %w", err)
				return
			}
			for _, m := range msgs {
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					var sbErr *azservicebus.Error
					if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
						errs <- fmt.Errorf("complete %s: %w", m.Body, err)
						return
					}
					lockLost++
				}
				bodies[string(m.Body)]++
				seqs[*m.SequenceNumber]++
				if m.DeliveryCount > 1 {
					expired++
				}
				progress.Add(1)
			}
		}
	})
	detaches := 0
	for last := int64(-1); ; {
		select {
		case <-received:
		case <-time.After(500 * time.Microsecond):
			// Detach only after some progress, so every operation gets
			// through eventually.
			if p := progress.Load(); p != last {
				last = p
				detaches += b.srv.DetachEntityLinks("q")
			}
			continue
		}
		break
	}
	wg.Wait()
	close(errs)
	requireNoErrs(t, errs)
	t.Logf("%d links detached; %d sends repeated by the SDK, %d completions reported lock-lost, %d messages back after their lock expired",
		detaches, len(seqs)-len(bodies), lockLost, expired)
	require.NotZero(t, detaches)
	require.Len(t, bodies, total, "every message arrived")
	for seq, n := range seqs {
		require.Equal(t, 1, n, "stored message %d handed out %d times", seq, n)
	}
}

func TestSessionReceiverClosedWhileReceiving(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		_, err := sr.ReceiveMessages(ctx, 5, nil)
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the receive issue credit and wait
	require.NoError(t, sr.Close(ctx))
	select {
	case err := <-got:
		t.Logf("pending receive returned %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the pending receive did not return after Close")
	}

	// The session is free at once, and nothing was taken by the closed link.
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
	sr2, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr2.Close(ctx)
	m := receiveN(ctx, t, sr2, 1)[0]
	require.Equal(t, "a1", string(m.Body))
	require.Equal(t, uint32(1), m.DeliveryCount)
	require.NoError(t, sr2.CompleteMessage(ctx, m, nil))
}

func TestAcceptNextRaceGivesEachSessionToOneReceiver(t *testing.T) {
	t.Parallel()
	const racers, sessions, perSession = 10, 3, 4
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for i := range sessions {
		for j := range perSession {
			sendToSession(ctx, t, s, fmt.Sprintf("s%d", i), fmt.Sprintf("s%d-%d", i, j))
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := map[string]*azservicebus.SessionReceiver{}
	errs := make(chan error, racers)
	for range racers {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			sr, err := b.client.AcceptNextSessionForQueue(actx, "sq", nil)
			if err != nil {
				var sbErr *azservicebus.Error
				if !(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) && !errors.Is(err, context.DeadlineExceeded) {
					errs <- fmt.Errorf("accept next: %w", err)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if winners[sr.SessionID()] != nil {
				errs <- fmt.Errorf("session %s accepted twice", sr.SessionID())
			}
			winners[sr.SessionID()] = sr
		})
	}
	wg.Wait()
	close(errs)
	requireNoErrs(t, errs)
	require.Len(t, winners, sessions)
	for id, sr := range winners {
		msgs := receiveN(ctx, t, sr, perSession)
		for j, m := range msgs {
			require.Equal(t, fmt.Sprintf("%s-%d", id, j), string(m.Body))
			require.NoError(t, sr.CompleteMessage(ctx, m, nil))
		}
		require.NoError(t, sr.Close(ctx))
	}
}

func TestBatchNearTheMaxSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, size int }{
		{0, 100}, {0, 4096}, {0, 60 * 1024}, // the Standard tier's 256 KiB
		{1 << 20, 200 * 1024}, {1 << 20, 1000}, // frames split both ways
	} {
		size := tc.size
		t.Run(fmt.Sprintf("%d in %d", tc.size, tc.limit), func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{maxMessageSize: int64(tc.limit), queues: map[string]broker.EntityProperties{"q": {}}})
			ctx := testCtx(t)
			s := b.sender(t, "q")
			batch, err := s.NewMessageBatch(ctx, nil)
			require.NoError(t, err)
			n := 0
			for {
				body := make([]byte, size)
				copy(body, fmt.Sprint(n))
				err := batch.AddMessage(&azservicebus.Message{Body: body, ApplicationProperties: map[string]any{"n": n}}, nil)
				if errors.Is(err, azservicebus.ErrMessageTooLarge) {
					break
				}
				require.NoError(t, err)
				n++
			}
			require.Greater(t, n, 1)
			require.NoError(t, s.SendMessageBatch(ctx, batch, nil), "a batch filled to its limit is accepted")
			r := b.receiver(t, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
			msgs := receiveN(ctx, t, r, n)
			for i, m := range msgs {
				require.Len(t, m.Body, size)
				require.EqualValues(t, i, m.ApplicationProperties["n"])
			}
		})
	}
}

func TestReceiveWithVaryingMaxMessages(t *testing.T) {
	t.Parallel()
	const total = 120
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {MaxDeliveryCount: 100}}})
	ctx := testCtx(t)
	s := b.sender(t, "q")
	batch, err := s.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	for i := range total {
		require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "%d", i)}, nil))
	}
	require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	r := b.receiver(t, "q", nil)
	seen := map[string]bool{}
	for round := 0; len(seen) < total; round++ {
		require.Less(t, round, 500, "stuck at %d of %d", len(seen), total)
		max := []int{1, 17, 3, 50, 2, 9, 1, 33}[round%8]
		msgs, err := r.ReceiveMessages(ctx, max, nil)
		require.NoError(t, err)
		require.LessOrEqual(t, len(msgs), max, "never more than asked for")
		for _, m := range msgs {
			require.NoError(t, r.CompleteMessage(ctx, m, nil))
			require.False(t, seen[string(m.Body)], "message %s completed twice", m.Body)
			seen[string(m.Body)] = true
		}
	}
	info, err := b.srv.Broker().GetQueue("q")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total)
}

func TestReceiveAndDeletePrefetchIsNotLostOnClose(t *testing.T) {
	t.Parallel()
	const total = 30
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q")
	for i := range total {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d", i)}, nil))
	}
	r, err := b.client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	require.NoError(t, err)
	seen := map[string]bool{}
	msgs, err := r.ReceiveMessages(ctx, 5, nil)
	require.NoError(t, err)
	for _, m := range msgs {
		seen[string(m.Body)] = true
	}
	require.NoError(t, r.Close(ctx))
	// Whatever the closed receiver prefetched is handed out by its next
	// calls (reference §4.2); the rest is still in the queue.
	for {
		msgs, err := r.ReceiveMessages(ctx, total, nil)
		if err != nil || len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seen[string(m.Body)] = true
		}
	}
	r2 := b.receiver(t, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	for len(seen) < total {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, err := r2.ReceiveMessages(rctx, total, nil)
		cancel()
		require.NoError(t, err, "lost: %d of %d seen", len(seen), total)
		for _, m := range msgs {
			require.False(t, seen[string(m.Body)], "message %s delivered twice", m.Body)
			seen[string(m.Body)] = true
		}
	}
}

func TestConnectionDropDuringManagementCall(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {}, "sq": {RequiresSession: true}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, m, nil))

	t.Run("peek is retried on a new connection", func(t *testing.T) {
		b.srv.DropConnectionOnNextManagementCalls(1)
		msgs, err := r.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
	})
	t.Run("a deferred message is settled on a new connection", func(t *testing.T) {
		deferred, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
		require.NoError(t, err)
		require.Len(t, deferred, 1)
		b.srv.DropConnectionOnNextManagementCalls(1)
		// Settlement retries with the SDK's default backoff (~4 s), so
		// this subtest is the slow one.
		require.NoError(t, r.CompleteMessage(ctx, deferred[0], nil), "the message lock outlives the connection")
		info, err := b.srv.Broker().GetQueue("q")
		require.NoError(t, err)
		require.Zero(t, info.Counts.Total)
	})
	t.Run("a session receiver takes its session again", func(t *testing.T) {
		sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
		sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
		require.NoError(t, err)
		defer sr.Close(ctx)
		b.srv.DropConnectionOnNextManagementCalls(1)
		// The session lock went with the connection; the SDK re-attaches
		// the same session on a new one (as in
		// TestSessionReceiverRecoversAfterDrop) and repeats the call.
		require.NoError(t, sr.SetSessionState(ctx, []byte("s"), nil))
		st, err := sr.GetSessionState(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, []byte("s"), st)
		msgs := receiveN(ctx, t, sr, 1)
		require.Equal(t, "a1", string(msgs[0].Body))
		require.NoError(t, sr.CompleteMessage(ctx, msgs[0], nil))
	})
}

func requireNoErrs(t *testing.T, errs <-chan error) {
	t.Helper()
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(t, errors.Join(all...))
}

func TestReceiveAndDeleteReceiversComingAndGoingLoseNothing(t *testing.T) {
	t.Parallel()
	const total = 300
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q")
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range total {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d", i)}, nil); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	seen := map[string]int{}
	take := func(msgs []*azservicebus.ReceivedMessage) {
		for _, m := range msgs {
			seen[string(m.Body)]++
		}
	}
	for round := 0; len(seen) < total; round++ {
		require.Less(t, round, 2000, "stuck at %d of %d", len(seen), total)
		r, err := b.client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		require.NoError(t, err)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		msgs, err := r.ReceiveMessages(rctx, 1+round%7, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Millisecond})
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		take(msgs)
		require.NoError(t, r.Close(ctx))
		// What arrived after the call is handed out after Close.
		for {
			msgs, err := r.ReceiveMessages(ctx, 100, nil)
			if err != nil || len(msgs) == 0 {
				break
			}
			take(msgs)
		}
	}
	<-sent
	for body, n := range seen {
		require.Equal(t, 1, n, "message %s received %d times", body, n)
	}
}

func TestSessionLockRenewedWhileTheSessionIsWorked(t *testing.T) {
	t.Parallel()
	const n = 20
	b := setup(t, setupOpts{queues: sessionQueue(250 * time.Millisecond)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for i := range n {
		sendToSession(ctx, t, s, "a", fmt.Sprint(i))
	}
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)

	stop := make(chan struct{})
	renewed := make(chan error, 1)
	go func() {
		count := 0
		for {
			select {
			case <-stop:
				if count == 0 {
					renewed <- errors.New("never renewed")
					return
				}
				renewed <- nil
				return
			case <-time.After(2 * time.Millisecond):
				if err := sr.RenewSessionLock(ctx, nil); err != nil {
					renewed <- fmt.Errorf("renew %d: %w", count, err)
					return
				}
				count++
			}
		}
	}()
	// Odd messages are deferred and fetched back; the session state tracks
	// progress; all while the lock is being renewed concurrently, and for
	// longer than the lock lasts without renewal.
	var deferred []int64
	slept := false
	for done := 0; done < n; {
		if done >= n/2 && !slept {
			time.Sleep(400 * time.Millisecond)
			slept = true
		}
		msgs, err := sr.ReceiveMessages(ctx, 4, nil)
		require.NoError(t, err)
		for _, m := range msgs {
			if i, _ := strconv.Atoi(string(m.Body)); i%2 == 1 {
				require.NoError(t, sr.DeferMessage(ctx, m, nil))
				deferred = append(deferred, *m.SequenceNumber)
			} else {
				require.NoError(t, sr.CompleteMessage(ctx, m, nil))
			}
			done++
			require.NoError(t, sr.SetSessionState(ctx, fmt.Appendf(nil, "%d", done), nil))
		}
	}
	back, err := sr.ReceiveDeferredMessages(ctx, deferred, nil)
	require.NoError(t, err)
	require.Len(t, back, len(deferred))
	for _, m := range back {
		require.NoError(t, sr.CompleteMessage(ctx, m, nil))
	}
	close(stop)
	require.NoError(t, <-renewed)
	st, err := sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(n), string(st))
	info, err := b.srv.Broker().GetQueue("sq")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total)
}

// TestPendingAcceptNextAcrossAConnectionDrop drops the connection while an
// accept-next waits. The emulator must not hand the session that arrives
// next to the dead connection's waiting link: the client gets it once it
// has reconnected.
func TestPendingAcceptNextAcrossAConnectionDrop(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	pending := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sr, err := b.client.AcceptNextSessionForQueue(actx, "sq", nil)
		if err == nil {
			_ = sr.Close(ctx)
			err = fmt.Errorf("accepted %q across the drop", sr.SessionID())
		}
		pending <- err
	}()
	require.Eventually(t, func() bool { return b.srv.DropConnections() > 0 }, 5*time.Second, 5*time.Millisecond)
	sendToSession(ctx, t, newClientSender(t, b), "late", "m")
	// The SDK does not retry an accept cut by a connection loss, and it
	// reconnects only after the next call has failed on the dead
	// connection too.
	requireCode(t, <-pending, azservicebus.CodeConnectionLost)
	var sr *azservicebus.SessionReceiver
	for i := 0; sr == nil; i++ {
		require.Less(t, i, 3, "the client does not recover")
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sr, _ = b.client.AcceptNextSessionForQueue(actx, "sq", nil)
		cancel()
	}
	defer sr.Close(ctx)
	require.Equal(t, "late", sr.SessionID())
	m := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, uint32(1), m.DeliveryCount, "never delivered on the dead connection")
	require.NoError(t, sr.CompleteMessage(ctx, m, nil))
}

// newClientSender is a sender on a client of its own, unaffected by the
// faults injected into the bundle's client.
func newClientSender(t *testing.T, b *testBundle) *azservicebus.Sender {
	t.Helper()
	s, err := b.srv.NewClient(t, testClientOptions()).NewSender("sq", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestReceiveAndDeleteLosesNothingToDetaches detaches a receive-and-delete
// receiver's link over and over while it receives. A message is deleted only
// when its delivery leaves for the client; one the emulator took for a link
// that went away before it could send it must stay in the queue (it used to
// be deleted and lost).
func TestReceiveAndDeleteLosesNothingToDetaches(t *testing.T) {
	t.Parallel()
	const total = 300
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q")
	for n := 0; n < total; {
		batch, err := s.NewMessageBatch(ctx, nil)
		require.NoError(t, err)
		for ; n < total; n++ {
			if err := batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "%d", n)}, nil); err != nil {
				break
			}
		}
		require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	}
	client := b.srv.NewClient(t, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 20, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond},
	})
	r, err := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Microsecond):
				b.srv.DetachEntityLinks("q")
			}
		}
	})
	seen := map[string]int{}
	for round := 0; len(seen) < total; round++ {
		require.Less(t, round, 3000, "%d of %d received", len(seen), total)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		msgs, _ := r.ReceiveMessages(rctx, 7, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Millisecond})
		cancel()
		for _, m := range msgs {
			require.Zero(t, m.LockedUntil, "no lock shows on a receive-and-delete message")
			seen[string(m.Body)]++
		}
		if info, err := b.srv.Broker().GetQueue("q"); err == nil && info.Counts.Total == 0 {
			break // the rest is in the client's prefetch buffer, or lost
		}
	}
	close(stop)
	wg.Wait()
	for len(seen) < total {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msgs, err := r.ReceiveMessages(rctx, total, nil)
		cancel()
		require.NoError(t, err, "lost: %d of %d received, none left in the queue", len(seen), total)
		for _, m := range msgs {
			seen[string(m.Body)]++
		}
	}
	for body, n := range seen {
		require.Equal(t, 1, n, "message %s received %d times", body, n)
	}
}
