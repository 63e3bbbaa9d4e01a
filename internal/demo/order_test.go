package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSessionOrderAsTheChaosTestUsesIt judges calls as they arrive, some failing (a failed call
// moves nothing), as the chaos test's handler does.
func TestSessionOrderAsTheChaosTestUsesIt(t *testing.T) {
	t.Parallel()
	type call struct {
		seq  int64
		fail bool
	}
	tests := []struct {
		name       string
		window     int64
		calls      []call
		violations int
		depth      int64 // the deepest replay
	}{
		{"in order, one failure retried", 3, []call{{1, false}, {2, true}, {2, false}, {3, false}}, 0, 0},
		{"a failed call is not handled", 3, []call{{1, false}, {2, true}, {3, false}}, 1, 0},
		{"a replay of three after a crash", 3, []call{{1, false}, {2, false}, {3, false}, {1, false}, {2, false}, {3, false}, {4, false}}, 0, 3},
		{"a replay failing half way goes on", 3, []call{{1, false}, {2, false}, {3, false}, {2, false}, {3, true}, {3, false}, {4, false}}, 0, 2},
		{"beyond the window", 2, []call{{1, false}, {2, false}, {3, false}, {1, false}, {2, false}, {3, false}, {4, false}}, 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := &SessionOrder{Window: tt.window}
			var violations []string
			var deepest int64
			for _, c := range tt.calls {
				if v := o.Check(c.seq); v != "" {
					violations = append(violations, v)
				}
				if c.fail {
					continue
				}
				if _, depth := o.Handled(c.seq); depth > deepest {
					deepest = depth
				}
			}
			require.Len(t, violations, tt.violations, violations)
			require.Equal(t, tt.depth, deepest)
		})
	}
}
