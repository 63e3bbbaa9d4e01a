package sequencer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStrategyOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		saveEach, pipelined, atomic bool
		want                        strategy
		runs                        bool
	}{
		{"the default settings", false, true, false, pipelinedRuns, true},
		{"awaited", false, false, false, recordedRuns, true},
		{"save each, awaited", true, false, false, perMessage, false},
		{"save each, pipelined", true, true, false, saveAhead, false},
		{"an AtomicStore", false, true, true, transactional, false},
		{"an AtomicStore, save each, awaited", true, false, true, transactional, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := strategyOf(tt.saveEach, tt.pipelined, tt.atomic)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.runs, got.recordsRuns())
		})
	}
}
