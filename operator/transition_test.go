package operator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

var (
	parkedAt = time.Date(2026, 5, 1, 11, 0, 0, 0, time.UTC)
	opNow    = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
)

// parkedState is a session parked on sequence 3 whose later messages 4 and 6 were deferred.
func parkedState() *sequencer.State {
	st := sequencer.NewState()
	st.Next = 3
	st.Deferred = map[int64]int64{4: 40, 6: 60}
	st.GapSince = parkedAt
	st.Parked = &sequencer.Parked{Sequence: 3, BrokerSequence: 30, Reason: "status 500", At: parkedAt}
	return st
}

func TestResumeState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		state   func() *sequencer.State
		wantErr error
		check   func(t *testing.T, st *sequencer.State)
	}{
		{
			name:  "parked waits for its sequence again, gap clock restarted",
			state: parkedState,
			check: func(t *testing.T, st *sequencer.State) {
				require.Nil(t, st.Parked)
				require.Equal(t, int64(3), st.Next)
				require.Equal(t, opNow, st.GapSince, "waits for the replay from now on")
				require.False(t, st.NeedsWake(), "nothing to wake: the replayed copy brings the session back")
			},
		},
		{
			name: "a replayed copy already deferred makes the sweeper wake it",
			state: func() *sequencer.State {
				st := parkedState()
				st.Deferred[3] = 99 // the copy, deferred while the session was parked
				return st
			},
			check: func(t *testing.T, st *sequencer.State) {
				require.Nil(t, st.Parked)
				require.True(t, st.NeedsWake())
				require.True(t, st.GapSince.IsZero(), "no gap: the next message is there")
			},
		},
		{
			name: "parked on a gap waits for the missing message again",
			state: func() *sequencer.State {
				st := parkedState()
				st.Parked.BrokerSequence, st.GapSince = 0, time.Time{}
				return st
			},
			check: func(t *testing.T, st *sequencer.State) {
				require.Nil(t, st.Parked)
				require.Equal(t, opNow, st.GapSince, "a gap timeout counts from the resume")
			},
		},
		{
			name: "blocked: the mark is cleared",
			state: func() *sequencer.State {
				st := sequencer.NewState()
				st.Next = 3
				st.Deferred = map[int64]int64{4: 40}
				st.Blocked = &sequencer.Blocked{Sequence: 3, BrokerSequence: 30, Reason: "status 503", Since: parkedAt, Times: 10}
				return st
			},
			check: func(t *testing.T, st *sequencer.State) {
				require.Equal(t, int64(3), st.Next)
			},
		},
		{name: "not parked", state: sequencer.NewState, wantErr: ErrNotParked},
		{
			name: "ended",
			state: func() *sequencer.State {
				st := parkedState()
				st.EndedAt = opNow
				return st
			},
			wantErr: ErrSessionEnded,
		},
		{
			name: "parked message not dead-lettered yet",
			state: func() *sequencer.State {
				st := parkedState()
				st.Deferred[3] = 30
				return st
			},
			wantErr: ErrUnsettled,
		},
		{
			name: "run cut short",
			state: func() *sequencer.State {
				st := parkedState()
				st.InFlight = map[int64]int64{3: 31}
				return st
			},
			wantErr: ErrUnsettled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := tt.state()
			before := *st
			p, b, err := resumeState("s", st, opNow)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Equal(t, before, *st, "nothing changed")
				return
			}
			require.NoError(t, err)
			switch {
			case before.Parked != nil:
				require.Equal(t, int64(3), p.Sequence)
			default:
				require.Nil(t, p)
				require.Equal(t, int64(3), b.Sequence)
			}
			require.Nil(t, st.Blocked)
			require.Equal(t, opNow, st.UpdatedAt)
			tt.check(t, st)
		})
	}
}

func TestSkipState(t *testing.T) {
	t.Parallel()
	gapState := func() *sequencer.State {
		st := sequencer.NewState()
		st.Next = 2
		st.Deferred = map[int64]int64{5: 50, 7: 70}
		st.GapSince = parkedAt
		return st
	}
	tests := []struct {
		name  string
		state func() *sequencer.State
		to    int64
		// want: the plan and the state after it
		wantFrom, wantTo int64
		wantDropped      []int64
		wantSkipped      uint64
		wantEnds         bool
		wantWake         bool
		wantGapSince     time.Time
		wantErr          error
	}{
		{name: "parked: the parked sequence", state: parkedState, wantFrom: 3, wantTo: 4, wantSkipped: 1, wantWake: true},
		{name: "parked: everything below --to", state: parkedState, to: 6, wantFrom: 3, wantTo: 6,
			wantDropped: []int64{4}, wantSkipped: 3, wantWake: true},
		{name: "parked: --to into a gap", state: parkedState, to: 5, wantFrom: 3, wantTo: 5,
			wantDropped: []int64{4}, wantSkipped: 2, wantWake: true, wantGapSince: opNow},
		{name: "gap: the missing sequences", state: gapState, wantFrom: 2, wantTo: 5, wantSkipped: 3, wantWake: true},
		{
			name: "retrying: the message that keeps failing",
			state: func() *sequencer.State {
				st := sequencer.NewState()
				st.Next = 4
				st.Deferred = map[int64]int64{4: 40, 5: 50}
				st.Retrying = &sequencer.Retrying{Sequence: 4, BrokerSequence: 40, At: opNow.Add(time.Minute), Attempts: 3, Reason: "503"}
				return st
			},
			wantFrom: 4, wantTo: 5, wantDropped: []int64{4}, wantSkipped: 1, wantWake: true,
		},
		{name: "gap: past a deferred one", state: gapState, to: 6, wantFrom: 2, wantTo: 6, wantDropped: []int64{5},
			wantSkipped: 4, wantWake: true, wantGapSince: opNow},
		{
			name: "to the last sequence",
			state: func() *sequencer.State {
				st := gapState()
				st.Last = 7
				return st
			},
			to: 7, wantFrom: 2, wantTo: 7, wantDropped: []int64{5}, wantSkipped: 5, wantWake: true,
		},
		{
			name: "past the last sequence with deferred messages left",
			state: func() *sequencer.State {
				st := gapState()
				st.Last = 7
				return st
			},
			to: 8, wantErr: ErrInvalidInput,
		},
		{
			name: "parked on the last sequence ends the session",
			state: func() *sequencer.State {
				st := parkedState()
				st.Deferred = map[int64]int64{}
				st.Last = 3
				return st
			},
			wantFrom: 3, wantTo: 4, wantSkipped: 1, wantEnds: true,
		},
		{
			name: "parked on a gap: the missing sequences",
			state: func() *sequencer.State {
				st := parkedState()
				st.Parked.BrokerSequence, st.GapSince = 0, time.Time{}
				return st
			},
			wantFrom: 3, wantTo: 4, wantSkipped: 1, wantWake: true,
		},
		{
			name: "parked on a wider gap: up to the lowest deferred",
			state: func() *sequencer.State {
				st := parkedState()
				st.Parked.BrokerSequence, st.GapSince = 0, time.Time{}
				delete(st.Deferred, 4)
				return st
			},
			wantFrom: 3, wantTo: 6, wantSkipped: 3, wantWake: true,
		},
		{
			name: "blocked: the blocked sequence",
			state: func() *sequencer.State {
				st := sequencer.NewState()
				st.Next = 3
				st.Deferred = map[int64]int64{4: 40}
				st.Blocked = &sequencer.Blocked{Sequence: 3, BrokerSequence: 30, Reason: "status 503", Since: parkedAt, Times: 10}
				return st
			},
			wantFrom: 3, wantTo: 4, wantSkipped: 1, wantWake: true,
		},
		{name: "nothing to skip", state: sequencer.NewState, wantErr: ErrNothingToSkip},
		{name: "--to not above next", state: gapState, to: 2, wantErr: ErrNothingToSkip},
		{
			name: "--to past the last",
			state: func() *sequencer.State {
				st := gapState()
				st.Last = 7
				return st
			},
			to: 9, wantErr: ErrInvalidInput,
		},
		{
			name: "next is deferred: no gap to skip",
			state: func() *sequencer.State {
				st := gapState()
				st.Deferred[2] = 20
				return st
			},
			wantErr: ErrNothingToSkip,
		},
		{
			name: "ended",
			state: func() *sequencer.State {
				st := gapState()
				st.EndedAt = parkedAt
				return st
			},
			to: 9, wantErr: ErrSessionEnded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := tt.state()
			before := *st
			plan, err := skipState("s", st, tt.to, opNow)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Equal(t, before, *st, "nothing changed")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantFrom, plan.From)
			require.Equal(t, tt.wantTo, plan.To)
			require.Equal(t, tt.wantDropped, plan.Dropped)
			require.Equal(t, before.Parked != nil, plan.Unparked != nil)
			require.Equal(t, before.Blocked != nil, plan.Unblocked != nil)
			require.Nil(t, st.Blocked)
			require.Equal(t, tt.wantEnds, plan.Ends)

			require.Nil(t, st.Parked)
			require.Equal(t, tt.wantTo, st.Next)
			require.Equal(t, tt.wantSkipped, st.Counters.Skipped)
			require.Equal(t, tt.wantEnds, !st.EndedAt.IsZero())
			require.Equal(t, tt.wantWake, st.NeedsWake(), "the sweeper wakes the session for its deferred messages")
			require.Equal(t, tt.wantGapSince, st.GapSince)
			require.Equal(t, opNow, st.UpdatedAt)
		})
	}
}
