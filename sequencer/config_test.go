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
		{"default", EngineConfig{}, 1},
		{"save each", EngineConfig{SaveEachMessage: true}, 1},
		{"pipelined runs, default pending", EngineConfig{PipelineRuns: true}, 17},
		{"pipelined runs, 4 pending", EngineConfig{PipelineRuns: true, MaxPendingSettlements: 4}, 5},
		{"pipelined runs, 1 pending", EngineConfig{PipelineRuns: true, MaxPendingSettlements: 1}, 1},
		{"pipelined runs, save each (ahead of the saves)", EngineConfig{PipelineRuns: true, SaveEachMessage: true}, 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.cfg.ReplayWindow())
		})
	}
}
