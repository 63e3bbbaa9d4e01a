package backoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/backoff"
)

func TestDelayExact(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: time.Second, Max: 30 * time.Second}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{5, 16 * time.Second}, {6, 30 * time.Second}, {7, 30 * time.Second}, {1000, 30 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, p.Delay(tt.attempt), "attempt %d", tt.attempt)
	}
}

func TestDelayZeroAndUncapped(t *testing.T) {
	t.Parallel()
	require.Zero(t, backoff.Policy{}.Delay(3))
	require.Zero(t, backoff.Policy{Max: time.Second}.Delay(3))
	uncapped := backoff.Policy{Base: time.Millisecond}
	require.Equal(t, 8*time.Millisecond, uncapped.Delay(4))
	require.Positive(t, uncapped.Delay(200), "never overflows into a negative wait")
}

func TestDelayJitterStaysInRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		jitter   float64
		min, max time.Duration
	}{
		{"equal", 0.5, 4 * time.Second, 8 * time.Second},
		{"full", 1, 0, 8 * time.Second},
		{"over one is full", 3, 0, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := backoff.Policy{Base: time.Second, Max: time.Minute, Jitter: tt.jitter}
			seen := map[time.Duration]bool{}
			for range 200 {
				d := p.Delay(4)
				require.GreaterOrEqual(t, d, tt.min)
				require.LessOrEqual(t, d, tt.max)
				seen[d] = true
			}
			require.Greater(t, len(seen), 1, "jitter varies the wait")
		})
	}
}
