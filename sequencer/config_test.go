package sequencer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplayWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  EngineConfig
		want int
	}{
		{"default: pipelined", EngineConfig{}, 17},
		{"pipelined, 4 pending", EngineConfig{MaxPendingSettlements: 4}, 5},
		{"pipelined, 1 pending", EngineConfig{MaxPendingSettlements: 1}, 1},
		{"pipelined, save each (ahead of the saves)", EngineConfig{SaveEachMessage: true}, 17},
		{"awaited", EngineConfig{Pipelining: Awaited}, 1},
		{"awaited, save each", EngineConfig{Pipelining: Awaited, SaveEachMessage: true}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.cfg.ReplayWindow())
		})
	}
}

func TestPipeliningDefaultAndValidation(t *testing.T) {
	t.Parallel()
	require.Equal(t, Pipelined, EngineConfig{}.WithDefaults().Pipelining, "the library's default is the worker's")
	require.Equal(t, Awaited, EngineConfig{Pipelining: Awaited}.WithDefaults().Pipelining)
	require.ErrorContains(t, EngineConfig{Pipelining: "sometimes"}.WithDefaults().Validate(), `Pipelining "sometimes": want pipelined or awaited`)
}
