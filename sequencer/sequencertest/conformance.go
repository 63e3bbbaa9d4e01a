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

// DeadLettered is a message found in a provider's dead-letter queue.
type DeadLettered struct {
	SessionID   string
	Body        []byte
	Properties  map[string]any
	Reason      string
	Description string
}

// ConformanceOptions tune RunSessionConformance.
type ConformanceOptions struct {
	// Wait bounds each wait for messages or sessions (default 2s). AcceptNext on an empty
	// entity is expected to give up within it.
	Wait time.Duration
	// Capabilities the provider declares: the suite checks that its sessions offer exactly
	// these (and, for a sequencer.CapableSource, that the source says so) and runs the cases of
	// each. Deferral: sessions are sequencer.DeferringSession; Peek: sequencer.HoldingSession;
	// SessionState: StatefulSession. SessionLock: a session receives its group's later and
	// abandoned messages; without it, the suite takes the group up again with AcceptNext where
	// a session runs dry, and checks that it does so at once. CompletionsAtClose: a completion
	// the lock outlives lands at Close; one whose lock lapsed first comes back.
	Capabilities sequencer.Capabilities
	// MaxLock is the longest lock the suite waits out to see it lapse (default 10s): a session
	// whose LockedUntil is further away fails LockLapseRedelivers, so give the sources of the
	// suite a short lock.
	MaxLock time.Duration
	// DeadLetters returns what the dead-letter queue of src's entity holds of a session. Nil:
	// the suite checks only that a dead-lettered message leaves its session.
	DeadLetters func(ctx context.Context, src sequencer.SessionSource, sessionID string) ([]DeadLettered, error)
}

// RunSessionConformance checks that a SessionSource and its Sessions behave as the engine
// depends on: what every provider must do (exclusive sessions, order within a group, redelivery
// after abandon, close or a lapsed lock first and in order, completion is final,
// dead-lettering removes the message), and the cases of the capabilities the provider declares
// in opts. newSource must return a source over an entity that no other test uses, and a
// publisher for it; each subtest calls it once.
func RunSessionConformance(t *testing.T, newSource func(t *testing.T) (sequencer.SessionSource, Publisher), opts *ConformanceOptions) {
	var o ConformanceOptions
	if opts != nil {
		o = *opts
	}
	wait := 2 * time.Second
	if o.Wait > 0 {
		wait = o.Wait
	}
	maxLock := 10 * time.Second
	if o.MaxLock > 0 {
		maxLock = o.MaxLock
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
	// receiveGroup receives n messages of f's group on *sess, settling each with settle (nil:
	// leave it in flight). A provider without a session lock ends a session once it took what
	// was received for it (an empty receive): the group's next messages then come to the next
	// session AcceptNext gives, which replaces *sess.
	receiveGroup := func(t *testing.T, f fixture, sess *sequencer.Session, n int, settle func(sequencer.Session, *sequencer.Message) error) []*sequencer.Message {
		ctx := ctxWait(t)
		var out []*sequencer.Message
		for len(out) < n && ctx.Err() == nil {
			msgs, err := (*sess).Receive(ctx, n-len(out))
			require.NoError(t, err)
			if len(msgs) == 0 && !o.Capabilities.SessionLock && ctx.Err() == nil {
				require.NoError(t, (*sess).Close(t.Context()))
				*sess = acceptNext(t, f)
				continue
			}
			for _, m := range msgs {
				if settle != nil {
					require.NoError(t, settle(*sess, m))
				}
			}
			out = append(out, msgs...)
		}
		require.Len(t, out, n)
		return out
	}
	complete := func(s sequencer.Session, m *sequencer.Message) error { return s.Complete(context.Background(), m) }
	seqs := func(t *testing.T, msgs []*sequencer.Message) []int64 {
		var out []int64
		for _, m := range msgs {
			v, _, err := contract.Parse(m.Properties, contract.SequenceProperty, contract.LastProperty)
			require.NoError(t, err)
			out = append(out, v)
		}
		return out
	}
	// capable skips the case unless the provider declares the capability (CapabilitiesAsDeclared
	// checks the declaration).
	capable := func(t *testing.T, declared bool, what string) {
		if !declared {
			t.Skipf("the provider does not declare %s (ConformanceOptions.Capabilities)", what)
		}
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
	completeAll := func(t *testing.T, sess sequencer.Session, msgs []*sequencer.Message) {
		for _, m := range msgs {
			require.NoError(t, sess.Complete(t.Context(), m))
		}
	}

	t.Run("CapabilitiesAsDeclared", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		sess, err := f.src.Accept(ctxWait(t), f.id)
		require.NoError(t, err)
		defer func() { _ = sess.Close(t.Context()) }()
		_, deferring := sess.(sequencer.DeferringSession)
		_, holding := sess.(sequencer.HoldingSession)
		_, stateful := sess.(StatefulSession)
		// SessionLock is behaviour, not a type: the cases below check it.
		require.Equal(t, o.Capabilities, sequencer.Capabilities{Deferral: deferring, Peek: holding, SessionState: stateful, SessionLock: o.Capabilities.SessionLock, CompletionsAtClose: o.Capabilities.CompletionsAtClose},
			"the session's capabilities (actual) differ from those declared (expected)")
		if cs, ok := f.src.(sequencer.CapableSource); ok {
			require.Equal(t, o.Capabilities, cs.Capabilities(), "the source says other capabilities (actual) than declared (expected)")
		}
	})

	t.Run("HeldSessionIsNotOfferedAgain", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 3)
		sess := acceptNext(t, f)
		m := receiveN(t, sess, 1)[0]
		requireNoSession(t, f) // its other messages are the held session's
		_, err := f.src.Accept(ctxWait(t), f.id)
		require.ErrorIs(t, err, sequencer.ErrSessionLocked)
		require.NoError(t, sess.Abandon(t.Context(), m))
		if !o.Capabilities.SessionLock {
			// Nothing of the group in flight: the session is done, the group is offered again.
			require.NoError(t, sess.Close(t.Context()))
			sess = acceptNext(t, f)
		} else {
			requireNoSession(t, f) // an abandoned message stays with the held session
		}
		again := receiveN(t, sess, 3)
		require.Equal(t, []int64{1, 2, 3}, seqs(t, again))
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("OrderWithinGroup", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		const n = 25
		publishN(t, f, n)
		sess := acceptNext(t, f)
		// As the engine does: receive what is there (up to 4), settle it, receive again. (An SQS
		// group's next messages come only once those in flight are settled.)
		var got []*sequencer.Message
		for len(got) < n {
			batch := receiveGroup(t, f, &sess, min(4, n-len(got)), complete)
			got = append(got, batch...)
		}
		want := make([]int64, n)
		for i := range want {
			want[i] = int64(i + 1)
		}
		require.Equal(t, want, seqs(t, got))
		for i := 1; i < n; i++ {
			require.Greater(t, got[i].BrokerSequence, got[i-1].BrokerSequence)
		}
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("AbandonedComeBackFirstInOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 5)
		sess := acceptNext(t, f)
		msgs := receiveN(t, sess, 3)
		require.Equal(t, []int64{1, 2, 3}, seqs(t, msgs))
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		require.NoError(t, sess.Abandon(t.Context(), msgs[1]))
		require.NoError(t, sess.Abandon(t.Context(), msgs[2]))
		again := receiveGroup(t, f, &sess, 4, nil)
		require.Equal(t, []int64{2, 3, 4, 5}, seqs(t, again), "the abandoned messages first, in order")
		require.Equal(t, msgs[1].BrokerSequence, again[0].BrokerSequence)
		require.Greater(t, again[0].DeliveryCount, msgs[1].DeliveryCount)
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("CloseRedeliversFirstInOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 4)
		sess := acceptNext(t, f)
		msgs := receiveN(t, sess, 4)
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		require.NoError(t, sess.Complete(t.Context(), msgs[2]))
		require.NoError(t, sess.Close(t.Context()))
		sess = acceptNext(t, f)
		again := receiveN(t, sess, 2)
		require.Equal(t, []int64{2, 4}, seqs(t, again), "what was not completed, in order")
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("LockLapseRedelivers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 3)
		sess := acceptNext(t, f)
		msgs := receiveN(t, sess, 3)
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		lapse := time.Until(sess.LockedUntil())
		require.LessOrEqual(t, lapse, maxLock, "give the suite's sources a lock of at most MaxLock")
		time.Sleep(lapse + time.Second)
		err := sess.Complete(t.Context(), msgs[1])
		require.ErrorIs(t, err, sequencer.ErrLockLost, "settling after the lock lapsed")
		_ = sess.Close(t.Context())
		sess = acceptNext(t, f)
		want := []int64{2, 3}
		if o.Capabilities.CompletionsAtClose > 0 {
			// The completion kept for Close lapsed with the lock: its message comes back too.
			want = []int64{1, 2, 3}
		}
		again := receiveN(t, sess, len(want))
		require.Equal(t, want, seqs(t, again), "the unsettled messages, first and in order")
		require.Greater(t, again[0].DeliveryCount, msgs[want[0]-1].DeliveryCount)
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("CompleteIsFinal", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 3)
		sess := acceptNext(t, f)
		msgs := receiveN(t, sess, 2)
		require.NoError(t, sess.Complete(t.Context(), msgs[0]))
		require.NoError(t, sess.Abandon(t.Context(), msgs[1]))
		again := receiveGroup(t, f, &sess, 2, nil)
		require.Equal(t, []int64{2, 3}, seqs(t, again))
		require.NoError(t, sess.Close(t.Context()))
		sess = acceptNext(t, f)
		again = receiveN(t, sess, 2)
		require.Equal(t, []int64{2, 3}, seqs(t, again), "the completed message never comes back")
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

	t.Run("DeadLetterLeavesTheSession", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		publishN(t, f, 2)
		sess := acceptNext(t, f)
		msgs := receiveN(t, sess, 2)
		p := sequencer.DeadLetterParams{Reason: "InvalidSequence", Description: "conformance: dead-lettered"}
		require.NoError(t, sess.DeadLetter(t.Context(), msgs[0], p))
		require.NoError(t, sess.Close(t.Context()))
		sess = acceptNext(t, f)
		again := receiveN(t, sess, 1)
		require.Equal(t, []int64{2}, seqs(t, again), "the dead-lettered message is gone from the session")
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
		if o.DeadLetters == nil {
			return
		}
		dl, err := o.DeadLetters(ctxWait(t), f.src, f.id)
		require.NoError(t, err)
		require.Len(t, dl, 1)
		require.Equal(t, f.id, dl[0].SessionID)
		require.Equal(t, []byte("body-1"), dl[0].Body)
		require.Equal(t, []int64{1}, seqs(t, []*sequencer.Message{{Properties: dl[0].Properties}}))
		require.Equal(t, p.Reason, dl[0].Reason)
		require.Equal(t, p.Description, dl[0].Description)
	})

	// Without a session lock, a session that took what was received for it has nothing more to
	// wait for: its receive returns empty at once, and the group's next messages go to the next
	// AcceptNext. (With one, the abandon cases check that they stay with the session.)
	t.Run("WithoutSessionLockTheGroupMovesOn", func(t *testing.T) {
		t.Parallel()
		if o.Capabilities.SessionLock {
			t.Skip("the provider declares a session lock (ConformanceOptions.Capabilities)")
		}
		f := setup(t)
		publishN(t, f, 1)
		sess := acceptNext(t, f)
		first := receiveN(t, sess, 1)
		completeAll(t, sess, first)
		require.NoError(t, f.pub.Publish(t.Context(), f.id, map[string]any{contract.SequenceProperty: int64(2)}, []byte("body-2")))
		start := time.Now()
		msgs, err := sess.Receive(ctxWait(t), 1)
		require.NoError(t, err)
		require.Empty(t, msgs, "nothing more comes to the session: it is done")
		require.Less(t, time.Since(start), wait/2, "an empty receive at once, not at the end of the wait")
		require.NoError(t, sess.Close(t.Context()))
		sess = acceptNext(t, f)
		again := receiveN(t, sess, 1)
		require.Equal(t, []int64{2}, seqs(t, again))
		completeAll(t, sess, again)
		require.NoError(t, sess.Close(t.Context()))
		requireNoSession(t, f)
	})

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
		capable(t, o.Capabilities.Deferral, "deferral")
		f := setup(t)
		publishN(t, f, 2)
		sess := acceptNext(t, f)
		ds := sess.(sequencer.DeferringSession)
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
		again := receiveGroup(t, f, &sess, 1, nil)[0]
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
		capable(t, o.Capabilities.SessionState, "session state")
		f := setup(t)
		sess, err := f.src.Accept(ctxWait(t), f.id)
		require.NoError(t, err)
		defer func() { _ = sess.Close(t.Context()) }()
		ss := sess.(StatefulSession)
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
		capable(t, o.Capabilities.Deferral, "deferral")
		f := setup(t)
		publishN(t, f, 6)
		sess := acceptNext(t, f)
		ds := sess.(sequencer.DeferringSession)
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
		capable(t, o.Capabilities.Peek, "a peek at held messages")
		capable(t, o.Capabilities.Deferral, "deferral")
		f := setup(t)
		publishN(t, f, 4)
		sess := acceptNext(t, f)
		hs := sess.(sequencer.HoldingSession)
		ds := sess.(sequencer.DeferringSession)
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
