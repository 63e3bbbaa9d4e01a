package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/sequencer"
)

func TestSessionReceiveConvertsMessages(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 10, "a"), sbMsg("s1", 11, "b"), sbMsg("s1", 12, "c")}
	first := f.active[0]
	s := newSession(f, discard())

	got, err := s.Receive(context.Background(), 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	m := got[0]
	require.Equal(t, "s1", m.SessionID)
	require.Equal(t, int64(10), m.BrokerSequence)
	require.Equal(t, "ma", m.MessageID)
	require.Equal(t, uint32(1), m.DeliveryCount)
	require.Equal(t, []byte("a"), m.Body)
	require.Equal(t, "text/plain", m.ContentType)
	require.Equal(t, int64(10), m.Properties["seq"])
	require.Equal(t, time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC), m.EnqueuedTime)
	require.Same(t, first, m.Raw, "Raw keeps the SDK message for settlement")

	got, err = s.Receive(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestSessionReceiveIdleReturnsEmpty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}},
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSession(newFakeReceiver("s1"), discard())
			ctx, cancel := tt.ctx()
			defer cancel()
			got, err := s.Receive(ctx, 5)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Empty(t, got)
		})
	}
}

func TestSessionErrorsMapToSentinels(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 1, "a")}
	s := newSession(f, discard())
	msgs, err := s.Receive(context.Background(), 1)
	require.NoError(t, err)
	f.failWith = &azservicebus.Error{Code: azservicebus.CodeLockLost}

	ctx := context.Background()
	calls := map[string]func() error{
		"receive":          func() error { _, err := s.Receive(ctx, 1); return err },
		"receive deferred": func() error { _, err := s.ReceiveDeferred(ctx, []int64{1}); return err },
		"complete":         func() error { return s.Complete(ctx, msgs[0]) },
		"defer":            func() error { return s.Defer(ctx, msgs[0]) },
		"abandon":          func() error { return s.Abandon(ctx, msgs[0]) },
		"dead-letter":      func() error { return s.DeadLetter(ctx, msgs[0], sequencer.DeadLetterParams{}) },
		"renew":            func() error { _, err := s.RenewLock(ctx); return err },
		"get state":        func() error { _, err := s.GetState(ctx); return err },
		"set state":        func() error { return s.SetState(ctx, []byte("x")) },
	}
	for name, call := range calls {
		err := call()
		require.ErrorIs(t, err, sequencer.ErrLockLost, name)
		require.Contains(t, err.Error(), `"s1"`, name)
		require.Equal(t, ClassLockLost, Classify(err), name)
	}
}

func TestSessionSettlement(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 1, "a"), sbMsg("s1", 2, "b"), sbMsg("s1", 3, "c"), sbMsg("s1", 4, "d")}
	s := newSession(f, discard())
	ctx := context.Background()
	msgs, err := s.Receive(ctx, 4)
	require.NoError(t, err)
	require.Len(t, msgs, 4)

	require.NoError(t, s.Complete(ctx, msgs[0]))
	require.NoError(t, s.Defer(ctx, msgs[1]))
	require.NoError(t, s.Abandon(ctx, msgs[2]))
	require.NoError(t, s.DeadLetter(ctx, msgs[3], sequencer.DeadLetterParams{Reason: "InvalidSequence", Description: "no seq property"}))
	require.Equal(t, map[int64]string{1: "complete", 2: "defer", 3: "abandon", 4: "deadletter"}, f.settled)
	require.Equal(t, "InvalidSequence", f.dlReason)
	require.Equal(t, "no seq property", f.dlDesc)

	// A delivery is settled once: the second attempt reports the lock as gone.
	for name, settle := range map[string]func() error{
		"complete":    func() error { return s.Complete(ctx, msgs[0]) },
		"defer":       func() error { return s.Defer(ctx, msgs[1]) },
		"abandon":     func() error { return s.Abandon(ctx, msgs[2]) },
		"dead-letter": func() error { return s.DeadLetter(ctx, msgs[3], sequencer.DeadLetterParams{}) },
	} {
		err := settle()
		require.ErrorIs(t, err, sequencer.ErrLockLost, name)
		require.ErrorContains(t, err, "already settled", name)
	}
	require.Equal(t, map[int64]string{1: "complete", 2: "defer", 3: "abandon", 4: "deadletter"}, f.settled, "the SDK was not asked twice")

	// A message that did not come from this adapter cannot be settled.
	err = s.Complete(ctx, &sequencer.Message{MessageID: "x", Raw: "nope"})
	require.ErrorContains(t, err, "not received through this adapter")
	require.Error(t, s.Complete(ctx, nil))
}

func TestSessionReceiveDeferredSkipsMissing(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.deferred[5] = sbMsg("s1", 5, "five")
	f.deferred[7] = sbMsg("s1", 7, "seven")
	s := newSession(f, discard())
	ctx := context.Background()

	got, err := s.ReceiveDeferred(ctx, []int64{5, 7})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, [][]int64{{5, 7}}, f.deferredReq, "one request when all exist")

	got, err = s.ReceiveDeferred(ctx, []int64{5, 6, 7})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, int64(5), got[0].BrokerSequence)
	require.Equal(t, int64(7), got[1].BrokerSequence)

	got, err = s.ReceiveDeferred(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestSessionStateLockAndClose(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.lockedUntil = time.Now().Add(time.Minute) // the entity's lock duration is a minute
	s := newSession(f, discard())
	ctx := context.Background()

	require.Equal(t, "s1", s.ID())
	b, err := s.GetState(ctx)
	require.NoError(t, err)
	require.Nil(t, b)
	require.NoError(t, s.SetState(ctx, []byte{1, 2, 3}))
	b, err = s.GetState(ctx)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3}, b)
	require.NoError(t, s.SetState(ctx, nil))
	b, err = s.GetState(ctx)
	require.NoError(t, err)
	require.Nil(t, b, "an empty state reads as none")

	before := s.LockedUntil()
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	until, err := s.RenewLock(ctx)
	require.NoError(t, err)
	require.True(t, until.After(before), "renewed until %v, was %v", until, before)
	require.False(t, until.After(f.LockedUntil()), "never later than the broker's expiry")
	require.WithinDuration(t, start.Add(time.Minute), until, time.Second)
	require.Equal(t, until, s.LockedUntil())

	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx), "closing twice is fine")
	require.True(t, f.closed)
}

// TestSessionReceiveLinkFailureIsLockLost: after a link or connection failure the SDK's
// ReceiveMessages returns no messages and no error long before ctx ends. The session lock went
// with the link, so the adapter must report ErrLockLost rather than an idle session (which the
// engine would follow with saves and settlements on a lock it no longer holds).
func TestSessionReceiveLinkFailureIsLockLost(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	f.linkDown = true
	s := newSession(f, discard())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	got, err := s.Receive(ctx, 5)
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	require.Empty(t, got)
	require.NoError(t, ctx.Err(), "Receive returned before its deadline")
}

// The engine asks for LockedUntil from its lock-renewal goroutine while its main goroutine calls
// the receiver; the SDK rewrites its lock expiry without a lock when such a call re-attaches the
// link. The adapter must not read the SDK's field then (go test -race catches it if it does).
func TestSessionLockedUntilWhileCallsRun(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	field := time.Now().Add(time.Minute)
	f.sdkLockField = &field
	s := newSession(f, discard())
	initial := s.LockedUntil()

	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			_, _ = s.GetState(context.Background())
		}
	})
	wg.Go(func() {
		for range 200 {
			if s.LockedUntil().IsZero() {
				t.Error("LockedUntil lost the expiry")
				return
			}
		}
	})
	wg.Wait()
	require.Equal(t, initial, s.LockedUntil(), "only a renewal moves the expiry")
}

// Once a call shows the session lock gone, no later call reaches the SDK: its next call would
// lock the session again on a new link, silently, for a holder whose view may be stale (issue
// 10: a finished session handled again from sequence 1).
func TestSessionRefusesEveryCallAfterTheLockIsLost(t *testing.T) {
	t.Parallel()
	lostErrs := map[string]error{
		"lock lost":       &azservicebus.Error{Code: azservicebus.CodeLockLost},
		"connection lost": &azservicebus.Error{Code: azservicebus.CodeConnectionLost},
		"link detached":   &amqp.LinkError{},
	}
	for name, lost := range lostErrs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFakeReceiver("s1")
			f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 1, "a")}
			s := newSession(f, discard())
			msgs, err := s.Receive(ctx, 1)
			require.NoError(t, err)

			f.failNext = []error{lost}
			_, err = s.GetState(ctx)
			require.ErrorIs(t, err, sequencer.ErrLockLost)
			before := f.callCount()

			calls := map[string]func() error{
				"receive":          func() error { _, err := s.Receive(ctx, 1); return err },
				"receive deferred": func() error { _, err := s.ReceiveDeferred(ctx, []int64{1}); return err },
				"complete":         func() error { return s.Complete(ctx, msgs[0]) },
				"defer":            func() error { return s.Defer(ctx, msgs[0]) },
				"dead-letter":      func() error { return s.DeadLetter(ctx, msgs[0], sequencer.DeadLetterParams{}) },
				"renew":            func() error { _, err := s.RenewLock(ctx); return err },
				"get state":        func() error { _, err := s.GetState(ctx); return err },
				"set state":        func() error { return s.SetState(ctx, []byte("stale")) },
			}
			for what, call := range calls {
				err := call()
				require.ErrorIs(t, err, sequencer.ErrLockLost, what)
				require.Equal(t, ClassLockLost, Classify(err), what)
				require.ErrorContains(t, err, "lost earlier", what)
			}
			require.Equal(t, before, f.callCount(), "no call reached the SDK after the lock was lost")
			require.Nil(t, f.state, "the stale state was never written")
			require.NoError(t, s.Close(ctx), "closing a lost session is not an error")
		})
	}
}

// Server-busy (throttling) is the one refusal retried on the same link: nothing was done, and the
// link is intact, so a retry cannot lock the session again behind the engine's back.
func TestSessionRetriesServerBusy(t *testing.T) {
	t.Parallel()
	busyAMQP := &amqp.Error{Condition: "com.microsoft:server-busy", Description: "throttled"}
	busyRPC := rpcStatus(503)
	tests := []struct {
		name      string
		failures  []error
		wantErr   bool
		wantCalls int
	}{
		{"busy twice then done", []error{busyAMQP, busyRPC}, false, 3},
		{"busy past the attempts", []error{busyAMQP, busyAMQP, busyAMQP}, true, 3},
		{"other errors are not retried", []error{&azservicebus.Error{Code: azservicebus.CodeTimeout}}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeReceiver("s1")
			s := newSession(f, discard())
			s.busy, s.busyAttempts = backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}, 3
			f.failNext = tt.failures
			err := s.SetState(context.Background(), []byte("x"))
			if tt.wantErr {
				require.Error(t, err)
				require.NotErrorIs(t, err, sequencer.ErrLockLost, "busy or a timeout says nothing about the lock")
			} else {
				require.NoError(t, err)
				require.Equal(t, []byte("x"), f.state)
			}
			require.Equal(t, tt.wantCalls, f.callCount())
		})
	}
}

// rpcStatus is a management answer with the given status, as the SDK reports it.
type rpcStatus int

func (r rpcStatus) Error() string { return fmt.Sprintf("rpc: failed, status code %d", int(r)) }
func (r rpcStatus) RPCCode() int  { return int(r) }

func TestSessionSettlementPresumedRefusedWhileThrottled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// busy: another call is refused as busy while the settlement is unanswered; logged: the
		// SDK logs another settlement refused as busy meanwhile (a session whose calls are only
		// settlements sees no refusal of its own).
		busy, logged bool
	}{
		{name: "namespace refusing calls", busy: true},
		{name: "a settlement refused in the SDK's log", logged: true},
		{name: "no refusal seen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeReceiver("s1")
			f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 10, "a")}
			f.completeHangs = true
			s := newSession(f, discard())
			s.limit = NewLimiter(nil)
			s.settleTimeout = 2 * time.Second
			s.settleRefusals = new(atomic.Uint64) // not the process's: other tests throttle
			msgs, err := s.Receive(t.Context(), 1)
			require.NoError(t, err)
			if tc.busy {
				time.AfterFunc(50*time.Millisecond, s.limit.Busy)
			}
			if tc.logged {
				time.AfterFunc(50*time.Millisecond, func() { s.settleRefusals.Add(1) })
			}
			start := time.Now()
			err = s.Complete(t.Context(), msgs[0])
			took := time.Since(start)
			if tc.busy || tc.logged {
				require.ErrorIs(t, err, sequencer.ErrSettlementRefused, "reported refused, not settled (the SDK would report it settled after its retry delay)")
				require.NotErrorIs(t, err, sequencer.ErrLockLost)
				require.GreaterOrEqual(t, took, refusedSettlementWait)
				require.Less(t, took, s.settleTimeout)
				want := uint64(1) // the presumed refusal tells this source's limiter
				if tc.busy {
					want++
				}
				require.Equal(t, want, s.limit.Stats().Busy)
				return
			}
			require.ErrorIs(t, err, sequencer.ErrLockLost, "no refusal seen: an unanswered settlement is a link gone")
			require.GreaterOrEqual(t, took, s.settleTimeout)
			require.Zero(t, s.limit.Stats().Busy)
		})
	}
}

// TestSessionSettlementWatchesAreEachSettlements checks that the settlements in flight on one
// session, which share one timer, are each given their own time: an answered one is not touched,
// and one that started later is ended at its own threshold, not at the first one's.
func TestSessionSettlementWatchesAreEachSettlements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		limited bool          // with a Limiter that saw a server-busy answer: presumed refused
		want    error         // what the two hanging settlements return
		after   time.Duration // how long each runs before it is ended
	}{
		{name: "settle timeout", want: sequencer.ErrLockLost, after: 400 * time.Millisecond},
		{name: "presumed refused", limited: true, want: sequencer.ErrSettlementRefused, after: refusedSettlementWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeReceiver("s1")
			f.active = []*azservicebus.ReceivedMessage{sbMsg("s1", 10, "a"), sbMsg("s1", 11, "b"), sbMsg("s1", 12, "c")}
			f.hangs = map[int64]bool{10: true, 12: true}
			s := newSession(f, discard())
			s.settleTimeout = 400 * time.Millisecond
			if tc.limited {
				s.limit = NewLimiter(nil)
				s.settleTimeout = 5 * time.Second
				s.settleRefusals = new(atomic.Uint64)
			}
			msgs, err := s.Receive(t.Context(), 3)
			require.NoError(t, err)
			require.Len(t, msgs, 3)
			const later = 250 * time.Millisecond
			type result struct {
				took time.Duration
				err  error
			}
			settle := func(m *sequencer.Message, delay time.Duration) <-chan result {
				out := make(chan result, 1)
				time.AfterFunc(delay, func() {
					start := time.Now()
					err := s.Complete(t.Context(), m)
					out <- result{took: time.Since(start), err: err}
				})
				return out
			}
			first, second := settle(msgs[0], 0), settle(msgs[2], later)
			if tc.limited {
				time.AfterFunc(50*time.Millisecond, s.limit.Busy)
			}
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, s.Complete(t.Context(), msgs[1]), "answered while the others hang")
			for _, ch := range []<-chan result{first, second} {
				r := <-ch
				require.ErrorIs(t, r.err, tc.want)
				require.GreaterOrEqual(t, r.took, tc.after, "ended no earlier than its own threshold")
				require.Less(t, r.took, tc.after+later, "ended at its own threshold, not at a later settlement's")
			}
		})
	}
}

// TestSettlementCtxReleased checks that each settlement runs under a ctx of its own, derived from
// the caller's, and that the ctx is released when the settlement returns (it stays registered
// with a parent that outlives the session otherwise), whether it succeeded, failed or timed out.
func TestSettlementCtxReleased(t *testing.T) {
	t.Parallel()
	f := newFakeReceiver("s1")
	for bs := int64(10); bs < 14; bs++ {
		f.active = append(f.active, sbMsg("s1", bs, fmt.Sprint(bs)))
	}
	f.hangs = map[int64]bool{12: true}
	s := newSession(f, discard())
	s.settleTimeout = 100 * time.Millisecond
	msgs, err := s.Receive(t.Context(), 4)
	require.NoError(t, err)
	require.Len(t, msgs, 4)
	ctxOf := func(i int) context.Context {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.completeCtxs[i]
	}
	parent := t.Context()
	require.NoError(t, s.Complete(parent, msgs[0]))
	require.NoError(t, s.Complete(parent, msgs[1]))
	require.NotSame(t, ctxOf(0), ctxOf(1), "each settlement has a ctx of its own")
	require.ErrorIs(t, ctxOf(0).Err(), context.Canceled, "released once the settlement returned")
	require.NoError(t, parent.Err())

	require.ErrorIs(t, s.Complete(parent, msgs[2]), sequencer.ErrLockLost, "the hanging one times out")
	require.ErrorIs(t, context.Cause(ctxOf(2)), errSettleTimeout, "the watch ended it")

	f2 := newFakeReceiver("s2")
	f2.active = []*azservicebus.ReceivedMessage{sbMsg("s2", 20, "a")}
	s2 := newSession(f2, discard())
	msgs, err = s2.Receive(t.Context(), 1)
	require.NoError(t, err)
	f2.mu.Lock()
	f2.failNext = []error{errors.New("boom")}
	f2.mu.Unlock()
	require.Error(t, s2.Complete(parent, msgs[0]))
	f2.mu.Lock()
	failed := f2.completeCtxs[0]
	f2.mu.Unlock()
	require.ErrorIs(t, failed.Err(), context.Canceled, "released after a failure too")
}
