package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	p := Plan(3, 10, 2, 7)
	require.Len(t, p, 3*12)
	require.Equal(t, p, Plan(3, 10, 2, 7), "same seed, same plan")
	require.NotEqual(t, p, Plan(3, 10, 2, 8))

	seen := map[string]map[int64]int{}
	dups := 0
	inOrder := true
	last := map[string]int64{}
	for _, pub := range p {
		if seen[pub.SessionID] == nil {
			seen[pub.SessionID] = map[int64]int{}
		}
		seen[pub.SessionID][pub.Sequence]++
		if pub.Duplicate {
			dups++
		}
		require.Equal(t, pub.Sequence == 10, pub.Last)
		if pub.Sequence < last[pub.SessionID] {
			inOrder = false
		}
		last[pub.SessionID] = pub.Sequence
	}
	require.Equal(t, 6, dups)
	require.Len(t, seen, 3)
	for id, seqs := range seen {
		require.Len(t, seqs, 10, id)
	}
	require.False(t, inOrder, "arrival is shuffled")
}

func TestChecker(t *testing.T) {
	t.Parallel()
	handle := func(c *Checker, id string, seq int64) {
		require.NoError(t, c.Handle(context.Background(), &sequencer.Message{SessionID: id, Sequence: seq}))
	}
	tests := []struct {
		name       string
		calls      []int64
		violations int
		done       bool
	}{
		{"in order", []int64{1, 2, 3}, 0, true},
		{"partial", []int64{1, 2}, 0, false},
		{"gap", []int64{1, 3}, 1, false},
		{"repeat of the previous is a redelivery", []int64{1, 1, 2, 3}, 0, true},
		{"repeat of an older one", []int64{1, 2, 1, 3}, 1, true},
		{"out of order", []int64{2, 1, 3}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewChecker([]string{"a"}, 3)
			for _, s := range tt.calls {
				handle(c, "a", s)
			}
			require.Len(t, c.Violations(), tt.violations)
			require.Equal(t, uint64(len(tt.calls)), c.Handled())
			select {
			case <-c.Done():
				require.True(t, tt.done)
				require.Empty(t, c.Incomplete())
			default:
				require.False(t, tt.done)
				require.NotEmpty(t, c.Incomplete())
			}
		})
	}
	c := NewChecker([]string{"a"}, 1)
	handle(c, "zzz", 1)
	require.Len(t, c.Violations(), 1)

	// Handling the previous sequence again is a redelivery, not an order violation.
	c = NewChecker([]string{"a"}, 3)
	handle(c, "a", 1)
	handle(c, "a", 2)
	handle(c, "a", 2)
	handle(c, "a", 3)
	require.Empty(t, c.Violations())
	require.EqualValues(t, 1, c.Redelivered())
	require.EqualValues(t, 4, c.Handled())
}

// A wider replay window (pipelined runs) takes the last sequences handed over again in order as
// a replay, and nothing else.
func TestCheckerReplayWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		window      int
		calls       []int64
		violations  int
		redelivered uint64
	}{
		{"window 1: two back is a violation", 1, []int64{1, 2, 3, 2, 3, 4, 5}, 1, 1},
		{"the last three again", 3, []int64{1, 2, 3, 4, 2, 3, 4, 5}, 0, 3},
		{"the last four, window 3", 3, []int64{1, 2, 3, 4, 5, 2, 3, 4, 5}, 1, 3},
		{"a replay started again lower", 3, []int64{1, 2, 3, 4, 3, 2, 3, 4, 5}, 0, 4},
		{"a replay that skips", 3, []int64{1, 2, 3, 4, 2, 4, 5}, 1, 1},
		{"a replay stopped short", 3, []int64{1, 2, 3, 4, 2, 3, 5}, 1, 2},
		{"out of order is still a violation", 3, []int64{2, 1, 3, 4, 5}, 2, 0},
		{"never handled is no replay", 3, []int64{1, 3, 2, 4, 5}, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewReplayChecker([]string{"a"}, 5, tt.window)
			for _, s := range tt.calls {
				require.NoError(t, c.Handle(context.Background(), &sequencer.Message{SessionID: "a", Sequence: s}))
			}
			require.Len(t, c.Violations(), tt.violations, c.Violations())
			require.Equal(t, tt.redelivered, c.Redelivered())
		})
	}
}
