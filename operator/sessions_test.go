package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
)

// TestParkedSessionRecovers walks the recovery of a parked session through the operator: it is
// listed and shown as parked, its dead letter is replayed, it is resumed, and a worker run handles
// every sequence once and in order.
func TestParkedSessionRecovers(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			b.park(t, "a", 5, 3)
			b.publish(t, "ok", 2, 1, 2)
			require.Equal(t, sequencer.OutcomeEnded, b.run(t, "ok"))

			all, err := b.op.List(ctx, operator.ListParams{})
			require.NoError(t, err)
			require.Len(t, all.Sessions, 1, "the ended session is a tombstone, left out: %+v", all.Sessions)
			parked, err := b.op.List(ctx, operator.ListParams{Parked: true})
			require.NoError(t, err)
			require.Len(t, parked.Sessions, 1)
			s := parked.Sessions[0]
			require.Equal(t, "a", s.SessionID)
			require.Equal(t, int64(3), s.Next)
			require.Equal(t, 2, s.Deferred, "4 and 5 deferred while parked")
			require.Equal(t, int64(4), s.LowestDeferred)
			require.Equal(t, int64(3), s.Parked.Sequence)
			require.Contains(t, s.Parked.Reason, "handler bug")
			require.Equal(t, uint64(2), s.Counters.Handled)
			gaps, err := b.op.List(ctx, operator.ListParams{Gap: true})
			require.NoError(t, err)
			require.Empty(t, gaps.Sessions, "a parked session waits for an operator, not on a gap")
			limited, err := b.op.List(ctx, operator.ListParams{Ended: true, Limit: 1})
			require.NoError(t, err)
			require.Len(t, limited.Sessions, 1)
			require.True(t, limited.Truncated)
			require.Equal(t, "a", limited.NextAfter)
			next, err := b.op.List(ctx, operator.ListParams{Ended: true, Limit: 1, After: limited.NextAfter})
			require.NoError(t, err)
			require.Equal(t, []string{"ok"}, []string{next.Sessions[0].SessionID}, "the next page")
			require.False(t, next.Truncated)
			require.Empty(t, next.NextAfter)
			withEnded, err := b.op.List(ctx, operator.ListParams{Ended: true})
			require.NoError(t, err)
			require.Len(t, withEnded.Sessions, 2)

			show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "a"})
			require.NoError(t, err)
			require.Equal(t, int64(3), show.Session.Parked.Sequence)
			require.Len(t, show.DeferredIndex, 2)
			var states []string
			for _, m := range show.Messages {
				states = append(states, m.State)
				require.Contains(t, []int64{4, 5}, m.Sequence)
			}
			require.Equal(t, []string{"deferred", "deferred"}, states)
			require.Len(t, show.DeadLetters, 1)
			require.Equal(t, int64(3), show.DeadLetters[0].Sequence)
			require.Equal(t, sequencer.ReasonHandlerFailed, show.DeadLetters[0].Reason)
			require.Contains(t, show.DeadLetters[0].Description, "handler bug")

			rep, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
			require.NoError(t, err)
			require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{3}, Sent: 1, Completed: 1}}, rep.Sessions)
			require.Empty(t, b.deadLetters(t))
			// The copy wakes the still parked session, which defers it.
			require.Equal(t, sequencer.OutcomeParked, b.run(t, "a"))

			res, err := b.op.Resume(ctx, operator.ResumeParams{SessionID: "a"})
			require.NoError(t, err)
			require.Len(t, res.Resumed, 1)
			require.Equal(t, int64(3), res.Resumed[0].Next)
			require.True(t, res.Resumed[0].Wakes, "the copy is deferred: the sweeper wakes the session")
			st, _ := b.state(t, "a")
			require.True(t, st.NeedsWake())

			require.Equal(t, sequencer.OutcomeEnded, b.run(t, "a"))
			require.Equal(t, seqs(1, 5), b.handledOf("a"), "every sequence once, in order")
		})
	}
}

func TestSkip(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)

			// A gap: 2 and 3 never come.
			b.publish(t, "gap", 6, 1, 4, 5, 6)
			require.Equal(t, sequencer.OutcomeIdle, b.run(t, "gap"))
			gaps, err := b.op.List(ctx, operator.ListParams{Gap: true})
			require.NoError(t, err)
			require.Len(t, gaps.Sessions, 1)
			require.NotNil(t, gaps.Sessions[0].GapSince)
			res, err := b.op.Skip(ctx, operator.SkipParams{SessionID: "gap"})
			require.NoError(t, err)
			require.Equal(t, &operator.SkipResult{SessionID: "gap", SkippedFrom: 2, SkippedTo: 3, Next: 4}, res)
			require.Equal(t, sequencer.OutcomeEnded, b.run(t, "gap"))
			require.Equal(t, []int64{1, 4, 5, 6}, b.handledOf("gap"))

			// Parked on 2; --to 4 also gives up the deferred 3, which is settled unhandled.
			b.park(t, "p", 5, 2)
			res, err = b.op.Skip(ctx, operator.SkipParams{SessionID: "p", To: 4})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.SkippedFrom)
			require.Equal(t, int64(3), res.SkippedTo)
			require.Equal(t, []int64{3}, res.DroppedDeferred)
			require.Equal(t, int64(2), res.Unparked.Sequence)
			require.Equal(t, sequencer.OutcomeEnded, b.run(t, "p"))
			require.Equal(t, []int64{1, 4, 5}, b.handledOf("p"))
			show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "p"})
			require.NoError(t, err)
			require.Empty(t, show.Messages, "the deferred 3 was settled")
			require.Equal(t, uint64(2), show.Session.Counters.Skipped)
		})
	}
}

// TestChangesWaitForTheWorker: while a worker holds the session, a change waits for it (and
// says so) up to its bound, then applies; past the bound it fails and changes nothing.
func TestChangesWaitForTheWorker(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			b.park(t, "a", 3, 2)
			_, before := b.state(t, "a")

			held, err := b.worker.Accept(ctx, "a")
			require.NoError(t, err)
			_, err = b.op.Resume(ctx, operator.ResumeParams{SessionID: "a", Wait: 300 * time.Millisecond})
			require.ErrorIs(t, err, operator.ErrSessionBusy)
			require.Contains(t, err.Error(), "nothing changed")
			require.Contains(t, b.progress.String(), "session a: a worker holds it; waiting up to")

			list, err := b.op.List(ctx, operator.ListParams{Parked: true})
			require.NoError(t, err)
			if store == "servicebus" {
				require.True(t, list.Sessions[0].Busy, "session state is read under the lock: busy")
			} else {
				require.Equal(t, int64(2), list.Sessions[0].Parked.Sequence, "postgres rows are read without the lock")
			}
			show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "a"})
			require.NoError(t, err)
			require.True(t, show.Session.Busy)
			require.Equal(t, "a worker holds the session", show.MessagesUnavailable)

			time.AfterFunc(500*time.Millisecond, func() { _ = held.Close(context.Background()) })
			res, err := b.op.Resume(ctx, operator.ResumeParams{SessionID: "a", Wait: 20 * time.Second})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Resumed[0].Next)
			st, after := b.state(t, "a")
			require.Nil(t, st.Parked)
			require.NotEqual(t, before, after)
		})
	}
}

// TestBadInputChangesNothing: a malformed id, an unknown session, a session that is not parked
// and a skip with nothing to skip fail with a clear error and leave the state as it was.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			b.publish(t, "fine", 3, 1)
			require.Equal(t, sequencer.OutcomeIdle, b.run(t, "fine"))
			_, v := b.state(t, "fine")

			tests := []struct {
				name    string
				op      func() error
				wantErr error
				wantMsg string
			}{
				{"malformed id", func() error {
					_, err := b.op.Resume(ctx, operator.ResumeParams{SessionID: "bad\nid"})
					return err
				}, operator.ErrInvalidInput, "control character"},
				{"empty id", func() error {
					_, err := b.op.Skip(ctx, operator.SkipParams{})
					return err
				}, operator.ErrInvalidInput, "empty"},
				{"unknown session", func() error {
					_, err := b.op.Resume(ctx, operator.ResumeParams{SessionID: "nobody"})
					return err
				}, operator.ErrUnknownSession, `session "nobody"`},
				{"not parked", func() error {
					_, err := b.op.Resume(ctx, operator.ResumeParams{SessionID: "fine"})
					return err
				}, operator.ErrNotParked, "next expected sequence 2"},
				{"nothing to skip", func() error {
					_, err := b.op.Skip(ctx, operator.SkipParams{SessionID: "fine"})
					return err
				}, operator.ErrNothingToSkip, "give --to"},
				{"skip backwards", func() error {
					_, err := b.op.Skip(ctx, operator.SkipParams{SessionID: "fine", To: 1})
					return err
				}, operator.ErrNothingToSkip, "not above the next expected sequence 2"},
			}
			for _, tt := range tests {
				err := tt.op()
				require.ErrorIs(t, err, tt.wantErr, tt.name)
				require.Contains(t, err.Error(), tt.wantMsg, tt.name)
			}
			_, after := b.state(t, "fine")
			require.Equal(t, v, after, "nothing was saved")
			_, v0 := b.state(t, "nobody")
			require.Zero(t, v0, "no state was created for the unknown session")
		})
	}
}

// TestResumeAllParkedWaitsForHeldSessions: a bulk resume treats a session a worker holds as a
// single resume does: it waits for it, resumes it when it is parked and passes over
// one that is not; the waits share one deadline and run side by side, and a session still held
// at the deadline is a failure, with the others resumed all the same.
func TestResumeAllParkedWaitsForHeldSessions(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			for _, id := range []string{"a", "b", "c", "d"} {
				b.park(t, id, 3, 2)
			}
			b.publish(t, "x", 5, 1, 3) // waits on a gap at 2: state, not parked
			require.Equal(t, sequencer.OutcomeIdle, b.run(t, "x"))

			// A worker holds a, b and x for a while (the broker offered them, say, for a replayed
			// copy) and d for longer than the wait.
			hold := func(id string, d time.Duration) {
				held, err := b.worker.Accept(ctx, id)
				require.NoError(t, err)
				time.AfterFunc(d, func() { _ = held.Close(context.Background()) })
			}
			hold("a", 700*time.Millisecond)
			hold("b", 900*time.Millisecond)
			hold("x", 800*time.Millisecond)
			hold("d", time.Minute)

			const wait = 3 * time.Second
			start := time.Now()
			res, err := b.op.Resume(ctx, operator.ResumeParams{AllParked: true, Wait: wait})
			took := time.Since(start)
			require.NoError(t, err)
			var resumed []string
			for _, r := range res.Resumed {
				resumed = append(resumed, r.SessionID)
				require.Equal(t, int64(2), r.Next)
			}
			require.Equal(t, []string{"a", "b", "c"}, resumed)
			require.Len(t, res.Failed, 1)
			require.Equal(t, "d", res.Failed[0].SessionID)
			require.Contains(t, res.Failed[0].Error, "a worker holds the session")
			if store == "servicebus" {
				// x was listed as busy (its state unknown), then found not parked once locked.
				require.Len(t, res.PassedOver, 1)
				require.Equal(t, "x", res.PassedOver[0].SessionID)
				require.Contains(t, res.PassedOver[0].Error, "not parked")
			} else {
				require.Empty(t, res.PassedOver, "postgres lists without the lock: x is never a candidate")
			}
			// One shared deadline, waited for side by side: not one wait after another.
			require.Less(t, took, wait+2*time.Second)
			for _, id := range []string{"a", "b", "c"} {
				st, _ := b.state(t, id)
				require.Nil(t, st.Parked, id)
			}
			st, _ := b.state(t, "x")
			require.Equal(t, int64(2), st.Next, "a passed-over session is left as it was")
			require.NotNil(t, st.GapSince)
		})
	}
}

// On a partitioned session entity the broker refuses the SDK's peek, which sends no session-id:
// show still shows the state, and says why the messages are not listed.
func TestShowWhenTheBrokerRefusesThePeek(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, &setupOptions{queue: broker.EntityProperties{EnablePartitioning: true}})
			b.publish(t, "p", 5, 1, 2)
			require.Equal(t, sequencer.OutcomeIdle, b.run(t, "p"))
			require.Equal(t, []int64{1, 2}, b.handledOf("p"))
			b.publish(t, "p", 5, 4)

			res, err := b.op.Show(testCtx(t), operator.ShowParams{SessionID: "p"})
			require.NoError(t, err)
			require.Equal(t, int64(3), res.Session.Next)
			require.Nil(t, res.Messages)
			require.Contains(t, res.MessagesUnavailable, "the broker refused to list them")
			require.Contains(t, res.MessagesUnavailable, "without session-id")
		})
	}
}
