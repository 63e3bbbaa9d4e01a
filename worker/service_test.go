package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
)

// A stop lets the work in hand finish: soft ends, hard does not.
func TestBaseStopIsGraceful(t *testing.T) {
	t.Parallel()
	var hardEnded, causeStopped atomic.Bool
	b := newBase("test", slog.New(slog.DiscardHandler), func(soft, hard context.Context) error {
		<-soft.Done()
		causeStopped.Store(errors.Is(context.Cause(soft), ErrStopped))
		hardEnded.Store(hard.Err() != nil)
		return nil
	})
	require.NoError(t, b.Start(t.Context()))
	require.Error(t, b.Start(t.Context()), "a second start is refused")
	require.NoError(t, b.Stop(t.Context()))
	<-b.Stopped()
	require.False(t, hardEnded.Load())
	require.True(t, causeStopped.Load(), "the stop cause is ErrStopped")
	require.NoError(t, b.Stop(t.Context()), "stopping twice is harmless")
	require.NoError(t, newBase("idle", slog.New(slog.DiscardHandler), nil).Stop(t.Context()), "a service never started stops at once")
}

// softStop cancels the work in hand once the soft stop timeout passes, and says so; a
// StopAndCancel meanwhile is no failure.
func TestSoftStopEscalates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		cancel  bool // StopAndCancel before the timeout
		wantErr error
	}{
		{"timeout passes", false, ErrSoftStopTimeout},
		{"second signal", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			inHand := make(chan struct{})
			b := newBase("test", slog.New(slog.DiscardHandler), func(_, hard context.Context) error {
				close(inHand)
				<-hard.Done() // work that only ends when canceled
				return nil
			})
			require.NoError(t, b.Start(context.Background()))
			<-inHand
			stopped := make(chan error, 1)
			go func() {
				stopped <- softStop(context.Background(), b, clk, 30*time.Second, slog.New(slog.DiscardHandler))
			}()
			require.True(t, clk.WaitForTimers(1), "the soft stop timer is set")
			if tt.cancel {
				require.NoError(t, b.StopAndCancel(context.Background()))
			} else {
				clk.Advance(30 * time.Second)
			}
			err := <-stopped
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.ErrorContains(t, err, "30s")
		})
	}
}

// every runs at once, then once per interval of the clock, until ctx ends.
func TestEveryFollowsTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan time.Time, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, clk, time.Minute, func(context.Context) { calls <- clk.Now() })
	}()
	first := <-calls
	for i := 1; i <= 3; i++ {
		require.True(t, clk.WaitForTimers(1))
		clk.Advance(time.Minute)
		require.Equal(t, first.Add(time.Duration(i)*time.Minute), <-calls)
	}
	cancel()
	<-done
}

// A failure of the function is Err's.
func TestBaseKeepsTheFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	b := newBase("test", slog.New(slog.DiscardHandler), func(context.Context, context.Context) error { return boom })
	require.NoError(t, b.Start(context.Background()))
	<-b.Stopped()
	require.ErrorIs(t, b.Err(), boom)
}
