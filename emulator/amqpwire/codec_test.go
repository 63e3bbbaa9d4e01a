package amqpwire

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

var testUUID = UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}

// TestValueGolden checks the compact encoding a real peer produces for each
// Go type, and that decoding it gives the value back.
func TestValueGolden(t *testing.T) {
	t.Parallel()
	ts := time.UnixMilli(1700000000123).UTC()
	tests := []struct {
		name string
		v    any
		hex  string
	}{
		{"null", nil, "40"},
		{"true", true, "41"},
		{"false", false, "42"},
		{"ubyte", uint8(7), "5007"},
		{"ushort", uint16(0x1234), "601234"},
		{"uint0", uint32(0), "43"},
		{"smalluint", uint32(255), "52ff"},
		{"uint", uint32(256), "7000000100"},
		{"ulong0", uint64(0), "44"},
		{"smallulong", uint64(0x10), "5310"},
		{"ulong", uint64(1 << 40), "800000010000000000"},
		{"byte", int8(-2), "51fe"},
		{"short", int16(-2), "61fffe"},
		{"smallint", int32(-128), "5480"},
		{"int", int32(128), "7100000080"},
		{"smalllong", int64(127), "557f"},
		{"long", int64(-129), "81ffffffffffffff7f"},
		{"float", float32(1.5), "723fc00000"},
		{"double", float64(-2), "82c000000000000000"},
		{"char", Char('€'), "73000020ac"},
		{"timestamp", ts, "830000018bcfe5687b"},
		{"uuid", testUUID, "98123456789abcdef00123456789abcdef"},
		{"vbin8", []byte{1, 2}, "a0020102"},
		{"str8", "hé", "a10368c3a9"},
		{"sym8", Symbol("ab"), "a3026162"},
		{"decimal32", Decimal{Code: 0x74, Bytes: []byte{1, 2, 3, 4}}, "7401020304"},
		{"decimal64", Decimal{Code: 0x84, Bytes: []byte{1, 2, 3, 4, 5, 6, 7, 8}}, "840102030405060708"},
		{"decimal128", Decimal{Code: 0x94, Bytes: bytes.Repeat([]byte{9}, 16)}, "94" + strings.Repeat("09", 16)},
		{"list0", []any{}, "45"},
		{"list8", []any{uint32(1), "a", nil}, "c00703520 1a1016140"},
		{"nested list", []any{[]any{}, []any{true}}, "c0060245c0020141"},
		{"map8 sorted by encoded key", map[any]any{Symbol("b"): int32(1), Symbol("a"): nil},
			"c10a04a30161 40 a30162 5401"},
		{"described", Described{Descriptor: uint64(0x77), Value: "x"}, "005377a10178"},
		{"symbolic descriptor", Described{Descriptor: Symbol("a:b"), Value: nil}, "00a3036 13a6240"},
		{"sym8 array", SymbolArray("ab", "c"), "e007 02 a3 026162 0163"},
		{"long array", LongArray(1, -1), "e01202810000000000000001ffffffffffffffff"},
		{"uuid array", UUIDArray(testUUID), "e01201 98123456789abcdef00123456789abcdef"},
		{"timestamp array", Array{Code: 0x83, Items: []any{ts}}, "e00a01830000018bcfe5687b"},
		{"empty symbol array", SymbolArray(), "e00200a3"},
		{"described array", Array{Code: 0xa1, Descriptor: uint64(5), Items: []any{"x"}},
			"e007 01 005305 a1 0178"},
		{"array of maps", Array{Code: 0xd1, Items: []any{map[any]any{}}}, "e00a01d1 00000004 00000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := hexBytes(t, tt.hex)
			got, err := AppendValue(nil, tt.v)
			require.NoError(t, err)
			require.Equal(t, want, got, "encoding: got %x", got)

			v, n, err := DecodeValue(append(got, 0xff)) // trailing byte must be left alone
			require.NoError(t, err)
			require.Equal(t, len(want), n)
			require.Equal(t, tt.v, v)
		})
	}
}

// TestDecodeAcceptsEveryEncoding feeds the non-compact encodings a peer may
// legally choose and checks they decode to the same Go values.
func TestDecodeAcceptsEveryEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hex  string
		want any
	}{
		{"uint as 4 bytes", "7000000000", uint32(0)},
		{"ulong as 8 bytes", "800000000000000001", uint64(1)},
		{"int as 4 bytes", "71ffffffff", int32(-1)},
		{"long as 8 bytes", "810000000000000001", int64(1)},
		{"boolean byte true", "5601", true},
		{"boolean byte false", "5600", false},
		{"vbin32", "b0000000020102", []byte{1, 2}},
		{"str32", "b10000000161", "a"},
		{"sym32", "b30000000161", Symbol("a")},
		{"list32", "d0000000050000000141", []any{true}},
		{"list8 empty", "c00100", []any{}},
		{"map32", "d10000000800000002a10161 41", map[any]any{"a": true}},
		{"array32 of sym32", "f00000000e00000002b3000000016100000000", Array{Code: 0xb3, Items: []any{Symbol("a"), Symbol("")}}},
		{"array of smalllong", "e00402550102", Array{Code: 0x55, Items: []any{int64(1), int64(2)}}},
		{"array of uint0", "e0020343", Array{Code: 0x43, Items: []any{uint32(0), uint32(0), uint32(0)}}},
		{"array of booleans", "e004025601 00", Array{Code: 0x56, Items: []any{true, false}}},
		{"array of lists", "e00b01d0000000050000000141", Array{Code: 0xd0, Items: []any{[]any{true}}}},
		{"ulong descriptor", "00800000000000000077 40", Described{Descriptor: uint64(0x77), Value: nil}},
		{"described described", "0053010053024 0", Described{Descriptor: uint64(1), Value: Described{Descriptor: uint64(2), Value: nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := hexBytes(t, tt.hex)
			v, n, err := DecodeValue(b)
			require.NoError(t, err)
			require.Equal(t, len(b), n)
			require.Equal(t, tt.want, v)
		})
	}
}

func TestArrayWidensCompactElementCode(t *testing.T) {
	t.Parallel()
	long := Symbol(strings.Repeat("s", 300))
	tests := []struct {
		name     string
		in       Array
		wantCode byte
	}{
		{"sym8 to sym32", SymbolArray("a", long), 0xb3},
		{"smalllong to long", Array{Code: 0x55, Items: []any{int64(1), int64(1000)}}, 0x81},
		{"uint0 to uint", Array{Code: 0x43, Items: []any{uint32(0), uint32(7)}}, 0x70},
		{"true to boolean", Array{Code: 0x41, Items: []any{true, false}}, 0x56},
		{"map8 to map32", Array{Code: 0xc1, Items: []any{map[any]any{}}}, 0xd1},
		{"code 0 from first item", Array{Items: []any{"x"}}, 0xa1},
		{"int items become long", Array{Items: []any{1, 2}}, 0x81},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			enc, err := AppendValue(nil, tt.in)
			require.NoError(t, err)
			v, n, err := DecodeValue(enc)
			require.NoError(t, err)
			require.Equal(t, len(enc), n)
			arr, ok := v.(Array)
			require.True(t, ok, "got %T", v)
			require.Equal(t, tt.wantCode, arr.Code)
			require.Len(t, arr.Items, len(tt.in.Items))
			for i, it := range tt.in.Items {
				require.Equal(t, normalizeItem(it), arr.Items[i])
			}
		})
	}
}

func TestConvenienceTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"int is long", 5, int64(5)},
		{"uint is ulong", uint(5), uint64(5)},
		{"map[Symbol]any", map[Symbol]any{"k": "v"}, map[any]any{Symbol("k"): "v"}},
		{"map[string]any", map[string]any{"k": int32(1)}, map[any]any{"k": int32(1)}},
		{"[]Symbol is an array", []Symbol{"x"}, SymbolArray("x")},
		{"nil list is list0", []any(nil), []any{}},
		{"*Array", &Array{Code: 0x81, Items: []any{int64(1)}}, LongArray(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			enc, err := AppendValue(nil, tt.in)
			require.NoError(t, err)
			v, _, err := DecodeValue(enc)
			require.NoError(t, err)
			require.Equal(t, tt.want, v)
		})
	}
}

func TestLargeValuesUse32BitForms(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 300)
	items := make([]any, 300)
	for i := range items {
		items[i] = uint32(i)
	}
	m := map[any]any{}
	for i := range 200 {
		m[int64(i*1000)] = big[:i]
	}
	tests := []struct {
		name     string
		v        any
		wantCode byte
	}{
		{"str32", big, 0xb1},
		{"vbin32", []byte(big), 0xb0},
		{"sym32", Symbol(big), 0xb3},
		{"list32 by count", items, 0xd0},
		{"list32 by size", []any{big}, 0xd0},
		{"map32", m, 0xd1},
		{"array32", Array{Code: 0x70, Items: items}, 0xf0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			enc, err := AppendValue([]byte{0xaa}, tt.v)
			require.NoError(t, err)
			require.Equal(t, byte(0xaa), enc[0], "dst prefix must be kept")
			require.Equal(t, tt.wantCode, enc[1])
			v, n, err := DecodeValue(enc[1:])
			require.NoError(t, err)
			require.Equal(t, len(enc)-1, n)
			if a, ok := tt.v.(Array); ok {
				require.Equal(t, a.Items, v.(Array).Items)
				return
			}
			require.Equal(t, tt.v, v)
		})
	}
}

func TestMapEncodingIsDeterministic(t *testing.T) {
	t.Parallel()
	m := map[any]any{}
	sm := map[Symbol]any{}
	for i := range 50 {
		m[int64(i)] = "v"
		m[Symbol(rune('a'+i%26))+Symbol(rune('a'+i/26))] = int32(i)
		sm[Symbol(rune('a'+i%26))+Symbol(rune('a'+i/26))] = int32(i)
	}
	first, err := AppendValue(nil, m)
	require.NoError(t, err)
	firstSym, err := AppendValue(nil, sm)
	require.NoError(t, err)
	for range 20 {
		again, err := AppendValue(nil, m)
		require.NoError(t, err)
		require.Equal(t, first, again)
		againSym, err := AppendValue(nil, sm)
		require.NoError(t, err)
		require.Equal(t, firstSym, againSym)
	}
}

func TestFloatSpecialValuesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1)} {
		enc, err := AppendValue(nil, f)
		require.NoError(t, err)
		v, _, err := DecodeValue(enc)
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(f), math.Float64bits(v.(float64)))
	}
}

func TestEncodeErrors(t *testing.T) {
	t.Parallel()
	deep := []any{}
	for range MaxDepth + 2 {
		deep = []any{deep}
	}
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"unsupported type", struct{}{}, "unsupported Go type"},
		{"unsupported nested", []any{1, complex(1, 1)}, "list item 1"},
		{"bad descriptor", Described{Descriptor: "str", Value: nil}, "descriptor must be"},
		{"bad decimal", Decimal{Code: 0x74, Bytes: []byte{1}}, "decimal"},
		{"array item mismatch", Array{Code: 0xa3, Items: []any{Symbol("a"), "b"}}, "does not match"},
		{"too deep", deep, "nesting deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dst := []byte{1, 2}
			out, err := AppendValue(dst, tt.v)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, []byte{1, 2}, out)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	deep := bytes.Repeat([]byte{0xc0, 0x00, 0x01}, 0) // built below
	for range MaxDepth + 2 {
		deep = append([]byte{0x00, 0x53, 0x01}, deep...)
	}
	deep = append(deep, 0x40)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "missing constructor"},
		{"unknown constructor", []byte{0x57, 0}, "unknown constructor"},
		{"truncated fixed", []byte{0x70, 0, 0}, "truncated"},
		{"truncated str8", []byte{0xa1, 5, 'a'}, "truncated"},
		{"truncated str32 huge length", []byte{0xb1, 0xff, 0xff, 0xff, 0xff, 'a'}, "truncated"},
		{"list size beyond input", []byte{0xc0, 10, 1, 0x40}, "truncated compound"},
		{"list size zero", []byte{0xc0, 0, 0}, "smaller than its count"},
		{"list count beyond bytes", []byte{0xd0, 0, 0, 0, 5, 0, 0, 0, 5, 0x40}, "exceeds"},
		{"list count huge", []byte{0xd0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40}, "too large"},
		{"list with trailing bytes", []byte{0xc0, 3, 1, 0x40, 0x40}, "bytes after"},
		{"list item truncated", []byte{0xc0, 3, 2, 0xa1, 5}, "list item 0"},
		{"odd map", []byte{0xc1, 2, 1, 0x40}, "odd element count"},
		{"binary map key", []byte{0xc1, 5, 2, 0xa0, 1, 1, 0x40}, "map key not comparable"},
		{"duplicate map key", []byte{0xc1, 5, 4, 0x41, 0x40, 0x41, 0x40}, "duplicate map key"},
		{"bad boolean", []byte{0x56, 2}, "boolean byte"},
		{"bad descriptor type", []byte{0x00, 0xa1, 1, 'x', 0x40}, "descriptor must be"},
		{"descriptor without value", []byte{0x00, 0x53, 0x10}, "described value"},
		{"array without constructor", []byte{0xe0, 1, 0}, "without element constructor"},
		{"array count beyond bytes", []byte{0xe0, 3, 200, 0x81, 0}, "exceeds"},
		{"array of nulls too many", []byte{0xf0, 0, 0, 0, 5, 0x7f, 0xff, 0xff, 0xff, 0x40}, "too many values"},
		{"array nested described constructor", []byte{0xe0, 5, 1, 0x00, 0x53, 1, 0x00}, "nested described"},
		{"too deep", deep, "nesting deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := DecodeValue(tt.in)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestArrayElementTypesRoundTrip encodes an array for every element
// constructor and checks it decodes to the same Array.
func TestArrayElementTypesRoundTrip(t *testing.T) {
	t.Parallel()
	ts := time.UnixMilli(-1000).UTC()
	dec := func(code byte, n int) Decimal { return Decimal{Code: code, Bytes: bytes.Repeat([]byte{7}, n)} }
	tests := []Array{
		{Code: 0x40, Items: []any{nil, nil}},
		{Code: 0x41, Items: []any{true, true}},
		{Code: 0x42, Items: []any{false}},
		{Code: 0x43, Items: []any{uint32(0)}},
		{Code: 0x44, Items: []any{uint64(0)}},
		{Code: 0x45, Items: []any{[]any{}}},
		{Code: 0x50, Items: []any{uint8(1), uint8(255)}},
		{Code: 0x51, Items: []any{int8(-1)}},
		{Code: 0x52, Items: []any{uint32(9)}},
		{Code: 0x53, Items: []any{uint64(9)}},
		{Code: 0x54, Items: []any{int32(-9)}},
		{Code: 0x55, Items: []any{int64(-9)}},
		{Code: 0x56, Items: []any{true, false}},
		{Code: 0x60, Items: []any{uint16(600)}},
		{Code: 0x61, Items: []any{int16(-600)}},
		{Code: 0x70, Items: []any{uint32(1 << 30)}},
		{Code: 0x71, Items: []any{int32(-1 << 30)}},
		{Code: 0x72, Items: []any{float32(0.25)}},
		{Code: 0x73, Items: []any{Char('x'), Char('€')}},
		{Code: 0x74, Items: []any{dec(0x74, 4)}},
		{Code: 0x80, Items: []any{uint64(1 << 60)}},
		{Code: 0x81, Items: []any{int64(-1 << 60)}},
		{Code: 0x82, Items: []any{float64(1e300)}},
		{Code: 0x83, Items: []any{ts}},
		{Code: 0x84, Items: []any{dec(0x84, 8)}},
		{Code: 0x94, Items: []any{dec(0x94, 16)}},
		{Code: 0x98, Items: []any{testUUID, UUID{}}},
		{Code: 0xa0, Items: []any{[]byte{1}, []byte{}}},
		{Code: 0xb0, Items: []any{[]byte{2}}},
		{Code: 0xa1, Items: []any{"a", ""}},
		{Code: 0xb1, Items: []any{"b"}},
		{Code: 0xa3, Items: []any{Symbol("c")}},
		{Code: 0xb3, Items: []any{Symbol("d")}},
		{Code: 0xd0, Items: []any{[]any{int64(1), "x"}, []any{}}},
		{Code: 0xd1, Items: []any{map[any]any{"k": []any{}}}},
		{Code: 0xf0, Items: []any{SymbolArray("x"), LongArray()}},
		{Code: 0x81, Descriptor: Symbol("com.example:id"), Items: []any{int64(5)}},
	}
	for _, arr := range tests {
		t.Run(hex.EncodeToString([]byte{arr.Code}), func(t *testing.T) {
			t.Parallel()
			enc, err := AppendValue(nil, arr)
			require.NoError(t, err)
			v, n, err := DecodeValue(enc)
			require.NoError(t, err)
			require.Equal(t, len(enc), n)
			require.Equal(t, arr, v)
		})
	}
}

func TestArrayElementMismatch(t *testing.T) {
	t.Parallel()
	codes := []byte{0x40, 0x45, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x60, 0x61, 0x70, 0x71, 0x72, 0x73,
		0x74, 0x80, 0x81, 0x82, 0x83, 0x98, 0xa0, 0xa1, 0xa3, 0xd0, 0xd1, 0xf0, 0x57}
	for _, code := range codes {
		// A struct value matches no element constructor.
		_, err := AppendValue(nil, Array{Code: code, Items: []any{struct{}{}}})
		require.Error(t, err, "code %#02x", code)
	}
	_, err := AppendValue(nil, Array{Code: 0xd0, Items: []any{map[any]any{}}})
	require.ErrorContains(t, err, "does not match")
	_, err = AppendValue(nil, Array{Code: 0x81, Descriptor: "bad", Items: nil})
	require.ErrorContains(t, err, "array descriptor must be")
	_, err = AppendValue(nil, Array{Items: []any{struct{}{}}})
	require.ErrorContains(t, err, "unsupported array item type")
}

func TestStringers(t *testing.T) {
	t.Parallel()
	require.Equal(t, "12345678-9abc-def0-0123-456789abcdef", testUUID.String())
	require.Equal(t, "sender", RoleSender.String())
	require.Equal(t, "receiver", RoleReceiver.String())
}
