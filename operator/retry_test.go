package operator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
)

// TestReleasedRetryListedAndRetriedNow runs a worker engine with released retries against the
// emulator: a failing message leaves its session released until the next attempt (an hour away),
// listed with --retrying with its time, attempts and last error; the message waits deferred at
// the broker without its delivery count growing; retry-now makes the attempt due, and the woken
// run handles the rest in order.
func TestReleasedRetryListedAndRetriedNow(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			engine, err := sequencer.NewEngine(sequencer.EngineConfig{
				Retry:             sequencer.RetryPolicy{Attempts: 5, Base: time.Hour, Cap: time.Hour},
				RetryReleaseAfter: 1, IdleTimeout: 300 * time.Millisecond, TombstoneTTL: time.Hour,
			}, sequencer.EngineDeps{Store: b.store, Handler: sequencer.HandlerFunc(b.handle)})
			require.NoError(t, err)
			run := func(woken bool) sequencer.Outcome {
				t.Helper()
				sess, err := b.worker.Accept(ctx, "r")
				require.NoError(t, err)
				out, err := engine.RunSession(ctx, sess, &sequencer.RunOptions{Woken: woken})
				require.NoError(t, err)
				return out
			}
			b.fail("r/2", true)
			b.publish(t, "r", 3, 1, 2, 3)
			before := time.Now()
			require.Equal(t, sequencer.OutcomeRetrying, run(false))
			require.Equal(t, []int64{1}, b.handledOf("r"))

			list, err := b.op.List(ctx, operator.ListParams{Retrying: true})
			require.NoError(t, err)
			require.Len(t, list.Sessions, 1)
			s := list.Sessions[0]
			require.Equal(t, "r", s.SessionID)
			require.Equal(t, int64(2), s.Next)
			require.Equal(t, uint64(1), s.Attempts)
			require.Equal(t, "handler bug", s.LastError)
			require.NotNil(t, s.RetryAt)
			require.WithinDuration(t, before.Add(time.Hour), *s.RetryAt, time.Minute)
			require.False(t, s.Stranded, "woken at its time, not as stranded")
			stranded, err := b.op.List(ctx, operator.ListParams{Stranded: true})
			require.NoError(t, err)
			require.Empty(t, stranded.Sessions)

			// Still failing: one more attempt, released again; the deferral costs no delivery.
			res, err := b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "r"})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Sequence)
			require.Equal(t, uint64(1), res.Attempts)
			require.False(t, res.RetryAt.After(time.Now()), "due now")
			require.Equal(t, sequencer.OutcomeRetrying, run(true))
			st, _ := b.state(t, "r")
			require.Equal(t, uint64(2), st.Retrying.Attempts)
			show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "r"})
			require.NoError(t, err)
			for _, m := range show.Messages {
				require.Equal(t, "deferred", m.State, "sequence %d", m.Sequence)
				require.Equal(t, uint32(1), m.DeliveryCount, "sequence %d: a released retry does not count a delivery", m.Sequence)
			}
			require.Len(t, show.Messages, 2)

			b.fail("r/2", false)
			_, err = b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "r"})
			require.NoError(t, err)
			require.Equal(t, sequencer.OutcomeEnded, run(true))
			require.Equal(t, []int64{1, 2, 3}, b.handledOf("r"))
			require.Empty(t, b.deadLetters(t))

			_, err = b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "r"})
			require.ErrorIs(t, err, operator.ErrSessionEnded)
			_, err = b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "unknown"})
			require.ErrorIs(t, err, operator.ErrUnknownSession)
			b.publish(t, "q", 2, 2)
			require.Equal(t, sequencer.OutcomeIdle, b.run(t, "q"))
			_, err = b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "q"})
			require.ErrorIs(t, err, operator.ErrNotRetrying)
			_, err = b.op.RetryNow(ctx, operator.RetryNowParams{SessionID: "bad\nid"})
			require.ErrorIs(t, err, operator.ErrInvalidInput)
		})
	}
}
