package amqpwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Protocol IDs of the protocol header.
const (
	ProtocolAMQP uint8 = 0
	ProtocolTLS  uint8 = 2
	ProtocolSASL uint8 = 3
)

// Frame types.
const (
	FrameTypeAMQP uint8 = 0
	FrameTypeSASL uint8 = 1
)

// MinMaxFrameSize is the smallest max-frame-size a peer may announce, and
// the limit that applies before the open frames are exchanged.
const MinMaxFrameSize = 512

// ErrFrameTooLarge is wrapped by ReadFrame when a frame header announces more
// bytes than the negotiated maximum frame size.
var ErrFrameTooLarge = errors.New("amqpwire: frame larger than max-frame-size")

// ProtocolHeader is the 8-byte header ("AMQP", protocol id, version) that
// opens the AMQP and SASL layers of a connection.
type ProtocolHeader struct {
	ProtocolID uint8 // 0 AMQP, 2 TLS, 3 SASL
	Major      uint8
	Minor      uint8
	Revision   uint8
}

// ReadProtocolHeader reads an 8-byte protocol header from r. It fails if the
// bytes do not start with "AMQP".
func ReadProtocolHeader(r io.Reader) (ProtocolHeader, error) {
	var buf [8]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return ProtocolHeader{}, fmt.Errorf("read protocol header: %w", err)
	}
	if string(buf[:4]) != "AMQP" {
		return ProtocolHeader{}, fmt.Errorf("read protocol header: %w", malformed("got % x, want \"AMQP\" prefix", buf[:]))
	}
	return ProtocolHeader{ProtocolID: buf[4], Major: buf[5], Minor: buf[6], Revision: buf[7]}, nil
}

// AppendProtocolHeader appends the 8 bytes of h to dst.
func AppendProtocolHeader(dst []byte, h ProtocolHeader) []byte {
	return append(dst, 'A', 'M', 'Q', 'P', h.ProtocolID, h.Major, h.Minor, h.Revision)
}

// Frame is one AMQP or SASL frame.
type Frame struct {
	Type    uint8  // FrameTypeAMQP or FrameTypeSASL
	Channel uint16 // ignored for SASL frames
	// Body is one of the performative pointers (*Open, *Transfer, …,
	// *SASLOutcome), or nil for an empty (heartbeat) frame.
	Body any
	// Payload holds the bytes after the performative: the message section
	// bytes of a Transfer. It is empty for every other performative.
	Payload []byte
}

// frameHeaderSize is the size of the fixed frame header.
const frameHeaderSize = 8

// ReadFrame reads one frame from r. maxFrameSize is the largest frame
// accepted, header included; 0 means MinMaxFrameSize (512), the limit before
// open is exchanged. The Payload of the returned frame points into a buffer
// that belongs to the frame. ReadFrame never panics on malformed input; it
// returns io.EOF only when r ends cleanly before the first byte of a frame.
func ReadFrame(r io.Reader, maxFrameSize uint32) (Frame, error) {
	if maxFrameSize == 0 {
		maxFrameSize = MinMaxFrameSize
	}
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("read frame header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[0:4])
	doff := hdr[4]
	f := Frame{Type: hdr[5], Channel: binary.BigEndian.Uint16(hdr[6:8])}
	switch {
	case size < frameHeaderSize:
		return Frame{}, fmt.Errorf("read frame: %w", malformed("frame size %d smaller than its header", size))
	case size > maxFrameSize:
		return Frame{}, fmt.Errorf("read frame: %w (%d > %d)", ErrFrameTooLarge, size, maxFrameSize)
	case doff < 2:
		return Frame{}, fmt.Errorf("read frame: %w", malformed("data offset %d smaller than 2", doff))
	case uint32(doff)*4 > size:
		return Frame{}, fmt.Errorf("read frame: %w", malformed("data offset %d beyond frame size %d", doff, size))
	case f.Type != FrameTypeAMQP && f.Type != FrameTypeSASL:
		return Frame{}, fmt.Errorf("read frame: %w", malformed("unknown frame type %d", f.Type))
	}
	rest := make([]byte, size-frameHeaderSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("read frame body (%d bytes): %w", len(rest), err)
	}
	body := rest[int(doff)*4-frameHeaderSize:] // skip the extended header
	if len(body) == 0 {
		return f, nil
	}
	perf, n, err := DecodePerformative(body)
	if err != nil {
		return Frame{}, fmt.Errorf("read frame on channel %d: %w", f.Channel, err)
	}
	if isSASL(perf) != (f.Type == FrameTypeSASL) {
		return Frame{}, fmt.Errorf("read frame: %w", malformed("%T in a frame of type %d", perf, f.Type))
	}
	f.Body = perf
	if n < len(body) {
		if _, ok := perf.(*Transfer); !ok {
			return Frame{}, fmt.Errorf("read frame: %w", malformed("%d bytes after %T", len(body)-n, perf))
		}
		f.Payload = body[n:]
	}
	return f, nil
}

func isPerformative(body any) bool {
	switch body.(type) {
	case *Open, *Begin, *Attach, *Flow, *Transfer, *Disposition, *Detach, *End, *Close:
		return true
	}
	return isSASL(body)
}

func isSASL(body any) bool {
	switch body.(type) {
	case *SASLMechanisms, *SASLInit, *SASLChallenge, *SASLResponse, *SASLOutcome:
		return true
	}
	return false
}

// AppendFrame appends the encoding of f to dst. A nil Body yields an empty
// (heartbeat) frame. Only a Transfer may carry a Payload.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if f.Type != FrameTypeAMQP && f.Type != FrameTypeSASL {
		return dst, fmt.Errorf("amqpwire: append frame: unknown frame type %d", f.Type)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 2, f.Type, byte(f.Channel>>8), byte(f.Channel))
	switch body := f.Body.(type) {
	case nil:
		if len(f.Payload) > 0 {
			return dst[:start], errors.New("amqpwire: append frame: payload without performative")
		}
	case appender:
		if isSASL(body) != (f.Type == FrameTypeSASL) {
			return dst[:start], fmt.Errorf("amqpwire: append frame: %T in a frame of type %d", body, f.Type)
		}
		if _, ok := body.(*Transfer); !ok && len(f.Payload) > 0 {
			return dst[:start], fmt.Errorf("amqpwire: append frame: payload after %T", body)
		}
		if !isPerformative(body) {
			return dst[:start], fmt.Errorf("amqpwire: append frame: %T is not a performative", body)
		}
		var err error
		if dst, err = body.appendAMQP(dst, 0); err != nil {
			return dst[:start], fmt.Errorf("amqpwire: append frame: %w", err)
		}
		dst = append(dst, f.Payload...)
	default:
		return dst[:start], fmt.Errorf("amqpwire: append frame: %T is not a performative", body)
	}
	size := len(dst) - start
	if uint64(size) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("amqpwire: append frame: %d bytes is too large", size)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(size))
	return dst, nil
}
