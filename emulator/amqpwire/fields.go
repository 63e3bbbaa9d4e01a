package amqpwire

import (
	"fmt"
	"time"
)

// listEncoder writes a described list field by field, keeping track of the
// last non-null field so trailing nulls can be dropped, as the spec allows and
// real peers do.
type listEncoder struct {
	buf       []byte
	start     int // offset of the reserved list header
	depth     int
	count     int
	lastEnd   int
	lastCount int
	err       error
}

func newListEncoder(dst []byte, descriptor uint64, depth int) listEncoder {
	dst = append(dst, codeDescribed)
	dst = appendUlong(dst, descriptor)
	dst, start := reserveHeader(dst)
	return listEncoder{buf: dst, start: start, depth: depth, lastEnd: len(dst)}
}

func (e *listEncoder) mark() {
	e.count++
	e.lastEnd = len(e.buf)
	e.lastCount = e.count
}

func (e *listEncoder) null() {
	e.buf = append(e.buf, codeNull)
	e.count++
}

// value encodes v (nil encodes as null).
func (e *listEncoder) value(name string, v any) {
	if e.err != nil {
		return
	}
	if v == nil {
		e.null()
		return
	}
	out, err := appendValue(e.buf, v, e.depth+2)
	if err != nil {
		e.err = fmt.Errorf("field %s: %w", name, err)
		return
	}
	e.buf = out
	e.mark()
}

func (e *listEncoder) uint32(v uint32) {
	e.buf = appendUint(e.buf, v)
	e.mark()
}

func (e *listEncoder) uint32Ptr(p *uint32) {
	if p == nil {
		e.null()
		return
	}
	e.uint32(*p)
}

// uint32Or encodes v, or null when v equals the field's default.
func (e *listEncoder) uint32Or(v, def uint32) {
	if v == def {
		e.null()
		return
	}
	e.uint32(v)
}

func (e *listEncoder) ubyte(v uint8) {
	e.buf = append(e.buf, codeUbyte, v)
	e.mark()
}

func (e *listEncoder) ulongOr(v, def uint64) {
	if v == def {
		e.null()
		return
	}
	e.buf = appendUlong(e.buf, v)
	e.mark()
}

// boolean encodes v, or null when v is false (the default of every boolean
// field in the spec).
func (e *listEncoder) boolean(v bool) {
	if !v {
		e.null()
		return
	}
	e.buf = append(e.buf, codeTrue)
	e.mark()
}

func (e *listEncoder) booleanAlways(v bool) {
	if v {
		e.buf = append(e.buf, codeTrue)
	} else {
		e.buf = append(e.buf, codeFalse)
	}
	e.mark()
}

func (e *listEncoder) boolPtr(p *bool) {
	if p == nil {
		e.null()
		return
	}
	e.booleanAlways(*p)
}

// str encodes s, or null when s is empty.
func (e *listEncoder) str(s string) {
	if s == "" {
		e.null()
		return
	}
	e.buf = appendVariable(e.buf, codeStr8, codeStr32, s)
	e.mark()
}

func (e *listEncoder) strAlways(s string) {
	e.buf = appendVariable(e.buf, codeStr8, codeStr32, s)
	e.mark()
}

func (e *listEncoder) sym(s Symbol) {
	if s == "" {
		e.null()
		return
	}
	e.buf = appendVariable(e.buf, codeSym8, codeSym32, s)
	e.mark()
}

func (e *listEncoder) symAlways(s Symbol) {
	e.buf = appendVariable(e.buf, codeSym8, codeSym32, s)
	e.mark()
}

// binary encodes b, or null when b is nil (an empty non-nil slice is kept).
func (e *listEncoder) binary(b []byte) {
	if b == nil {
		e.null()
		return
	}
	e.buf = appendVariable(e.buf, codeVbin8, codeVbin32, b)
	e.mark()
}

// symbols encodes a multiple-symbol field as an array, or null when empty.
func (e *listEncoder) symbols(name string, s []Symbol) {
	if len(s) == 0 {
		e.null()
		return
	}
	e.value(name, SymbolArray(s...))
}

func (e *listEncoder) symMap(name string, m map[Symbol]any) {
	if m == nil {
		e.null()
		return
	}
	e.value(name, m)
}

// nested encodes a package type (Error, Source, delivery state, …) or null.
func (e *listEncoder) nested(name string, v appender, isNil bool) {
	if e.err != nil {
		return
	}
	if isNil {
		e.null()
		return
	}
	out, err := v.appendAMQP(e.buf, e.depth+2)
	if err != nil {
		e.err = fmt.Errorf("field %s: %w", name, err)
		return
	}
	e.buf = out
	e.mark()
}

func (e *listEncoder) finish() ([]byte, error) {
	if e.err != nil {
		return e.buf[:e.start], e.err
	}
	e.buf = e.buf[:e.lastEnd]
	if e.lastCount == 0 {
		e.buf = append(e.buf[:e.start], codeList0)
		return e.buf, nil
	}
	return finishCompound(e.buf, e.start, codeList8, codeList32, e.lastCount)
}

// fieldList reads the fields of a decoded described list, recording the first
// type error it meets.
type fieldList struct {
	what  string
	items []any
	err   error
}

func (f *fieldList) get(i int) any {
	if i < len(f.items) {
		return f.items[i]
	}
	return nil
}

func (f *fieldList) fail(name string, format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%s field %s: %w", f.what, name, malformed(format, args...))
	}
}

// mandatory records an error if field i is null.
func (f *fieldList) mandatory(i int, name string) {
	if f.get(i) == nil {
		f.fail(name, "mandatory field is null")
	}
}

func field[T any](f *fieldList, i int, name string) (T, bool) {
	var zero T
	v := f.get(i)
	if v == nil {
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		f.fail(name, "want %T, got %T", zero, v)
		return zero, false
	}
	return t, true
}

func fieldOr[T any](f *fieldList, i int, name string, def T) T {
	if v, ok := field[T](f, i, name); ok {
		return v
	}
	return def
}

func fieldPtr[T any](f *fieldList, i int, name string) *T {
	if v, ok := field[T](f, i, name); ok {
		return &v
	}
	return nil
}

func (f *fieldList) str(i int, name string) string {
	return fieldOr(f, i, name, "")
}

func (f *fieldList) sym(i int, name string) Symbol {
	return fieldOr[Symbol](f, i, name, "")
}

func (f *fieldList) binary(i int, name string) []byte {
	v, _ := field[[]byte](f, i, name)
	return v
}

func (f *fieldList) milliseconds(i int, name string) time.Duration {
	return time.Duration(fieldOr[uint32](f, i, name, 0)) * time.Millisecond
}

// symbols reads a multiple-symbol field: null, a single symbol or an array of
// symbols.
func (f *fieldList) symbols(i int, name string) []Symbol {
	switch v := f.get(i).(type) {
	case nil:
		return nil
	case Symbol:
		return []Symbol{v}
	case Array:
		out := make([]Symbol, len(v.Items))
		for j, it := range v.Items {
			s, ok := it.(Symbol)
			if !ok {
				f.fail(name, "array item %d: want symbol, got %T", j, it)
				return nil
			}
			out[j] = s
		}
		return out
	default:
		f.fail(name, "want symbol or array of symbols, got %T", v)
		return nil
	}
}

// symMap reads a fields-typed map (symbol keys). String keys are accepted too
// and converted, since being lenient here costs nothing.
func (f *fieldList) symMap(i int, name string) map[Symbol]any {
	m, ok := field[map[any]any](f, i, name)
	if !ok {
		return nil
	}
	out := make(map[Symbol]any, len(m))
	for k, v := range m {
		switch k := k.(type) {
		case Symbol:
			out[k] = v
		case string:
			out[Symbol(k)] = v
		default:
			f.fail(name, "want symbol keys, got %T", k)
			return nil
		}
	}
	return out
}

func (f *fieldList) anyMap(i int, name string) map[any]any {
	m, _ := field[map[any]any](f, i, name)
	return m
}

// described returns the descriptor code and list fields of the described list
// in field i, or ok=false when the field is null.
func (f *fieldList) described(i int, name string) (code uint64, items []any, ok bool) {
	v := f.get(i)
	if v == nil {
		return 0, nil, false
	}
	code, items, err := describedList(v)
	if err != nil {
		f.fail(name, "%v", err)
		return 0, nil, false
	}
	return code, items, true
}

func (f *fieldList) errorField(i int, name string) *Error {
	code, items, ok := f.described(i, name)
	if !ok {
		return nil
	}
	if code != descError {
		f.fail(name, "want error, got descriptor %#x", code)
		return nil
	}
	e, err := decodeError(items)
	if err != nil {
		f.fail(name, "%v", err)
		return nil
	}
	return e
}

func (f *fieldList) deliveryState(i int, name string) DeliveryState {
	code, items, ok := f.described(i, name)
	if !ok {
		return nil
	}
	s, err := decodeDeliveryState(code, items)
	if err != nil {
		f.fail(name, "%v", err)
		return nil
	}
	return s
}

// describedList unpacks a described list value into its numeric descriptor
// (symbolic descriptors are translated) and fields.
func describedList(v any) (uint64, []any, error) {
	d, ok := v.(Described)
	if !ok {
		return 0, nil, malformed("want described list, got %T", v)
	}
	var code uint64
	switch desc := d.Descriptor.(type) {
	case uint64:
		code = desc
	case Symbol:
		c, known := symbolicDescriptors[desc]
		if !known {
			return 0, nil, malformed("unknown descriptor %q", desc)
		}
		code = c
	}
	items, ok := d.Value.([]any)
	if !ok {
		return 0, nil, malformed("descriptor %#x: want list, got %T", code, d.Value)
	}
	return code, items, nil
}
