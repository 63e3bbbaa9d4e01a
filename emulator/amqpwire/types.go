package amqpwire

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error that reports input which is not
// valid AMQP 1.0 (truncated, wrong constructor, bad size, too deep, …).
var ErrMalformed = errors.New("amqpwire: malformed input")

// MaxDepth is the deepest nesting of compound and described values that
// DecodeValue and AppendValue accept.
const MaxDepth = 32

// Symbol is the AMQP symbol type: an ASCII string used for names and keys.
type Symbol string

// Char is the AMQP char type: a single Unicode code point (UTF-32 on the wire).
type Char rune

// UUID is the AMQP uuid type: 16 bytes in RFC 4122 (network) order.
type UUID [16]byte

// String formats u as 8-4-4-4-12 lowercase hex.
func (u UUID) String() string {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return string(buf[:])
}

// Described is an AMQP described value. Descriptor is a uint64 (numeric
// descriptor) or a Symbol (symbolic descriptor).
type Described struct {
	Descriptor any
	Value      any
}

// Decimal holds an AMQP decimal32 (Code 0x74, 4 bytes), decimal64 (0x84, 8
// bytes) or decimal128 (0x94, 16 bytes) value verbatim; the package does not
// interpret decimals, it only carries them.
type Decimal struct {
	Code  byte
	Bytes []byte
}

// Array is an AMQP array: values that share one element constructor.
//
// Code is the element constructor, for example 0xa3 (sym8) or 0xb3 (sym32) for
// symbols, 0x81 for long, 0x98 for uuid, 0x83 for timestamp, 0xc1/0xd1 for maps.
// When encoding, a compact Code (sym8, str8, vbin8, smallint, smalllong,
// smalluint, smallulong, uint0, ulong0, list8, map8, array8) is widened to its
// 32-bit form if an item does not fit; Code 0 means "choose from the first
// item's Go type". Decoding sets Code to the constructor found on the wire.
//
// Descriptor is nil for a plain array. For an array of described values it
// holds the shared descriptor, and Items hold the undescribed values.
type Array struct {
	Code       byte
	Descriptor any
	Items      []any
}

// Element constructors used by the helper constructors.
const (
	codeNull       = 0x40
	codeTrue       = 0x41
	codeFalse      = 0x42
	codeUint0      = 0x43
	codeUlong0     = 0x44
	codeList0      = 0x45
	codeUbyte      = 0x50
	codeByte       = 0x51
	codeSmallUint  = 0x52
	codeSmallUlong = 0x53
	codeSmallInt   = 0x54
	codeSmallLong  = 0x55
	codeBool       = 0x56
	codeUshort     = 0x60
	codeShort      = 0x61
	codeUint       = 0x70
	codeInt        = 0x71
	codeFloat      = 0x72
	codeChar       = 0x73
	codeDecimal32  = 0x74
	codeUlong      = 0x80
	codeLong       = 0x81
	codeDouble     = 0x82
	codeTimestamp  = 0x83
	codeDecimal64  = 0x84
	codeDecimal128 = 0x94
	codeUUID       = 0x98
	codeVbin8      = 0xa0
	codeStr8       = 0xa1
	codeSym8       = 0xa3
	codeVbin32     = 0xb0
	codeStr32      = 0xb1
	codeSym32      = 0xb3
	codeList8      = 0xc0
	codeMap8       = 0xc1
	codeList32     = 0xd0
	codeMap32      = 0xd1
	codeArray8     = 0xe0
	codeArray32    = 0xf0
	codeDescribed  = 0x00
)

// SymbolArray returns an array of symbols (encoded with sym8 elements when
// they all fit, as go-amqp does).
func SymbolArray(s ...Symbol) Array {
	items := make([]any, len(s))
	for i, v := range s {
		items[i] = v
	}
	return Array{Code: codeSym8, Items: items}
}

// LongArray returns an array of longs (fixed 8-byte elements).
func LongArray(v ...int64) Array {
	items := make([]any, len(v))
	for i, x := range v {
		items[i] = x
	}
	return Array{Code: codeLong, Items: items}
}

// UUIDArray returns an array of uuids.
func UUIDArray(v ...UUID) Array {
	items := make([]any, len(v))
	for i, x := range v {
		items[i] = x
	}
	return Array{Code: codeUUID, Items: items}
}

// malformed returns an error wrapping ErrMalformed.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}
