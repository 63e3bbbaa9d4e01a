package amqpwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// DecodeValue decodes the AMQP value at the start of b and reports how many
// bytes it used. Binary values are copied, so the result never aliases b.
// Malformed input yields an error wrapping ErrMalformed, never a panic.
func DecodeValue(b []byte) (v any, n int, err error) {
	d := decoder{budget: len(b) + 256}
	return d.value(b, 0)
}

// decoder bounds the number of values one decode may produce: zero-width
// array elements are the only values that take no input bytes, and the budget
// stops an array of them from expanding a small input into a huge result.
type decoder struct {
	budget int
}

func (d *decoder) spend(n int) error {
	if n > d.budget {
		return malformed("input expands to too many values")
	}
	d.budget -= n
	return nil
}

func (d *decoder) value(b []byte, depth int) (any, int, error) {
	if depth > MaxDepth {
		return nil, 0, malformed("nesting deeper than %d", MaxDepth)
	}
	if len(b) == 0 {
		return nil, 0, malformed("truncated: missing constructor")
	}
	if b[0] == codeDescribed {
		desc, n1, err := d.value(b[1:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("descriptor: %w", err)
		}
		if err := checkDescriptor(desc); err != nil {
			return nil, 0, err
		}
		val, n2, err := d.value(b[1+n1:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("described value %v: %w", desc, err)
		}
		return Described{Descriptor: desc, Value: val}, 1 + n1 + n2, nil
	}
	v, n, err := d.body(b[0], b[1:], depth)
	if err != nil {
		return nil, 0, err
	}
	return v, 1 + n, nil
}

func checkDescriptor(desc any) error {
	switch desc.(type) {
	case uint64, Symbol:
		return nil
	}
	return malformed("descriptor must be ulong or symbol, got %T", desc)
}

// needValue is need for the body of a value with constructor code; it formats
// nothing unless the check fails.
func needValue(b []byte, n int, code byte) error {
	if len(b) < n {
		return malformed("truncated value %#02x: need %d bytes, have %d", code, n, len(b))
	}
	return nil
}

func need(b []byte, n int, what string) error {
	if len(b) < n {
		return malformed("truncated %s: need %d bytes, have %d", what, n, len(b))
	}
	return nil
}

// body decodes a value whose constructor code has already been read; b starts
// right after the constructor. It returns the bytes of b used.
func (d *decoder) body(code byte, b []byte, depth int) (any, int, error) {
	if err := d.spend(1); err != nil {
		return nil, 0, err
	}
	if w := fixedWidth(code); w > 0 {
		if err := needValue(b, w, code); err != nil {
			return nil, 0, err
		}
	}
	switch code {
	case codeNull:
		return nil, 0, nil
	case codeTrue:
		return true, 0, nil
	case codeFalse:
		return false, 0, nil
	case codeUint0:
		return uint32(0), 0, nil
	case codeUlong0:
		return uint64(0), 0, nil
	case codeList0:
		return []any{}, 0, nil
	case codeBool:
		switch b[0] {
		case 0:
			return false, 1, nil
		case 1:
			return true, 1, nil
		}
		return nil, 0, malformed("boolean byte %#02x", b[0])
	case codeUbyte:
		return b[0], 1, nil
	case codeByte:
		return int8(b[0]), 1, nil
	case codeSmallUint:
		return uint32(b[0]), 1, nil
	case codeSmallUlong:
		return uint64(b[0]), 1, nil
	case codeSmallInt:
		return int32(int8(b[0])), 1, nil
	case codeSmallLong:
		return int64(int8(b[0])), 1, nil
	case codeUshort:
		return binary.BigEndian.Uint16(b), 2, nil
	case codeShort:
		return int16(binary.BigEndian.Uint16(b)), 2, nil
	case codeUint:
		return binary.BigEndian.Uint32(b), 4, nil
	case codeInt:
		return int32(binary.BigEndian.Uint32(b)), 4, nil
	case codeFloat:
		return math.Float32frombits(binary.BigEndian.Uint32(b)), 4, nil
	case codeChar:
		return Char(binary.BigEndian.Uint32(b)), 4, nil
	case codeUlong:
		return binary.BigEndian.Uint64(b), 8, nil
	case codeLong:
		return int64(binary.BigEndian.Uint64(b)), 8, nil
	case codeDouble:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), 8, nil
	case codeTimestamp:
		return time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC(), 8, nil
	case codeDecimal32, codeDecimal64, codeDecimal128:
		n := decimalSize(code)
		return Decimal{Code: code, Bytes: append([]byte(nil), b[:n]...)}, n, nil
	case codeUUID:
		var u UUID
		copy(u[:], b)
		return u, 16, nil
	case codeVbin8, codeStr8, codeSym8, codeVbin32, codeStr32, codeSym32:
		return variable(code, b)
	case codeList8, codeList32:
		return d.list(code == codeList8, b, depth)
	case codeMap8, codeMap32:
		return d.mapValue(code == codeMap8, b, depth)
	case codeArray8, codeArray32:
		return d.array(code == codeArray8, b, depth)
	}
	return nil, 0, malformed("unknown constructor %#02x", code)
}

// fixedWidth returns the body size of fixed-width constructors, 0 otherwise.
func fixedWidth(code byte) int {
	switch code {
	case codeUbyte, codeByte, codeSmallUint, codeSmallUlong, codeSmallInt, codeSmallLong, codeBool:
		return 1
	case codeUshort, codeShort:
		return 2
	case codeUint, codeInt, codeFloat, codeChar, codeDecimal32:
		return 4
	case codeUlong, codeLong, codeDouble, codeTimestamp, codeDecimal64:
		return 8
	case codeDecimal128, codeUUID:
		return 16
	}
	return 0
}

func variable(code byte, b []byte) (any, int, error) {
	var size, hdr int
	if code&0xf0 == 0xa0 {
		if err := need(b, 1, "length"); err != nil {
			return nil, 0, err
		}
		size, hdr = int(b[0]), 1
	} else {
		if err := need(b, 4, "length"); err != nil {
			return nil, 0, err
		}
		size, hdr = int(binary.BigEndian.Uint32(b)), 4
	}
	if size > len(b)-hdr {
		return nil, 0, malformed("truncated %#02x value: length %d, have %d bytes", code, size, len(b)-hdr)
	}
	raw := b[hdr : hdr+size]
	switch code {
	case codeVbin8, codeVbin32:
		return append([]byte{}, raw...), hdr + size, nil
	case codeStr8, codeStr32:
		return string(raw), hdr + size, nil
	default:
		return Symbol(raw), hdr + size, nil
	}
}

// compound reads the size and count of a list, map or array body and returns
// the bytes after the count, bounded by the size, and the total bytes used.
func compound(short bool, b []byte) (count int, content []byte, used int, err error) {
	if short {
		if err := need(b, 2, "compound header"); err != nil {
			return 0, nil, 0, err
		}
		size := int(b[0])
		if size < 1 {
			return 0, nil, 0, malformed("compound size %d smaller than its count", size)
		}
		if size > len(b)-1 {
			return 0, nil, 0, malformed("truncated compound: size %d, have %d bytes", size, len(b)-1)
		}
		return int(b[1]), b[2 : 1+size], 1 + size, nil
	}
	if err := need(b, 8, "compound header"); err != nil {
		return 0, nil, 0, err
	}
	size := uint64(binary.BigEndian.Uint32(b))
	if size < 4 {
		return 0, nil, 0, malformed("compound size %d smaller than its count", size)
	}
	if size > uint64(len(b)-4) {
		return 0, nil, 0, malformed("truncated compound: size %d, have %d bytes", size, len(b)-4)
	}
	c := uint64(binary.BigEndian.Uint32(b[4:]))
	if c > math.MaxInt32 {
		return 0, nil, 0, malformed("compound count %d too large", c)
	}
	return int(c), b[8 : 4+size], 4 + int(size), nil
}

func (d *decoder) list(short bool, b []byte, depth int) (any, int, error) {
	count, content, used, err := compound(short, b)
	if err != nil {
		return nil, 0, err
	}
	if count > len(content) {
		return nil, 0, malformed("list count %d exceeds its %d bytes", count, len(content))
	}
	items := make([]any, count)
	off := 0
	for i := range items {
		v, n, err := d.value(content[off:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("list item %d: %w", i, err)
		}
		items[i] = v
		off += n
	}
	if off != len(content) {
		return nil, 0, malformed("list has %d bytes after its %d items", len(content)-off, count)
	}
	return items, used, nil
}

func (d *decoder) mapValue(short bool, b []byte, depth int) (any, int, error) {
	count, content, used, err := compound(short, b)
	if err != nil {
		return nil, 0, err
	}
	if count%2 != 0 {
		return nil, 0, malformed("map with odd element count %d", count)
	}
	if count > len(content) {
		return nil, 0, malformed("map count %d exceeds its %d bytes", count, len(content))
	}
	m := make(map[any]any, count/2)
	off := 0
	for i := 0; i < count/2; i++ {
		k, n, err := d.value(content[off:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("map key %d: %w", i, err)
		}
		off += n
		if !comparableKey(k) {
			return nil, 0, malformed("map key not comparable (%T)", k)
		}
		v, n, err := d.value(content[off:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("map value for key %v: %w", k, err)
		}
		off += n
		if _, dup := m[k]; dup {
			return nil, 0, malformed("duplicate map key %v", k)
		}
		m[k] = v
	}
	if off != len(content) {
		return nil, 0, malformed("map has %d bytes after its %d elements", len(content)-off, count)
	}
	return m, used, nil
}

// comparableKey reports whether k can be a Go map key without panicking.
func comparableKey(k any) bool {
	switch x := k.(type) {
	case []byte, []any, map[any]any, Array, Decimal:
		return false
	case Described:
		return comparableKey(x.Descriptor) && comparableKey(x.Value)
	}
	return true
}

func (d *decoder) array(short bool, b []byte, depth int) (any, int, error) {
	if depth+1 > MaxDepth {
		return nil, 0, malformed("nesting deeper than %d", MaxDepth)
	}
	count, content, used, err := compound(short, b)
	if err != nil {
		return nil, 0, err
	}
	if len(content) == 0 {
		return nil, 0, malformed("array without element constructor")
	}
	arr := Array{}
	off := 0
	if content[0] == codeDescribed {
		desc, n, err := d.value(content[1:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("array descriptor: %w", err)
		}
		if err := checkDescriptor(desc); err != nil {
			return nil, 0, err
		}
		arr.Descriptor = desc
		off = 1 + n
		if off >= len(content) {
			return nil, 0, malformed("array without element constructor")
		}
	}
	arr.Code = content[off]
	off++
	if arr.Code == codeDescribed {
		return nil, 0, malformed("nested described array element constructor")
	}
	if count > len(content)-off && count > 0 {
		// Only zero-width elements may outnumber the bytes; the decoder
		// budget bounds those.
		switch arr.Code {
		case codeNull, codeTrue, codeFalse, codeUint0, codeUlong0, codeList0:
		default:
			return nil, 0, malformed("array count %d exceeds its %d bytes", count, len(content)-off)
		}
		if err := d.spend(count); err != nil {
			return nil, 0, err
		}
		d.budget += count // body() below spends per item again
	}
	arr.Items = make([]any, count)
	for i := range arr.Items {
		v, n, err := d.body(arr.Code, content[off:], depth+1)
		if err != nil {
			return nil, 0, fmt.Errorf("array item %d: %w", i, err)
		}
		arr.Items[i] = v
		off += n
	}
	if off != len(content) {
		return nil, 0, malformed("array has %d bytes after its %d items", len(content)-off, count)
	}
	return arr, used, nil
}
