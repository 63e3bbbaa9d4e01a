package amqpwire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzDecodeValue checks that decoding never panics and that whatever decodes
// re-encodes to bytes that decode to the same value and re-encode identically.
func FuzzDecodeValue(f *testing.F) {
	for _, seed := range fuzzValueSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// Neither may panic, whatever the input.
		_, _, _ = DecodePerformative(in)
		_, _ = SplitSections(in)

		v, n, err := DecodeValue(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if n <= 0 || n > len(in) {
			t.Fatalf("consumed %d of %d bytes", n, len(in))
		}
		enc1, err := AppendValue(nil, v)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", v, err)
		}
		v2, n2, err := DecodeValue(enc1)
		if err != nil {
			t.Fatalf("decode re-encoded %x: %v", enc1, err)
		}
		if n2 != len(enc1) {
			t.Fatalf("re-encoded value used %d of %d bytes", n2, len(enc1))
		}
		enc2, err := AppendValue(nil, v2)
		if err != nil {
			t.Fatalf("re-encode again: %v", err)
		}
		if !bytes.Equal(enc1, enc2) {
			t.Fatalf("encoding not stable:\n%x\n%x", enc1, enc2)
		}
		// SplitSections must not panic either, and must agree on sizes.
		if secs, err := SplitSections(in[:n]); err == nil && len(secs) == 1 && secs[0].End != n {
			t.Fatalf("section end %d, value size %d", secs[0].End, n)
		}
	})
}

// FuzzReadFrame feeds arbitrary bytes to ReadFrame, whole and through a
// reader that returns a few bytes at a time, and checks both agree and that
// decoded frames re-encode to frames that decode the same.
func FuzzReadFrame(f *testing.F) {
	for _, seed := range fuzzFrameSeeds(f) {
		f.Add(seed, uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		whole, errWhole := readAllFrames(bytes.NewReader(in))
		split, errSplit := readAllFrames(&chunkReader{data: in, chunk: int(chunk%7) + 1})
		if (errWhole == nil) != (errSplit == nil) || len(whole) != len(split) {
			t.Fatalf("whole read: %d frames, %v; chunked read: %d frames, %v", len(whole), errWhole, len(split), errSplit)
		}
		for i, fr := range whole {
			enc, err := AppendFrame(nil, fr)
			if err != nil {
				t.Fatalf("re-encode frame %d (%T): %v", i, fr.Body, err)
			}
			encSplit, err := AppendFrame(nil, split[i])
			if err != nil || !bytes.Equal(enc, encSplit) {
				t.Fatalf("frame %d differs when read in chunks: %v\n%x\n%x", i, err, enc, encSplit)
			}
			back, err := ReadFrame(bytes.NewReader(enc), uint32(len(enc))+MinMaxFrameSize)
			if err != nil {
				t.Fatalf("read re-encoded frame %d: %v", i, err)
			}
			enc2, err := AppendFrame(nil, back)
			if err != nil {
				t.Fatalf("re-encode frame %d again: %v", i, err)
			}
			if !bytes.Equal(enc, enc2) {
				t.Fatalf("frame encoding not stable:\n%x\n%x", enc, enc2)
			}
		}
	})
}

func readAllFrames(r io.Reader) ([]Frame, error) {
	var frames []Frame
	for {
		fr, err := ReadFrame(r, 4096)
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, fr)
	}
}

// chunkReader returns at most chunk bytes per Read, as a slow socket does.
type chunkReader struct {
	data  []byte
	chunk int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.chunk, len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func fuzzValueSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, v := range []any{
		nil, true, uint32(300), int64(-5), "str", Symbol("sym"), []byte{1}, testUUID,
		[]any{uint64(1), map[any]any{"k": Described{Descriptor: uint64(0x77), Value: "v"}}},
		SymbolArray("a", "b"), LongArray(1, 2), Decimal{Code: 0x74, Bytes: []byte{1, 2, 3, 4}},
	} {
		b, err := AppendValue(nil, v)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

func fuzzFrameSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, tt := range roundTripBodies() {
		b, err := AppendFrame(nil, Frame{Type: tt.typ, Body: tt.body, Payload: tt.extra})
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}
