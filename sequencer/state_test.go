package sequencer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func TestStateNeedsWake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state func(*sequencer.State)
		want  bool
	}{
		{"fresh", func(*sequencer.State) {}, false},
		{"next is deferred", func(s *sequencer.State) { s.Next = 3; s.Deferred[3] = 30 }, true},
		{"only later messages deferred", func(s *sequencer.State) { s.Next = 3; s.Deferred[5] = 50 }, false},
		{"parked, its message dead-lettered", func(s *sequencer.State) {
			s.Next = 3
			s.Deferred[4] = 40
			s.Parked = &sequencer.Parked{Sequence: 3, BrokerSequence: 30}
		}, false},
		{"parked, its message still deferred", func(s *sequencer.State) {
			s.Next = 3
			s.Deferred[3] = 30
			s.Parked = &sequencer.Parked{Sequence: 3, BrokerSequence: 30}
		}, true},
		{"parked, another copy of its sequence deferred", func(s *sequencer.State) {
			s.Next = 3
			s.Deferred[3] = 31
			s.Parked = &sequencer.Parked{Sequence: 3, BrokerSequence: 30}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := sequencer.NewState()
			tc.state(s)
			require.Equal(t, tc.want, s.NeedsWake())
		})
	}
}
