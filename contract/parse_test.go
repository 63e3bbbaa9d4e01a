package contract_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const s, l = contract.SequenceProperty, contract.LastProperty
	tests := []struct {
		name    string
		props   map[string]any
		seq     int64
		last    bool
		wantErr string
	}{
		{"int64", map[string]any{s: int64(3)}, 3, false, ""},
		{"int32 and last", map[string]any{s: int32(4), l: true}, 4, true, ""},
		{"uint8", map[string]any{s: uint8(1), l: false}, 1, false, ""},
		{"string sequence", map[string]any{s: "12"}, 12, false, ""},
		{"last as string any case", map[string]any{s: 2, l: "TRUE"}, 2, true, ""},
		{"last false string", map[string]any{s: 2, l: "False"}, 2, false, ""},
		{"last empty string", map[string]any{s: 2, l: ""}, 2, false, ""},
		{"last nil", map[string]any{s: 2, l: nil}, 2, false, ""},
		{"missing", map[string]any{}, 0, false, `"Sequence" is missing`},
		{"nil", map[string]any{s: nil}, 0, false, `"Sequence" is missing`},
		{"not an integer", map[string]any{s: 1.5}, 0, false, `"Sequence" = 1.5 (float64) is not an integer`},
		{"not a number", map[string]any{s: "x"}, 0, false, `"Sequence" = "x" (string) is not an integer`},
		{"zero", map[string]any{s: 0}, 0, false, "below the first sequence 1"},
		{"uint64 overflow", map[string]any{s: uint64(1 << 63)}, 0, false, "not an integer"},
		{"bad last", map[string]any{s: 1, l: 1}, 0, false, `"IsLast" = 1 (int) is neither a bool`},
		{"bad last string", map[string]any{s: 1, l: "yes"}, 0, false, `"IsLast" = "yes" (string) is neither`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seq, last, err := contract.Parse(tt.props, s, l)
			require.Equal(t, tt.seq, seq)
			require.Equal(t, tt.last, last)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	_, _, err := contract.Parse(nil, s, l)
	require.ErrorIs(t, err, contract.ErrNoSequence, "an absent sequence is told apart")
	_, _, err = contract.Parse(map[string]any{s: "x"}, s, l)
	require.NotErrorIs(t, err, contract.ErrNoSequence)
}
