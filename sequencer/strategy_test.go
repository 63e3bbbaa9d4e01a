package sequencer

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

type atomicStoreStub struct{ AtomicStore }

func TestStrategyOf(t *testing.T) {
	t.Parallel()
	atomic := atomicStoreStub{}
	tests := []struct {
		name                string
		saveEach, pipelined bool
		atomic              AtomicStore
		want                strategy
	}{
		{"the default settings", false, true, nil, &pipelinedRuns{}},
		{"awaited", false, false, nil, &recordedRuns{}},
		{"save each, awaited", true, false, nil, perMessage{}},
		{"save each, pipelined", true, true, nil, &saveAhead{}},
		{"an AtomicStore", false, true, atomic, transactional{store: atomic}},
		{"an AtomicStore, save each, awaited", true, false, atomic, transactional{store: atomic}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			newRun := strategyOf(tt.saveEach, tt.pipelined, tt.atomic)
			require.Equal(t, tt.want, newRun())
			if a, b := newRun(), newRun(); reflect.ValueOf(a).Kind() == reflect.Pointer {
				require.NotSame(t, a, b, "each run has a value of its own")
			}
		})
	}
}
