package amqpwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// appender is implemented by the package's structured types (performatives,
// delivery states, Source, Target, Error) so AppendValue can encode them
// wherever they appear.
type appender interface {
	appendAMQP(dst []byte, depth int) ([]byte, error)
}

// AppendValue appends the AMQP encoding of v to dst and returns the extended
// slice. See the package documentation for the Go types it accepts. On error
// the returned slice is dst unchanged in length.
func AppendValue(dst []byte, v any) ([]byte, error) {
	out, err := appendValue(dst, v, 0)
	if err != nil {
		return dst, err
	}
	return out, nil
}

func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, fmt.Errorf("amqpwire: encode: nesting deeper than %d", MaxDepth)
	}
	switch v := v.(type) {
	case nil:
		return append(dst, codeNull), nil
	case bool:
		if v {
			return append(dst, codeTrue), nil
		}
		return append(dst, codeFalse), nil
	case uint8:
		return append(dst, codeUbyte, v), nil
	case uint16:
		return binary.BigEndian.AppendUint16(append(dst, codeUshort), v), nil
	case uint32:
		return appendUint(dst, v), nil
	case uint64:
		return appendUlong(dst, v), nil
	case uint:
		return appendUlong(dst, uint64(v)), nil
	case int8:
		return append(dst, codeByte, byte(v)), nil
	case int16:
		return binary.BigEndian.AppendUint16(append(dst, codeShort), uint16(v)), nil
	case int32:
		if v >= math.MinInt8 && v <= math.MaxInt8 {
			return append(dst, codeSmallInt, byte(int8(v))), nil
		}
		return binary.BigEndian.AppendUint32(append(dst, codeInt), uint32(v)), nil
	case int64:
		return appendLong(dst, v), nil
	case int:
		return appendLong(dst, int64(v)), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, codeFloat), math.Float32bits(v)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, codeDouble), math.Float64bits(v)), nil
	case Char:
		return binary.BigEndian.AppendUint32(append(dst, codeChar), uint32(v)), nil
	case time.Time:
		return binary.BigEndian.AppendUint64(append(dst, codeTimestamp), uint64(v.UnixMilli())), nil
	case UUID:
		return append(append(dst, codeUUID), v[:]...), nil
	case []byte:
		return appendVariable(dst, codeVbin8, codeVbin32, v), nil
	case string:
		return appendVariable(dst, codeStr8, codeStr32, v), nil
	case Symbol:
		return appendVariable(dst, codeSym8, codeSym32, v), nil
	case Decimal:
		return appendDecimal(dst, v)
	case []any:
		return appendList(dst, v, depth)
	case map[any]any:
		return appendAnyMap(dst, v, depth)
	case map[Symbol]any:
		return appendStringKeyMap(dst, v, depth)
	case map[string]any:
		return appendStringKeyMap(dst, v, depth)
	case []Symbol:
		return appendArray(dst, SymbolArray(v...), depth)
	case Array:
		return appendArray(dst, v, depth)
	case *Array:
		if v == nil {
			return append(dst, codeNull), nil
		}
		return appendArray(dst, *v, depth)
	case Described:
		return appendDescribed(dst, v.Descriptor, v.Value, depth)
	case appender:
		return v.appendAMQP(dst, depth)
	default:
		return dst, fmt.Errorf("amqpwire: encode: unsupported Go type %T", v)
	}
}

func appendUint(dst []byte, v uint32) []byte {
	switch {
	case v == 0:
		return append(dst, codeUint0)
	case v <= math.MaxUint8:
		return append(dst, codeSmallUint, byte(v))
	default:
		return binary.BigEndian.AppendUint32(append(dst, codeUint), v)
	}
}

func appendUlong(dst []byte, v uint64) []byte {
	switch {
	case v == 0:
		return append(dst, codeUlong0)
	case v <= math.MaxUint8:
		return append(dst, codeSmallUlong, byte(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, codeUlong), v)
	}
}

func appendLong(dst []byte, v int64) []byte {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		return append(dst, codeSmallLong, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint64(append(dst, codeLong), uint64(v))
}

func appendVariable[T string | []byte | Symbol](dst []byte, code8, code32 byte, v T) []byte {
	if len(v) <= math.MaxUint8 {
		dst = append(dst, code8, byte(len(v)))
	} else {
		dst = binary.BigEndian.AppendUint32(append(dst, code32), uint32(len(v)))
	}
	return append(dst, v...)
}

func decimalSize(code byte) int {
	switch code {
	case codeDecimal32:
		return 4
	case codeDecimal64:
		return 8
	case codeDecimal128:
		return 16
	}
	return -1
}

func appendDecimal(dst []byte, d Decimal) ([]byte, error) {
	if n := decimalSize(d.Code); n < 0 || len(d.Bytes) != n {
		return dst, fmt.Errorf("amqpwire: encode: decimal with code %#02x and %d bytes", d.Code, len(d.Bytes))
	}
	return append(append(dst, d.Code), d.Bytes...), nil
}

func appendDescribed(dst []byte, descriptor, value any, depth int) ([]byte, error) {
	switch descriptor.(type) {
	case uint64, Symbol:
	default:
		return dst, fmt.Errorf("amqpwire: encode: descriptor must be uint64 or Symbol, got %T", descriptor)
	}
	dst = append(dst, codeDescribed)
	dst, err := appendValue(dst, descriptor, depth+1)
	if err != nil {
		return dst, err
	}
	return appendValue(dst, value, depth+1)
}

// compoundHeader is the room reserved in front of a compound value's content:
// the largest header (constructor, 4-byte size, 4-byte count).
const compoundHeader = 9

// finishCompound writes the header of a compound value whose content (after
// the count) was appended at dst[start+compoundHeader:], choosing the 8-bit
// form when size and count fit, and returns dst without the unused room.
func finishCompound(dst []byte, start int, code8, code32 byte, count int) ([]byte, error) {
	content := len(dst) - start - compoundHeader
	if count <= math.MaxUint8 && content+1 <= math.MaxUint8 {
		dst[start] = code8
		dst[start+1] = byte(content + 1)
		dst[start+2] = byte(count)
		copy(dst[start+3:], dst[start+compoundHeader:])
		return dst[:len(dst)-(compoundHeader-3)], nil
	}
	if uint64(content)+4 > math.MaxUint32 || uint64(count) > math.MaxUint32 {
		return dst, fmt.Errorf("amqpwire: encode: compound value of %d bytes is too large", content)
	}
	dst[start] = code32
	binary.BigEndian.PutUint32(dst[start+1:], uint32(content+4))
	binary.BigEndian.PutUint32(dst[start+5:], uint32(count))
	return dst, nil
}

func reserveHeader(dst []byte) ([]byte, int) {
	start := len(dst)
	return append(dst, make([]byte, compoundHeader)...), start
}

func appendList(dst []byte, items []any, depth int) ([]byte, error) {
	if len(items) == 0 {
		return append(dst, codeList0), nil
	}
	dst, start := reserveHeader(dst)
	var err error
	for i, it := range items {
		if dst, err = appendValue(dst, it, depth+1); err != nil {
			return dst[:start], fmt.Errorf("list item %d: %w", i, err)
		}
	}
	return finishCompound(dst, start, codeList8, codeList32, len(items))
}

func appendStringKeyMap[K string | Symbol](dst []byte, m map[K]any, depth int) ([]byte, error) {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst, start := reserveHeader(dst)
	var err error
	for _, k := range keys {
		dst, _ = appendValue(dst, k, depth+1) // strings and symbols always encode
		if dst, err = appendValue(dst, m[k], depth+1); err != nil {
			return dst[:start], fmt.Errorf("map value for key %q: %w", string(k), err)
		}
	}
	return finishCompound(dst, start, codeMap8, codeMap32, 2*len(m))
}

// appendAnyMap encodes m with its keys sorted by their encoded bytes, so the
// output does not depend on Go's map iteration order.
func appendAnyMap(dst []byte, m map[any]any, depth int) ([]byte, error) {
	type entry struct {
		key []byte
		val any
	}
	entries := make([]entry, 0, len(m))
	for k, v := range m {
		kb, err := appendValue(nil, k, depth+1)
		if err != nil {
			return dst, fmt.Errorf("map key %v: %w", k, err)
		}
		entries = append(entries, entry{key: kb, val: v})
	}
	sort.Slice(entries, func(i, j int) bool { return bytes.Compare(entries[i].key, entries[j].key) < 0 })
	dst, start := reserveHeader(dst)
	var err error
	for _, e := range entries {
		dst = append(dst, e.key...)
		if dst, err = appendValue(dst, e.val, depth+1); err != nil {
			return dst[:start], fmt.Errorf("map value: %w", err)
		}
	}
	return finishCompound(dst, start, codeMap8, codeMap32, 2*len(m))
}

// normalizeItem maps the convenience Go types onto the canonical ones so array
// items can be checked against an element constructor.
func normalizeItem(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case uint:
		return uint64(x)
	case map[Symbol]any:
		m := make(map[any]any, len(x))
		for k, val := range x {
			m[k] = val
		}
		return m
	case map[string]any:
		m := make(map[any]any, len(x))
		for k, val := range x {
			m[k] = val
		}
		return m
	case []Symbol:
		return SymbolArray(x...)
	case *Array:
		if x != nil {
			return *x
		}
	}
	return v
}

// defaultElementCode picks the compact element constructor for an item's Go type.
func defaultElementCode(v any) (byte, bool) {
	switch x := v.(type) {
	case nil:
		return codeNull, true
	case bool:
		return codeBool, true
	case uint8:
		return codeUbyte, true
	case uint16:
		return codeUshort, true
	case uint32:
		return codeSmallUint, true
	case uint64:
		return codeSmallUlong, true
	case int8:
		return codeByte, true
	case int16:
		return codeShort, true
	case int32:
		return codeSmallInt, true
	case int64:
		return codeLong, true
	case float32:
		return codeFloat, true
	case float64:
		return codeDouble, true
	case Char:
		return codeChar, true
	case time.Time:
		return codeTimestamp, true
	case UUID:
		return codeUUID, true
	case Decimal:
		return x.Code, true
	case []byte:
		return codeVbin8, true
	case string:
		return codeStr8, true
	case Symbol:
		return codeSym8, true
	case []any:
		return codeList32, true
	case map[any]any:
		return codeMap32, true
	case Array:
		return codeArray32, true
	}
	return 0, false
}

// itemFits reports whether item can be encoded with the element constructor
// code without widening it.
func itemFits(code byte, item any) bool {
	switch code {
	case codeTrue:
		b, ok := item.(bool)
		return ok && b
	case codeFalse:
		b, ok := item.(bool)
		return ok && !b
	case codeUint0:
		x, ok := item.(uint32)
		return ok && x == 0
	case codeUlong0:
		x, ok := item.(uint64)
		return ok && x == 0
	case codeSmallUint:
		x, ok := item.(uint32)
		return ok && x <= math.MaxUint8
	case codeSmallUlong:
		x, ok := item.(uint64)
		return ok && x <= math.MaxUint8
	case codeSmallInt:
		x, ok := item.(int32)
		return ok && x >= math.MinInt8 && x <= math.MaxInt8
	case codeSmallLong:
		x, ok := item.(int64)
		return ok && x >= math.MinInt8 && x <= math.MaxInt8
	case codeVbin8:
		x, ok := item.([]byte)
		return ok && len(x) <= math.MaxUint8
	case codeStr8:
		x, ok := item.(string)
		return ok && len(x) <= math.MaxUint8
	case codeSym8:
		x, ok := item.(Symbol)
		return ok && len(x) <= math.MaxUint8
	case codeList0:
		x, ok := item.([]any)
		return ok && len(x) == 0
	case codeList8, codeMap8, codeArray8:
		// Compound items inside arrays always use the 32-bit form.
		return false
	}
	return true
}

func widenCode(code byte) byte {
	switch code {
	case codeTrue, codeFalse:
		return codeBool
	case codeUint0, codeSmallUint:
		return codeUint
	case codeUlong0, codeSmallUlong:
		return codeUlong
	case codeSmallInt:
		return codeInt
	case codeSmallLong:
		return codeLong
	case codeVbin8:
		return codeVbin32
	case codeStr8:
		return codeStr32
	case codeSym8:
		return codeSym32
	case codeList0, codeList8:
		return codeList32
	case codeMap8:
		return codeMap32
	case codeArray8:
		return codeArray32
	}
	return code
}

func appendArray(dst []byte, a Array, depth int) ([]byte, error) {
	items := make([]any, len(a.Items))
	for i, it := range a.Items {
		items[i] = normalizeItem(it)
	}
	code := a.Code
	if code == 0 {
		code = codeSym8
		if len(items) > 0 {
			c, ok := defaultElementCode(items[0])
			if !ok {
				return dst, fmt.Errorf("amqpwire: encode: unsupported array item type %T", items[0])
			}
			code = c
		}
	}
	for _, it := range items {
		if !itemFits(code, it) {
			code = widenCode(code)
			break
		}
	}
	dst, start := reserveHeader(dst)
	if a.Descriptor != nil {
		switch a.Descriptor.(type) {
		case uint64, Symbol:
		default:
			return dst[:start], fmt.Errorf("amqpwire: encode: array descriptor must be uint64 or Symbol, got %T", a.Descriptor)
		}
		dst = append(dst, codeDescribed)
		dst, _ = appendValue(dst, a.Descriptor, depth+1) // uint64 and Symbol always encode
	}
	dst = append(dst, code)
	var err error
	for i, it := range items {
		if dst, err = appendElement(dst, code, it, depth+1); err != nil {
			return dst[:start], fmt.Errorf("array item %d: %w", i, err)
		}
	}
	return finishCompound(dst, start, codeArray8, codeArray32, len(items))
}

// appendElement appends the body of item (its encoding without constructor)
// for the element constructor code of an array.
func appendElement(dst []byte, code byte, item any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, fmt.Errorf("amqpwire: encode: nesting deeper than %d", MaxDepth)
	}
	mismatch := func() ([]byte, error) {
		return dst, fmt.Errorf("amqpwire: encode: %T does not match array element constructor %#02x", item, code)
	}
	switch code {
	case codeNull:
		if item != nil {
			return mismatch()
		}
		return dst, nil
	case codeTrue, codeFalse, codeUint0, codeUlong0:
		if !itemFits(code, item) {
			return mismatch()
		}
		return dst, nil
	case codeList0:
		if l, ok := item.([]any); !ok || len(l) != 0 {
			return mismatch()
		}
		return dst, nil
	case codeBool:
		b, ok := item.(bool)
		if !ok {
			return mismatch()
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case codeUbyte:
		x, ok := item.(uint8)
		if !ok {
			return mismatch()
		}
		return append(dst, x), nil
	case codeByte:
		x, ok := item.(int8)
		if !ok {
			return mismatch()
		}
		return append(dst, byte(x)), nil
	case codeSmallUint:
		x, ok := item.(uint32)
		if !ok {
			return mismatch()
		}
		return append(dst, byte(x)), nil
	case codeSmallUlong:
		x, ok := item.(uint64)
		if !ok {
			return mismatch()
		}
		return append(dst, byte(x)), nil
	case codeSmallInt:
		x, ok := item.(int32)
		if !ok {
			return mismatch()
		}
		return append(dst, byte(int8(x))), nil
	case codeSmallLong:
		x, ok := item.(int64)
		if !ok {
			return mismatch()
		}
		return append(dst, byte(int8(x))), nil
	case codeUshort:
		x, ok := item.(uint16)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint16(dst, x), nil
	case codeShort:
		x, ok := item.(int16)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint16(dst, uint16(x)), nil
	case codeUint:
		x, ok := item.(uint32)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint32(dst, x), nil
	case codeInt:
		x, ok := item.(int32)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint32(dst, uint32(x)), nil
	case codeFloat:
		x, ok := item.(float32)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint32(dst, math.Float32bits(x)), nil
	case codeChar:
		x, ok := item.(Char)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint32(dst, uint32(x)), nil
	case codeUlong:
		x, ok := item.(uint64)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint64(dst, x), nil
	case codeLong:
		x, ok := item.(int64)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint64(dst, uint64(x)), nil
	case codeDouble:
		x, ok := item.(float64)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(x)), nil
	case codeTimestamp:
		x, ok := item.(time.Time)
		if !ok {
			return mismatch()
		}
		return binary.BigEndian.AppendUint64(dst, uint64(x.UnixMilli())), nil
	case codeDecimal32, codeDecimal64, codeDecimal128:
		x, ok := item.(Decimal)
		if !ok || x.Code != code || len(x.Bytes) != decimalSize(code) {
			return mismatch()
		}
		return append(dst, x.Bytes...), nil
	case codeUUID:
		x, ok := item.(UUID)
		if !ok {
			return mismatch()
		}
		return append(dst, x[:]...), nil
	case codeVbin8, codeVbin32:
		x, ok := item.([]byte)
		if !ok {
			return mismatch()
		}
		return appendVariableBody(dst, code == codeVbin8, x), nil
	case codeStr8, codeStr32:
		x, ok := item.(string)
		if !ok {
			return mismatch()
		}
		return appendVariableBody(dst, code == codeStr8, x), nil
	case codeSym8, codeSym32:
		x, ok := item.(Symbol)
		if !ok {
			return mismatch()
		}
		return appendVariableBody(dst, code == codeSym8, x), nil
	case codeList32, codeMap32, codeArray32:
		start := len(dst)
		var err error
		switch x := item.(type) {
		case []any:
			if code != codeList32 {
				return mismatch()
			}
			dst, err = appendList(dst, x, depth)
		case map[any]any:
			if code != codeMap32 {
				return mismatch()
			}
			dst, err = appendAnyMap(dst, x, depth)
		case Array:
			if code != codeArray32 {
				return mismatch()
			}
			dst, err = appendArray(dst, x, depth)
		default:
			return mismatch()
		}
		if err != nil {
			return dst[:start], err
		}
		return forceWide(dst, start), nil
	}
	return dst, fmt.Errorf("amqpwire: encode: unsupported array element constructor %#02x", code)
}

func appendVariableBody[T string | []byte | Symbol](dst []byte, short bool, v T) []byte {
	if short {
		dst = append(dst, byte(len(v)))
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	}
	return append(dst, v...)
}

// forceWide rewrites the compound value encoded at dst[start:] (with its
// constructor) into its 32-bit form without the constructor, the element body
// required by an array whose constructor is list32, map32 or array32.
func forceWide(dst []byte, start int) []byte {
	enc := dst[start:]
	var size, count uint32
	var content []byte
	switch enc[0] {
	case codeList0:
		size, count, content = 4, 0, nil
	case codeList8, codeMap8, codeArray8:
		count = uint32(enc[2])
		content = enc[3:]
		size = uint32(len(content)) + 4
	default: // already 32-bit: drop the constructor
		copy(enc, enc[1:])
		return dst[:len(dst)-1]
	}
	tmp := make([]byte, 0, 8+len(content))
	tmp = binary.BigEndian.AppendUint32(tmp, size)
	tmp = binary.BigEndian.AppendUint32(tmp, count)
	tmp = append(tmp, content...)
	return append(dst[:start], tmp...)
}
