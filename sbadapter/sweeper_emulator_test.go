package sbadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// TestSweeperRescuesStrandedSession leaves a session as a crash would: its next message deferred
// at the broker and recorded in the state, nothing active. Accept-next never offers it; the
// sweeper finds it and the runner finishes it.
func TestSweeperRescuesStrandedSession(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := testCtx(t)
	store := sbstate.New(nil)
	send(ctx, t, b.sender, "stranded", 1)

	sess, err := b.source.Accept(ctx, "stranded")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, 1)
	st := sequencer.NewState()
	st.Deferred[1] = msgs[0].BrokerSequence
	_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st})
	require.NoError(t, err)
	require.NoError(t, sess.Defer(ctx, msgs[0]))
	require.NoError(t, sess.Close(ctx))

	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.source.AcceptNext(actx)
	cancel()
	require.ErrorIs(t, err, sequencer.ErrNoSession, "a deferred-only session is not offered to accept-next")

	handled := make(chan *sequencer.Message, 1)
	runner, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: b.source,
		Store:  store,
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			handled <- m
			return nil
		}),
		Engine:                sequencer.EngineConfig{IdleTimeout: 200 * time.Millisecond},
		MaxConcurrentSessions: 1,
		AcceptTimeout:         200 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, runner.Start(ctx))
	defer func() { require.NoError(t, runner.Stop(ctx)) }()

	lister, err := sbadapter.StrandedFilter(sbadapter.StrandedFilterConfig{Lister: sbadapter.SessionListerFunc(b.source.ListSessionsWithState), Source: b.source, Store: store})
	require.NoError(t, err)
	sweeper, err := sbadapter.NewSweeper(sbadapter.SweeperConfig{
		Lister:   lister,
		Handoff:  func(_ context.Context, id string) { runner.Wake(id) },
		Interval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	sctx, scancel := context.WithCancel(ctx)
	sweepDone := make(chan error)
	go func() { sweepDone <- sweeper.Run(sctx) }()
	defer func() {
		scancel()
		require.NoError(t, <-sweepDone)
	}()

	select {
	case m := <-handled:
		require.Equal(t, "stranded", m.SessionID)
		require.EqualValues(t, 1, m.Sequence)
	case <-ctx.Done():
		t.Fatal("the stranded session was never handled")
	}
	require.Eventually(t, func() bool {
		ids, err := lister.ListSessions(ctx)
		return err == nil && len(ids) == 0
	}, 10*time.Second, 50*time.Millisecond, "nothing is stranded once the session moved on")
}
