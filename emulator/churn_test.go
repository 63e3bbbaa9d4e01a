package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// TestSharedClientSurvivesSessionChurn shares one client between session
// receivers that work through their sessions and goroutines that accept the
// next session and cancel the call so soon that go-amqp abandons sessions
// whose begin it never wrote. The abandoned sessions' ends reach the emulator on
// channels it has never seen; before the fix it closed the connection with
// "amqp:not-found: end on unknown channel", and every session receiver of the
// client lost its session.
func TestSharedClientSurvivesSessionChurn(t *testing.T) {
	t.Parallel()
	const holders, perSession, churners, churnRounds = 4, 12, 6, 60
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{
		"sq":    {RequiresSession: true, LockDuration: 30 * time.Second},
		"empty": {RequiresSession: true},
		"plain": {},
	}})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for h := range holders {
		batch, err := s.NewMessageBatch(ctx, nil)
		require.NoError(t, err)
		for i := range perSession {
			require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "%d", i), SessionID: to.Ptr(fmt.Sprintf("h%d", h))}, nil))
		}
		require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	}

	receivers := make([]*azservicebus.SessionReceiver, holders)
	for h := range holders {
		sr, err := b.client.AcceptSessionForQueue(ctx, "sq", fmt.Sprintf("h%d", h), nil)
		require.NoError(t, err)
		receivers[h] = sr
	}

	var churn, work sync.WaitGroup
	errs := make(chan error, holders+churners+2)
	for i := range churners {
		churn.Go(func() {
			for r := range churnRounds {
				// Cancelled after 0–3 ms: some calls end before the begin
				// is written, some during the attach. Cancelled, not timed
				// out: go-amqp turns a context deadline into the socket's
				// write deadline, so a frame written just as the deadline
				// passes fails with an i/o timeout, and go-amqp closes the
				// whole connection on it, taking every session receiver of
				// the client down with it (no emulator can prevent that).
				// A cancelled context (its only deadline the test's, far
				// away) abandons sessions and links the same way.
				actx, cancel := context.WithCancel(ctx)
				timer := time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, cancel)
				sr, err := b.client.AcceptNextSessionForQueue(actx, "empty", nil)
				timer.Stop()
				cancel()
				if err == nil {
					errs <- fmt.Errorf("churner %d round %d: accepted session %q of an empty queue", i, r, sr.SessionID())
					_ = sr.Close(ctx)
					return
				}
			}
		})
	}
	churn.Go(func() { // a sender and management calls on the same connection
		ps := b.sender(t, "plain")
		for i := range churnRounds {
			if err := ps.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "p%d", i)}, nil); err != nil {
				errs <- fmt.Errorf("send %d: %w", i, err)
				return
			}
			if _, err := receivers[i%holders].PeekMessages(ctx, 1, nil); err != nil {
				errs <- fmt.Errorf("peek %d: %w", i, err)
				return
			}
		}
	})
	for h, sr := range receivers {
		work.Go(func() {
			for done := 0; done < perSession; {
				msgs, err := sr.ReceiveMessages(ctx, 3, nil)
				if err != nil {
					errs <- fmt.Errorf("holder %d receive: %w", h, err)
					return
				}
				for _, m := range msgs {
					if err := sr.CompleteMessage(ctx, m, nil); err != nil {
						errs <- fmt.Errorf("holder %d complete: %w", h, err)
						return
					}
					done++
				}
				if err := sr.SetSessionState(ctx, fmt.Appendf(nil, "%d", done), nil); err != nil {
					errs <- fmt.Errorf("holder %d set state: %w", h, err)
					return
				}
			}
		})
	}
	work.Wait()
	churn.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(t, errors.Join(all...))

	// The session receivers still hold their sessions on the same connection.
	for h, sr := range receivers {
		st, err := sr.GetSessionState(ctx, nil)
		require.NoError(t, err, "holder %d", h)
		require.Equal(t, fmt.Sprint(perSession), string(st))
		require.NoError(t, sr.Close(ctx))
	}
	require.Equal(t, 1, b.srv.DropConnections(), "the client holds one connection")
}

// TestAbandonedAcceptNextLeavesNoSessionLocked gives up on accept-next calls
// at every point of their way (before the begin, during the attach, just as
// the emulator answers) while sessions are available. Whatever the client
// abandoned must not keep a session locked: afterwards every session can be
// accepted at once.
func TestAbandonedAcceptNextLeavesNoSessionLocked(t *testing.T) {
	t.Parallel()
	const sessions, racers, rounds = 3, 6, 40
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"sq": {RequiresSession: true, LockDuration: time.Hour}}})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for i := range sessions {
		sendToSession(ctx, t, s, fmt.Sprintf("s%d", i), "m")
	}
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for range racers {
		wg.Go(func() {
			for range rounds {
				// Cancel rather than time out: go-amqp makes a context deadline the socket's
				// write deadline, and one that passes mid-write closes the shared connection
				// (see TestSharedClientSurvivesSessionChurn).
				actx, cancel := context.WithCancel(ctx)
				timer := time.AfterFunc(time.Duration(rand.IntN(4000))*time.Microsecond, cancel)
				sr, err := b.client.AcceptNextSessionForQueue(actx, "sq", nil)
				timer.Stop()
				cancel()
				if err == nil {
					accepted.Add(1)
					_ = sr.Close(ctx)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d accept-next calls got a session", accepted.Load(), racers*rounds)

	got := map[string]bool{}
	for range sessions {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sr, err := b.client.AcceptNextSessionForQueue(actx, "sq", nil)
		cancel()
		require.NoError(t, err, "sessions accepted so far: %v", got)
		got[sr.SessionID()] = true
		defer sr.Close(ctx)
	}
	require.Len(t, got, sessions)
}

// TestOneClientRestoresOrderInManySessions runs the worker's pattern with the
// whole load on one client, as the benchmark that found the end-on-unknown-
// channel bug did: eight goroutines accept the next session, defer early
// messages, drain them by sequence number, keep their place in the session
// state and close the session when done, while accept-next calls time out
// and get cancelled around them.
func TestOneClientRestoresOrderInManySessions(t *testing.T) {
	t.Parallel()
	const sessions, perSession, workers = 12, 6, 8
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"sq": {RequiresSession: true, LockDuration: 30 * time.Second}}})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	for i := range sessions {
		batch, err := s.NewMessageBatch(ctx, nil)
		require.NoError(t, err)
		for j := perSession; j >= 1; j-- { // newest first: everything but the last is early
			require.NoError(t, batch.AddMessage(&azservicebus.Message{
				SessionID: to.Ptr(fmt.Sprintf("s%02d", i)), ApplicationProperties: map[string]any{"seq": int64(j)},
			}, nil))
		}
		require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	}

	var mu sync.Mutex
	handled := map[string][]int64{}
	var finished atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for wctx.Err() == nil {
				actx, cancel := context.WithTimeout(wctx, time.Duration(50+rand.IntN(200))*time.Millisecond)
				sr, err := b.client.AcceptNextSessionForQueue(actx, "sq", nil)
				cancel()
				if err != nil {
					continue // timed out or stopped
				}
				if err := restoreOrder(ctx, sr, perSession, func(seq int64) {
					mu.Lock()
					handled[sr.SessionID()] = append(handled[sr.SessionID()], seq)
					mu.Unlock()
				}); err != nil {
					errs <- fmt.Errorf("session %s: %w", sr.SessionID(), err)
					stop()
					return
				}
				if finished.Add(1) == sessions {
					stop()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	requireNoErrs(t, errs)
	require.Len(t, handled, sessions)
	for id, seqs := range handled {
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, seqs, "session %s", id)
	}
	info, err := b.srv.Broker().GetQueue("sq")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total)
}

// restoreOrder handles a session's messages in "seq" order: early ones are
// deferred and their sequence numbers kept in the session state, then
// received again when their turn comes.
func restoreOrder(ctx context.Context, sr *azservicebus.SessionReceiver, n int, handle func(int64)) error {
	defer sr.Close(context.WithoutCancel(ctx))
	next := int64(1)
	deferred := map[int64]int64{} // seq → broker sequence number
	for next <= int64(n) {
		if sn, ok := deferred[next]; ok {
			msgs, err := sr.ReceiveDeferredMessages(ctx, []int64{sn}, nil)
			if err != nil || len(msgs) != 1 {
				return fmt.Errorf("receive deferred %d: %d messages, %w", next, len(msgs), err)
			}
			if err := sr.CompleteMessage(ctx, msgs[0], nil); err != nil {
				return fmt.Errorf("complete deferred %d: %w", next, err)
			}
			delete(deferred, next)
			handle(next)
			next++
			if err := sr.SetSessionState(ctx, fmt.Appendf(nil, "%d", next), nil); err != nil {
				return fmt.Errorf("set state: %w", err)
			}
			continue
		}
		msgs, err := sr.ReceiveMessages(ctx, n, nil)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		for _, m := range msgs {
			seq, _ := m.ApplicationProperties["seq"].(int64)
			if seq != next {
				if err := sr.DeferMessage(ctx, m, nil); err != nil {
					return fmt.Errorf("defer %d: %w", seq, err)
				}
				deferred[seq] = *m.SequenceNumber
				continue
			}
			if err := sr.CompleteMessage(ctx, m, nil); err != nil {
				return fmt.Errorf("complete %d: %w", seq, err)
			}
			handle(seq)
			next++
		}
	}
	st, err := sr.GetSessionState(ctx, nil)
	if err != nil {
		return fmt.Errorf("get state: %w", err)
	}
	if want := fmt.Sprint(n + 1); string(st) != want {
		return fmt.Errorf("state %q, want %q", st, want)
	}
	return nil
}
