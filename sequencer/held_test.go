package sequencer_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func TestProperties_RoundTripKeepsEveryType(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		v    any
		want any // nil: v itself
	}{
		{name: "nil", v: nil},
		{name: "bool", v: true},
		{name: "string", v: "ünïcode ✓"},
		{name: "string with U+0000", v: "a\x00b"},
		{name: "string not UTF-8", v: "\xe9t\xe9"},
		{name: "empty string", v: ""},
		{name: "int", v: -7},
		{name: "int8", v: int8(math.MinInt8)},
		{name: "int16", v: int16(math.MinInt16)},
		{name: "int32", v: int32(math.MinInt32)},
		{name: "int64 beyond 2^53", v: int64(math.MaxInt64)},
		{name: "uint", v: uint(7)},
		{name: "uint8", v: uint8(math.MaxUint8)},
		{name: "uint16", v: uint16(math.MaxUint16)},
		{name: "uint32", v: uint32(math.MaxUint32)},
		{name: "uint64", v: uint64(math.MaxUint64)},
		{name: "float32", v: float32(0.1)},
		{name: "float64", v: 0.1},
		{name: "+Inf", v: math.Inf(1)},
		{name: "-Inf", v: math.Inf(-1)},
		{name: "time, in UTC to the nanosecond", v: at, want: at.UTC()},
		{name: "bytes", v: []byte{0, 1, 255}},
		{name: "empty bytes", v: []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := sequencer.MarshalProperties(map[string]any{"P": tt.v})
			require.NoError(t, err)
			got, err := sequencer.UnmarshalProperties(data)
			require.NoError(t, err)
			want := tt.want
			if want == nil {
				want = tt.v
			}
			require.IsType(t, want, got["P"])
			require.Equal(t, want, got["P"])
		})
	}

	t.Run("NaN", func(t *testing.T) {
		t.Parallel()
		data, err := sequencer.MarshalProperties(map[string]any{"P": math.NaN(), "Q": float32(math.NaN())})
		require.NoError(t, err)
		got, err := sequencer.UnmarshalProperties(data)
		require.NoError(t, err)
		require.True(t, math.IsNaN(got["P"].(float64)))
		require.True(t, math.IsNaN(float64(got["Q"].(float32))))
	})

	t.Run("none", func(t *testing.T) {
		t.Parallel()
		data, err := sequencer.MarshalProperties(nil)
		require.NoError(t, err)
		require.JSONEq(t, "{}", string(data))
		got, err := sequencer.UnmarshalProperties(data)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Empty(t, got)
	})
}

func TestMarshalProperties_RefusesWhatItCannotKeep(t *testing.T) {
	t.Parallel()
	type uuid [16]byte
	tests := []struct {
		name    string
		props   map[string]any
		wantMsg string
	}{
		{name: "a uuid", props: map[string]any{"Id": uuid{1}}, wantMsg: `property "Id": type sequencer_test.uuid is not kept`},
		{name: "a list", props: map[string]any{"L": []any{1}}, wantMsg: `property "L"`},
		{name: "a map", props: map[string]any{"M": map[string]any{}}, wantMsg: `property "M"`},
		{name: "a name with U+0000", props: map[string]any{"a\x00": 1}, wantMsg: "property name"},
		{name: "a name not UTF-8", props: map[string]any{"\xff": 1}, wantMsg: "property name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sequencer.MarshalProperties(tt.props)
			require.ErrorIs(t, err, sequencer.ErrNotHoldable)
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}

func TestUnmarshalProperties_RefusesMalformedInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, wantMsg string
	}{
		{name: "not JSON", data: `{`, wantMsg: "decode properties"},
		{name: "unknown type", data: `{"P":{"t":"uuid","v":"x"}}`, wantMsg: `property "P": unknown type "uuid"`},
		{name: "int8 out of range", data: `{"P":{"t":"int8","v":"128"}}`, wantMsg: `property "P"`},
		{name: "uint with a sign", data: `{"P":{"t":"uint64","v":"-1"}}`, wantMsg: `property "P"`},
		{name: "number not a string", data: `{"P":{"t":"int64","v":5}}`, wantMsg: `property "P": type int64`},
		{name: "bad base64", data: `{"P":{"t":"bytes","v":"!!"}}`, wantMsg: `property "P"`},
		{name: "bad time", data: `{"P":{"t":"time","v":"yesterday"}}`, wantMsg: `property "P"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sequencer.UnmarshalProperties([]byte(tt.data))
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}

func TestCheckHold(t *testing.T) {
	t.Parallel()
	held := func(seqs ...int64) []*sequencer.HeldMessage {
		var out []*sequencer.HeldMessage
		for i, s := range seqs {
			out = append(out, &sequencer.HeldMessage{Sequence: s, MessageID: string(rune('a' + i))})
		}
		return out
	}
	state := func(next int64) *sequencer.State {
		st := sequencer.NewState()
		st.Next = next
		return st
	}
	tests := []struct {
		name    string
		p       sequencer.HoldParams
		wantIDs string
		wantErr string
	}{
		{name: "sorted, first copy of each sequence", p: sequencer.HoldParams{State: state(3), Messages: held(5, 3, 5, 4)}, wantIDs: "bda"},
		{name: "nothing to hold", p: sequencer.HoldParams{State: state(3)}, wantIDs: ""},
		{name: "below next", p: sequencer.HoldParams{State: state(3), Messages: held(4, 2)}, wantErr: "sequence 2, below the state's next 3"},
		{name: "no state", p: sequencer.HoldParams{Messages: held(4)}, wantErr: "no state given"},
		{name: "nil message", p: sequencer.HoldParams{State: state(1), Messages: []*sequencer.HeldMessage{nil}}, wantErr: "nil message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := sequencer.CheckHold(tt.p)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			ids := ""
			for _, m := range got {
				ids += m.MessageID
			}
			require.Equal(t, tt.wantIDs, ids)
		})
	}
}

func TestHeldMessage_MessageAndBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	m := &sequencer.Message{MessageID: "m-5", SessionID: "s", BrokerSequence: 50, DeliveryCount: 3, EnqueuedTime: now.Add(-time.Minute),
		Properties: map[string]any{"Sequence": int64(5)}, Body: []byte("x"), ContentType: "text/plain", Sequence: 5, IsLast: true}
	h := sequencer.NewHeldMessage(m, now)
	require.Equal(t, now, h.HeldAt)
	back := h.Message("s")
	require.Same(t, h, back.Raw)
	back.Raw, back.DeliveryCount = nil, m.DeliveryCount // the store's copy has no delivery count
	require.Equal(t, m, back)
	require.Equal(t, int64(len("x")+len("m-5")+len("text/plain")+len("Sequence")+8), sequencer.HeldSize(h))
}

func FuzzUnmarshalProperties(f *testing.F) {
	for _, props := range []map[string]any{
		{"Sequence": int64(5), "IsLast": true, "Note": "x\x00y", "B": []byte{1}, "At": time.Unix(0, 1).UTC(), "F": 0.5, "N": nil},
		{},
	} {
		data, err := sequencer.MarshalProperties(props)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		props, err := sequencer.UnmarshalProperties(data)
		if err != nil {
			return
		}
		// What decodes encodes again and decodes to the same values.
		again, err := sequencer.MarshalProperties(props)
		require.NoError(t, err)
		back, err := sequencer.UnmarshalProperties(again)
		require.NoError(t, err)
		require.Len(t, back, len(props))
		for k, v := range props {
			if f, ok := v.(float64); ok && math.IsNaN(f) {
				continue
			}
			if f, ok := v.(float32); ok && math.IsNaN(float64(f)) {
				continue
			}
			require.Equal(t, v, back[k], "property %q", k)
		}
	})
}
