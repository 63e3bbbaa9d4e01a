package amqpwire

import (
	"bytes"
	"testing"
)

func benchTransferFrame() Frame {
	payload := bytes.Repeat([]byte{0x5a}, 1024)
	return Frame{Channel: 1, Body: &Transfer{
		Handle: 0, DeliveryID: ptr[uint32](123456), DeliveryTag: testUUID[:],
		MessageFormat: ptr[uint32](0), Settled: ptr(false),
	}, Payload: payload}
}

func BenchmarkAppendTransferFrame1KB(b *testing.B) {
	f := benchTransferFrame()
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	b.SetBytes(int64(len(f.Payload)))
	for b.Loop() {
		var err error
		buf, err = AppendFrame(buf[:0], f)
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadTransferFrame1KB(b *testing.B) {
	enc, err := AppendFrame(nil, benchTransferFrame())
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(enc)
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		r.Reset(enc)
		f, err := ReadFrame(r, 65536)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Payload) != 1024 {
			b.Fatal("short payload")
		}
	}
}

func BenchmarkSplitSections(b *testing.B) {
	var msg []byte
	for _, s := range []Described{
		{Descriptor: SectionHeader, Value: []any{true}},
		{Descriptor: SectionMessageAnnotations, Value: map[Symbol]any{"x-opt-sequence-number": int64(12)}},
		{Descriptor: SectionProperties, Value: []any{"m-1"}},
		{Descriptor: SectionData, Value: bytes.Repeat([]byte{1}, 1024)},
	} {
		var err error
		if msg, err = AppendValue(msg, s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SplitSections(msg); err != nil {
			b.Fatal(err)
		}
	}
}
