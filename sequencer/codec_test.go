package sequencer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func sampleStates() map[string]*sequencer.State {
	at := time.Date(2026, 11, 22, 8, 30, 0, 123456789, time.UTC)
	full := &sequencer.State{
		Next:     42,
		Last:     100,
		Deferred: map[int64]int64{44: 1007, 43: 1009, 90: 1002, 45: 999},
		Parked: &sequencer.Parked{
			Sequence: 42, BrokerSequence: 1001, Reason: "handler: boom", At: at,
		},
		SkippedPoison: map[int64]int64{7: 1010, 3: 5},
		EndedAt:       at.Add(time.Hour),
		GapSince:      at.Add(-time.Minute),
		Counters:      sequencer.Counters{Handled: 41, Deferred: 7, Duplicates: 3, Invalid: 2, DeadLettered: 1, Retries: 9, Skipped: 4},
		UpdatedAt:     at,
	}
	extreme := &sequencer.State{
		Next:     -1 << 63,
		Last:     1<<63 - 1,
		Deferred: map[int64]int64{-1 << 63: 1<<63 - 1, 0: -1 << 63, 1<<63 - 1: 0},
	}
	inFlight := &sequencer.State{
		Next:     12,
		Deferred: map[int64]int64{20: 3000},
		InFlight: map[int64]int64{12: 2001, 13: 2002, 14: 2010},
	}
	blocked := &sequencer.State{
		Next:    5,
		Blocked: &sequencer.Blocked{Sequence: 5, BrokerSequence: 77, Reason: "downstream 503", Since: at, Times: 3},
	}
	gapParked := &sequencer.State{
		Next:     9,
		Deferred: map[int64]int64{11: 400},
		Parked:   &sequencer.Parked{Sequence: 9, Reason: "gap timeout: sequence 9 missing", At: at},
	}
	retrying := &sequencer.State{
		Next:     6,
		Deferred: map[int64]int64{6: 88, 7: 90},
		Retrying: &sequencer.Retrying{Sequence: 6, BrokerSequence: 88, At: at.Add(30 * time.Second), Attempts: 4, Reason: "partner API: 503"},
	}
	ahead := &sequencer.State{Next: 31, Ahead: true, Counters: sequencer.Counters{Handled: 30}, UpdatedAt: at}
	heldParked := &sequencer.State{
		Next:   14,
		Parked: &sequencer.Parked{Sequence: 14, BrokerSequence: 9, Reason: "handler: boom", At: at, Held: true},
	}
	return map[string]*sequencer.State{
		"held-parked": heldParked,
		"ahead":       ahead,
		"retrying":    retrying,
		"new":         sequencer.NewState(),
		"full":        full,
		"extreme":     extreme,
		"in-flight":   inFlight,
		"blocked":     blocked,
		"gap-parked":  gapParked,
	}
}

func TestStateCodecRoundTrip(t *testing.T) {
	t.Parallel()
	for name, st := range sampleStates() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := st.MarshalBinary()
			require.NoError(t, err)
			var got sequencer.State
			require.NoError(t, got.UnmarshalBinary(b))
			requireStateEqual(t, st, &got)
		})
	}
}

func requireStateEqual(t *testing.T, want, got *sequencer.State) {
	t.Helper()
	require.Equal(t, want.Next, got.Next)
	require.Equal(t, want.Last, got.Last)
	require.Equal(t, want.Counters, got.Counters)
	require.Equal(t, want.Ahead, got.Ahead)
	require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "UpdatedAt %v != %v", want.UpdatedAt, got.UpdatedAt)
	require.True(t, want.EndedAt.Equal(got.EndedAt), "EndedAt")
	require.True(t, want.GapSince.Equal(got.GapSince), "GapSince")
	require.Equal(t, len(want.Deferred), len(got.Deferred))
	for k, v := range want.Deferred {
		require.Equal(t, v, got.Deferred[k], "deferred[%d]", k)
	}
	require.Equal(t, len(want.SkippedPoison), len(got.SkippedPoison))
	for k, v := range want.SkippedPoison {
		require.Equal(t, v, got.SkippedPoison[k], "skipped[%d]", k)
	}
	require.Equal(t, len(want.InFlight), len(got.InFlight))
	for k, v := range want.InFlight {
		require.Equal(t, v, got.InFlight[k], "in flight[%d]", k)
	}
	if want.Blocked == nil {
		require.Nil(t, got.Blocked)
	} else {
		require.NotNil(t, got.Blocked)
		require.Equal(t, want.Blocked.Sequence, got.Blocked.Sequence)
		require.Equal(t, want.Blocked.BrokerSequence, got.Blocked.BrokerSequence)
		require.Equal(t, want.Blocked.Reason, got.Blocked.Reason)
		require.Equal(t, want.Blocked.Times, got.Blocked.Times)
		require.True(t, want.Blocked.Since.Equal(got.Blocked.Since))
	}
	if want.Retrying == nil {
		require.Nil(t, got.Retrying)
	} else {
		require.NotNil(t, got.Retrying)
		require.Equal(t, want.Retrying.Sequence, got.Retrying.Sequence)
		require.Equal(t, want.Retrying.BrokerSequence, got.Retrying.BrokerSequence)
		require.Equal(t, want.Retrying.Attempts, got.Retrying.Attempts)
		require.Equal(t, want.Retrying.Reason, got.Retrying.Reason)
		require.True(t, want.Retrying.At.Equal(got.Retrying.At))
	}
	if want.Parked == nil {
		require.Nil(t, got.Parked)
		return
	}
	require.NotNil(t, got.Parked)
	require.Equal(t, want.Parked.Sequence, got.Parked.Sequence)
	require.Equal(t, want.Parked.BrokerSequence, got.Parked.BrokerSequence)
	require.Equal(t, want.Parked.Reason, got.Parked.Reason)
	require.Equal(t, want.Parked.Held, got.Parked.Held)
	require.True(t, want.Parked.At.Equal(got.Parked.At))
}

func TestStateCodecSizeWith5000Deferred(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		keyStep int64
		bsStep  int64
		max     int
	}{
		{name: "consecutive", keyStep: 1, bsStep: 1, max: 16 << 10},
		{name: "sparse keys, interleaved sessions", keyStep: 7, bsStep: 1_000, max: 20 << 10},
		{name: "wide broker gaps", keyStep: 50, bsStep: 3_000_000, max: 64 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := sequencer.NewState()
			st.Next = 1_000_000
			for i := range int64(5000) {
				st.Deferred[st.Next+1+i*tt.keyStep] = 1<<40 + i*tt.bsStep
			}
			st.Parked = &sequencer.Parked{Reason: strings.Repeat("x", 10_000)}
			b, err := st.MarshalBinary()
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), tt.max)
			t.Logf("%s: %d bytes", tt.name, len(b))
			var got sequencer.State
			require.NoError(t, got.UnmarshalBinary(b))
			require.Len(t, got.Deferred, 5000)
			require.Len(t, got.Parked.Reason, 4096, "long reasons are truncated")
		})
	}
}

func TestStateCodecRejectsGarbage(t *testing.T) {
	t.Parallel()
	valid, err := sampleStates()["full"].MarshalBinary()
	require.NoError(t, err)
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"bad magic", []byte("xx\x01")},
		{"future version", []byte("sq\x02\x00")},
		{"unknown flag", []byte("sq\x01\x20")},
		{"held flag without a parked mark", []byte("sq\x01\x80\x04\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00")},
		{"empty skipped index", []byte("sq\x01\x10\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")},
		{"truncated", valid[:len(valid)-1]},
		{"trailing", append(append([]byte{}, valid...), 0)},
		{"huge deferred count", append([]byte("sq\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"), 0xff, 0xff, 0xff, 0x0f)},
		{"zero key delta", []byte("sq\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x02\x04\x02\x00\x02")},
		{"bad nanos", []byte("sq\x01\x08\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x0f\x00")},
		{"reason too long", []byte("sq\x01\x01\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x80\x01")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := sequencer.NewState()
			st.Next = 7
			err := st.UnmarshalBinary(tt.in)
			require.Error(t, err)
			require.True(t, errors.Is(err, sequencer.ErrCorruptState), "%v", err)
			require.Equal(t, int64(7), st.Next, "a failed decode leaves the state unchanged")
		})
	}
}

func FuzzStateUnmarshal(f *testing.F) {
	for _, st := range sampleStates() {
		b, err := st.MarshalBinary()
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("sq\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st sequencer.State
		if err := st.UnmarshalBinary(b); err != nil {
			require.ErrorIs(t, err, sequencer.ErrCorruptState)
			return
		}
		again, err := st.MarshalBinary()
		require.NoError(t, err)
		var st2 sequencer.State
		require.NoError(t, st2.UnmarshalBinary(again))
		requireStateEqual(t, &st, &st2)
	})
}
