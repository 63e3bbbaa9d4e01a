package sbadapter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewSweeperValidates(t *testing.T) {
	t.Parallel()
	lister := SessionListerFunc(func(context.Context) ([]string, error) { return nil, nil })
	_, err := NewSweeper(SweeperConfig{Handoff: func(context.Context, string) {}})
	require.ErrorContains(t, err, "Lister")
	_, err = NewSweeper(SweeperConfig{Lister: lister})
	require.ErrorContains(t, err, "Handoff")
}

func TestSweeperHandsOffListedSessions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	calls := 0
	lister := SessionListerFunc(func(context.Context) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 2 {
			return nil, errors.New("broker hiccup")
		}
		return []string{"a", "b"}, nil
	})
	sw, err := NewSweeper(SweeperConfig{
		Lister:   lister,
		Interval: 5 * time.Millisecond,
		Handoff: func(_ context.Context, id string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, id)
		},
	})
	require.NoError(t, err)

	n, err := sw.SweepOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = sw.SweepOnce(context.Background())
	require.ErrorContains(t, err, "broker hiccup")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- sw.Run(ctx) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 6
	}, 5*time.Second, time.Millisecond, "keeps sweeping on its interval")
	cancel()
	require.NoError(t, <-done)
}
