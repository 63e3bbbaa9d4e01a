package sequencertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sequencer"
)

// Publisher sends messages to the entity behind a SessionSource under test.
type Publisher interface {
	Publish(ctx context.Context, sessionID string, props map[string]any, body []byte) error
}

// BrokerPublisher adapts a fake Broker to Publisher.
type BrokerPublisher struct{ B *Broker }

// Publish enqueues the message.
func (p BrokerPublisher) Publish(_ context.Context, sessionID string, props map[string]any, body []byte) error {
	p.B.Publish(sessionID, props, body)
	return nil
}

// StatefulSession is implemented by sessions that expose the broker's session state (the fake
// and the Service Bus adapter).
type StatefulSession interface {
	GetState(ctx context.Context) ([]byte, error)
	SetState(ctx context.Context, state []byte) error
}

// ConformanceOptions tune RunSessionConformance.
type ConformanceOptions struct {
	// Wait bounds each wait for messages or sessions (default 2s). AcceptNext on an empty
	// entity is expected to give up within it.
	Wait time.Duration
}

// RunSessionConformance checks that a SessionSource and its Sessions behave like a Service Bus
// session queue as far as the engine depends on it. newSource must return a source over an
// entity that no other test uses, and a publisher for it; each subtest calls it once.
func RunSessionConformance(t *testing.T, newSource func(t *testing.T) (sequencer.SessionSource, Publisher), opts *ConformanceOptions) {
	wait := 2 * time.Second
	if opts != nil && opts.Wait > 0 {
		wait = opts.Wait
	}
	type fixture struct {
		src sequencer.SessionSource
		pub Publisher
		id  string
	}
	setup := func(t *testing.T) fixture {
		src, pub := newSource(t)
		return fixture{src: src, pub: pub, id: fmt.Sprintf("conf-%d", rand.Uint64())}
	}
	ctxWait := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		t.Cleanup(cancel)
		return ctx
	}
	publishN := func(t *testing.T, f fixture, n int) {
		for i := 1; i <= n; i++ {
			require.NoError(t, f.pub.Publish(t.Context(), f.id, map[string]any{contract.SequenceProperty: int64(i)}, fmt.Appendf(nil, "body-%d", i)))
		}
	}
	acceptNext := func(t *testing.T, f fixture) sequencer.Session {
		sess, err := f.src.AcceptNext(ctxWait(t))
		require.NoError(t, err)
		require.Equal(t, f.id, sess.ID())
		return sess
	}
	receiveN := func(t *testing.T, sess sequencer.Session, n int) []*sequencer.Message {
		ctx := ctxWait(t)
		var out []*sequencer.Message
		for len(out) < n && ctx.Err() == nil {
			msgs, err := sess.Receive(ctx, n-len(out))
			require.NoError(t, err)
			out = append(out, msgs...)
		}
		require.Len(t, out, n)
		return out
	}
	// deferring returns sess as a DeferringSession, or skips the test for a provider without
	// deferral (SQS FIFO), after releasing sess.
	deferring := func(t *testing.T, sess sequencer.Session) sequencer.DeferringSession {
		ds, ok := sess.(sequencer.DeferringSession)
		if !ok {
			_ = sess.Close(t.Context())
			t.Skip("the provider cannot defer (the session is not a sequencer.DeferringSession)")
		}
		return ds
	}
	requireNoSession := func(t *testing.T, f fixture) {
		ctx, cancel := context.WithTimeout(t.Context(), wait/4)
		defer cancel()
		sess, err := f.src.AcceptNext(ctx)
		if err == nil {
			_ = sess.Close(t.Context())
			t.Fatalf("AcceptNext offered session %q, want none", sess.ID())
		}
		require.ErrorIs(t, err, sequencer.ErrNoSession)
	}

	t.Run("AcceptNextOnEmptyEntity", func(t *testing.T) {
		t.Parallel()
		requireNoSession(t, setup(t))
	})

	t.Run("ReceiveInOrderAndComplete", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 3)
		sess := acceptNext(t, f)
		require.True(t, sess.LockedUntil().After(time.Now().Add(-time.Hour)), "LockedUntil is set")
		msgs := receiveN(t, sess, 3)
		for i, m := range msgs {
			require.Equal(t, f.id, m.SessionID)
			require.EqualValues(t, i+1, m.Properties[contract.SequenceProperty])
			require.True(t, bytes.Equal(fmt.Appendf(nil, "body-%d", i+1), m.Body))
			require.Equal(t, uint32(1), m.DeliveryCount)
			if i > 0 {
				require.Greater(t, m.BrokerSequence, msgs[i-1].BrokerSequence)
			}
			require.NoError(t, sess.Complete(t.Context(), m))
		}
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("DeferredMessagesByBrokerSequence", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 2)
		sess := acceptNext(t, f)
		ds := deferring(t, sess)
		msgs := receiveN(t, sess, 2)
		for _, m := range msgs {
			require.NoError(t, ds.Defer(t.Context(), m))
		}
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f) // only deferred messages: not offered

		sess, err := f.src.Accept(ctxWait(t), f.id)
		require.NoError(t, err)
		got, err := sess.(sequencer.DeferringSession).ReceiveDeferred(t.Context(), []int64{msgs[1].BrokerSequence, msgs[0].BrokerSequence, msgs[1].BrokerSequence + 1_000_000})
		require.NoError(t, err, "an unknown number is left out, not an error")
		require.Len(t, got, 2)
		seen := map[int64]bool{}
		for _, m := range got {
			seen[m.BrokerSequence] = true
			require.NoError(t, sess.Complete(t.Context(), m))
		}
		require.True(t, seen[msgs[0].BrokerSequence] && seen[msgs[1].BrokerSequence])
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("SessionLockIsExclusive", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		_, err := f.src.Accept(ctxWait(t), f.id)
		require.ErrorIs(t, err, sequencer.ErrSessionLocked)
		until, err := sess.RenewLock(t.Context())
		require.NoError(t, err)
		require.False(t, until.IsZero())
		receiveN(t, sess, 1)
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("CloseReturnsUnsettledMessages", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		m := receiveN(t, sess, 1)[0]
		require.NoError(t, sess.Close(t.Context()))
		err := sess.Complete(t.Context(), m)
		require.ErrorIs(t, err, sequencer.ErrLockLost, "settling after close")

		sess = acceptNext(t, f)
		again := receiveN(t, sess, 1)[0]
		require.Equal(t, m.BrokerSequence, again.BrokerSequence)
		// Whether releasing a session lock counts as a delivery is not specified; it never goes down.
		require.GreaterOrEqual(t, again.DeliveryCount, m.DeliveryCount)
		require.NoError(t, sess.Complete(t.Context(), again))
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("AbandonRedelivers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		m := receiveN(t, sess, 1)[0]
		require.NoError(t, sess.Abandon(t.Context(), m))
		again := receiveN(t, sess, 1)[0]
		require.Equal(t, m.BrokerSequence, again.BrokerSequence)
		require.Greater(t, again.DeliveryCount, m.DeliveryCount)
		require.NoError(t, sess.Complete(t.Context(), again))
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("DeadLetterRemoves", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		m := receiveN(t, sess, 1)[0]
		require.NoError(t, sess.DeadLetter(t.Context(), m, sequencer.DeadLetterParams{Reason: "InvalidSequence", Description: "test"}))
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("SessionState", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		sess, err := f.src.Accept(ctxWait(t), f.id)
		require.NoError(t, err)
		defer func() { _ = sess.Close(t.Context()) }()
		ss, ok := sess.(StatefulSession)
		if !ok {
			t.Skip("session has no state methods")
		}
		got, err := ss.GetState(t.Context())
		require.NoError(t, err)
		require.Empty(t, got)
		require.NoError(t, ss.SetState(t.Context(), []byte("state-1")))
		got, err = ss.GetState(t.Context())
		require.NoError(t, err)
		require.Equal(t, []byte("state-1"), got)
		require.NoError(t, ss.SetState(t.Context(), nil))
		got, err = ss.GetState(t.Context())
		require.NoError(t, err)
		require.Empty(t, got)
	})

	// The engine's recorded runs infer what an earlier holder completed from the order in which
	// the broker delivers what is left: a session's active messages in broker sequence order,
	// deferred ones never, whatever was settled or abandoned before the lock was released.
	t.Run("RedeliveryIsInBrokerOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 6)
		sess := acceptNext(t, f)
		ds := deferring(t, sess)
		msgs := receiveN(t, sess, 6)
		require.NoError(t, sess.Complete(t.Context(), msgs[3]))
		require.NoError(t, ds.Defer(t.Context(), msgs[1]))
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		require.NoError(t, sess.Abandon(t.Context(), msgs[4]))
		require.NoError(t, sess.Close(t.Context()))

		sess = acceptNext(t, f)
		again := receiveN(t, sess, 3)
		var got []int64
		for _, m := range again {
			got = append(got, m.BrokerSequence)
		}
		want := []int64{msgs[2].BrokerSequence, msgs[4].BrokerSequence, msgs[5].BrokerSequence}
		require.Equal(t, want, got, "the active messages left, in broker order, without the deferred one")
		require.Greater(t, again[1].DeliveryCount, msgs[4].DeliveryCount, "abandon counts a delivery")
		for _, m := range again {
			require.NoError(t, sess.Complete(t.Context(), m))
		}
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f) // only the deferred message is left
	})

	t.Run("HoldingIsTheActiveMessages", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 4)
		sess := acceptNext(t, f)
		hs, ok := sess.(sequencer.HoldingSession)
		if !ok {
			_ = sess.Close(t.Context())
			t.Skip("the session is not a sequencer.HoldingSession")
		}
		ds := deferring(t, sess)
		msgs := receiveN(t, sess, 4)
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		require.NoError(t, ds.Defer(t.Context(), msgs[1]))
		require.NoError(t, sess.Abandon(t.Context(), msgs[3]))
		var ask []int64
		for _, m := range msgs {
			ask = append(ask, m.BrokerSequence)
		}
		ask = append(ask, msgs[3].BrokerSequence+1000) // never published
		held, err := hs.Holding(t.Context(), ask)
		require.NoError(t, err)
		require.ElementsMatch(t, []int64{msgs[2].BrokerSequence, msgs[3].BrokerSequence}, held,
			"locked (3) and unlocked (4) active messages; not the completed (1) or deferred (2) one")
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("SettleWithoutLockIsLockLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		m := receiveN(t, sess, 1)[0]
		require.NoError(t, sess.Complete(t.Context(), m))
		err := sess.Complete(t.Context(), m)
		require.Error(t, err, "a settled message cannot be settled again")
		require.True(t, errors.Is(err, sequencer.ErrLockLost) || errors.Is(err, sequencer.ErrNotFound), "%v", err)
		require.NoError(t, sess.Close(t.Context()))
	})
}
