package amqpwire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProtocolHeader(t *testing.T) {
	t.Parallel()
	sasl := ProtocolHeader{ProtocolID: ProtocolSASL, Major: 1}
	require.Equal(t, []byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}, AppendProtocolHeader(nil, sasl))

	got, err := ReadProtocolHeader(bytes.NewReader([]byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0, 0xff}))
	require.NoError(t, err)
	require.Equal(t, ProtocolHeader{ProtocolID: ProtocolAMQP, Major: 1}, got)

	_, err = ReadProtocolHeader(bytes.NewReader([]byte("HTTP/1.1")))
	require.ErrorIs(t, err, ErrMalformed)
	_, err = ReadProtocolHeader(bytes.NewReader([]byte("AMQ")))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestReadFrameSkipsExtendedHeader(t *testing.T) {
	t.Parallel()
	enc, err := AppendFrame(nil, Frame{Channel: 4, Body: &End{}})
	require.NoError(t, err)
	// Rebuild with doff 3: four bytes of extended header before the body.
	body := enc[8:]
	withExt := []byte{0, 0, 0, byte(12 + len(body)), 3, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef}
	withExt = append(withExt, body...)
	f, err := ReadFrame(bytes.NewReader(withExt), 0)
	require.NoError(t, err)
	require.Equal(t, Frame{Channel: 4, Body: &End{}}, f)
}

func TestReadFrameSequenceThenEOF(t *testing.T) {
	t.Parallel()
	var stream []byte
	var err error
	for _, f := range []Frame{{Body: &Close{}}, {}, {Channel: 2, Body: &End{}}} {
		stream, err = AppendFrame(stream, f)
		require.NoError(t, err)
	}
	r := &chunkReader{data: stream, chunk: 1}
	var got []any
	for {
		f, err := ReadFrame(r, 0)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, f.Body)
	}
	require.Equal(t, []any{&Close{}, nil, &End{}}, got)
}

func TestReadFrameErrors(t *testing.T) {
	t.Parallel()
	transfer, err := AppendFrame(nil, Frame{Body: &Transfer{Handle: 1}, Payload: []byte{1, 2, 3}})
	require.NoError(t, err)
	openFrame, err := AppendFrame(nil, Frame{Body: &Open{ContainerID: "c"}})
	require.NoError(t, err)
	withTrailing := append(append([]byte{}, openFrame...), 0x40)
	withTrailing[3]++
	saslInAMQP := append([]byte{}, mustFrame(t, Frame{Type: FrameTypeSASL, Body: &SASLOutcome{}})...)
	saslInAMQP[5] = FrameTypeAMQP

	tests := []struct {
		name    string
		in      []byte
		max     uint32
		wantIs  error
		wantMsg string
	}{
		{"size below header", []byte{0, 0, 0, 7, 2, 0, 0, 0}, 0, ErrMalformed, "smaller than its header"},
		{"doff below 2", []byte{0, 0, 0, 8, 1, 0, 0, 0}, 0, ErrMalformed, "data offset 1"},
		{"doff beyond size", []byte{0, 0, 0, 8, 3, 0, 0, 0}, 0, ErrMalformed, "beyond frame size"},
		{"unknown type", []byte{0, 0, 0, 8, 2, 9, 0, 0}, 0, ErrMalformed, "unknown frame type"},
		{"too large", []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}, 65536, ErrFrameTooLarge, "4294967295 > 65536"},
		{"default max is 512", []byte{0, 0, 2, 1, 2, 0, 0, 0}, 0, ErrFrameTooLarge, "513 > 512"},
		{"truncated header", []byte{0, 0, 0}, 0, io.ErrUnexpectedEOF, "read frame header"},
		{"truncated body", transfer[:len(transfer)-1], 0, io.ErrUnexpectedEOF, "read frame body"},
		{"payload after open", withTrailing, 0, ErrMalformed, "bytes after *amqpwire.Open"},
		{"sasl body in amqp frame", saslInAMQP, 0, ErrMalformed, "in a frame of type 0"},
		{"garbage body", []byte{0, 0, 0, 9, 2, 0, 0, 0, 0xff}, 0, ErrMalformed, "unknown constructor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadFrame(bytes.NewReader(tt.in), tt.max)
			require.ErrorIs(t, err, tt.wantIs)
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}

func mustFrame(t *testing.T, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	require.NoError(t, err)
	return b
}

func TestAppendFrameErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Frame
		want string
	}{
		{"payload without performative", Frame{Payload: []byte{1}}, "payload without performative"},
		{"payload after flow", Frame{Body: &Flow{}, Payload: []byte{1}}, "payload after *amqpwire.Flow"},
		{"not a performative", Frame{Body: &Source{}}, "not a performative"},
		{"delivery state is not a performative", Frame{Body: &Accepted{}}, "not a performative"},
		{"arbitrary value", Frame{Body: "open"}, "not a performative"},
		{"sasl in amqp frame", Frame{Body: &SASLInit{Mechanism: "ANONYMOUS"}}, "in a frame of type 0"},
		{"amqp in sasl frame", Frame{Type: FrameTypeSASL, Body: &Open{}}, "in a frame of type 1"},
		{"unknown frame type", Frame{Type: 7}, "unknown frame type"},
		{"unencodable property", Frame{Body: &Open{ContainerID: "c", Properties: map[Symbol]any{"k": struct{}{}}}}, "field properties"},
		{"empty mechanisms", Frame{Type: FrameTypeSASL, Body: &SASLMechanisms{}}, "no mechanisms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := AppendFrame([]byte{9}, tt.f)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, []byte{9}, out)
		})
	}
}

func TestSplitSections(t *testing.T) {
	t.Parallel()
	msg := encodeTestMessage(t, "body")
	secs, err := SplitSections(msg)
	require.NoError(t, err)
	require.Len(t, secs, 6)
	require.Equal(t, 0, secs[0].Start)
	for i := 1; i < len(secs); i++ {
		require.Equal(t, secs[i-1].End, secs[i].Start)
	}
	require.Equal(t, len(msg), secs[5].End)

	// A broker rewrites the header and keeps the rest byte for byte.
	newHeader, err := AppendValue(nil, Described{Descriptor: SectionHeader, Value: []any{true, nil, nil, nil, uint32(4)}})
	require.NoError(t, err)
	rewritten := append(newHeader, msg[secs[0].End:]...)
	secs2, err := SplitSections(rewritten)
	require.NoError(t, err)
	require.Equal(t, secs[5].Bytes(msg), secs2[5].Bytes(rewritten))

	symbolic, err := AppendValue(nil, Described{Descriptor: Symbol("amqp:amqp-value:*"), Value: int32(1)})
	require.NoError(t, err)
	secs3, err := SplitSections(symbolic)
	require.NoError(t, err)
	require.Equal(t, []Section{{Code: SectionAMQPValue, Start: 0, End: len(symbolic)}}, secs3)

	empty, err := SplitSections(nil)
	require.NoError(t, err)
	require.Empty(t, empty)

	errTests := []struct {
		name string
		in   []byte
		want string
	}{
		{"not described", []byte{0xa1, 0}, "want a described section"},
		{"unknown code", []byte{0x00, 0x53, 0x10, 0x45}, "unknown section descriptor"},
		{"unknown symbol", []byte{0x00, 0xa3, 1, 'x', 0x45}, "unknown section descriptor"},
		{"truncated data", []byte{0x00, 0x53, 0x75, 0xa0, 5, 1}, "truncated"},
		{"truncated data32", []byte{0x00, 0x53, 0x75, 0xb0, 0, 0, 1, 0, 1}, "truncated"},
		{"truncated map", []byte{0x00, 0x53, 0x74, 0xc1, 9, 0}, "truncated compound"},
		{"missing value", []byte{0x00, 0x53, 0x75}, "missing constructor"},
	}
	for _, tt := range errTests {
		_, err := SplitSections(tt.in)
		require.ErrorIs(t, err, ErrMalformed, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
}
