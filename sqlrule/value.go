package sqlrule

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

type kind uint8

const (
	kNull kind = iota // NULL, or unknown
	kBool
	kInt      // int64 in n
	kFloat    // float64 in f
	kString   // s
	kTime     // UnixNano in n (.NET DateTime)
	kDuration // nanoseconds in n (.NET TimeSpan)
	kOther    // o: amqp.UUID, []byte or another AMQP value
)

// value is a runtime value. It is passed by value and allocates nothing for the
// scalar kinds.
type value struct {
	k kind
	n int64
	f float64
	s string
	o any
}

var (
	null     = value{}
	trueVal  = value{k: kBool, n: 1}
	falseVal = value{k: kBool}
)

func boolValue(b bool) value {
	if b {
		return trueVal
	}
	return falseVal
}

func intValue(n int64) value     { return value{k: kInt, n: n} }
func floatValue(f float64) value { return value{k: kFloat, f: f} }
func stringValue(s string) value { return value{k: kString, s: s} }

func (v value) isTrue() bool { return v.k == kBool && v.n != 0 }

// typeName names v's type in error messages, as .NET would.
func (v value) typeName() string {
	switch v.k {
	case kNull:
		return "NULL"
	case kBool:
		return "Boolean"
	case kInt:
		return "Int64"
	case kFloat:
		return "Double"
	case kString:
		return "String"
	case kTime:
		return "DateTime"
	case kDuration:
		return "TimeSpan"
	}
	switch v.o.(type) {
	case amqp.UUID:
		return "Guid"
	case []byte:
		return "Byte[]"
	}
	return fmt.Sprintf("%T", v.o)
}

// fromGo converts a property value as go-amqp decodes it.
func fromGo(x any) value {
	switch x := x.(type) {
	case nil:
		return null
	case bool:
		return boolValue(x)
	case int64:
		return intValue(x)
	case int32:
		return intValue(int64(x))
	case int:
		return intValue(int64(x))
	case int16:
		return intValue(int64(x))
	case int8:
		return intValue(int64(x))
	case uint8:
		return intValue(int64(x))
	case uint16:
		return intValue(int64(x))
	case uint32:
		return intValue(int64(x))
	case uint64:
		if x <= math.MaxInt64 {
			return intValue(int64(x))
		}
		return floatValue(float64(x))
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return intValue(int64(x))
		}
		return floatValue(float64(x))
	case float64:
		return floatValue(x)
	case float32:
		return floatValue(float64(x))
	case string:
		return stringValue(x)
	case amqp.Symbol:
		return stringValue(string(x))
	case time.Time:
		return value{k: kTime, n: x.UnixNano()}
	case time.Duration:
		return value{k: kDuration, n: int64(x)}
	}
	return value{k: kOther, o: x}
}

// toGo converts v to the Go value stored in an application property.
func (v value) toGo() any {
	switch v.k {
	case kNull:
		return nil
	case kBool:
		return v.n != 0
	case kInt:
		return v.n
	case kFloat:
		return v.f
	case kString:
		return v.s
	case kTime:
		return time.Unix(0, v.n).UTC()
	case kDuration:
		return time.Duration(v.n)
	}
	return v.o
}

// format renders v as .NET's ToString would, for string concatenation.
func (v value) format() string {
	switch v.k {
	case kNull:
		return ""
	case kBool:
		if v.n != 0 {
			return "True"
		}
		return "False"
	case kInt:
		return strconv.FormatInt(v.n, 10)
	case kFloat:
		return formatFloat(v.f)
	case kString:
		return v.s
	case kTime:
		return time.Unix(0, v.n).UTC().Format("01/02/2006 15:04:05")
	case kDuration:
		return formatDuration(time.Duration(v.n))
	}
	switch o := v.o.(type) {
	case amqp.UUID:
		return o.String()
	case []byte:
		return hex.EncodeToString(o)
	}
	return fmt.Sprint(v.o)
}

// formatFloat follows .NET's shortest round-trip double formatting: plain
// notation for magnitudes in [1e-4, 1e15), scientific (1E+15, 1E-05) otherwise.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if a := math.Abs(f); a == 0 || (a >= 1e-4 && a < 1e15) {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'E', -1, 64)
}

// formatDuration renders a TimeSpan as [-][d.]hh:mm:ss[.fffffff].
func formatDuration(d time.Duration) string {
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d // MinInt64 stays negative; rendered oddly but never panics
	}
	ticks := int64(d / 100)
	days := ticks / (864e9)
	ticks %= 864e9
	if days > 0 {
		fmt.Fprintf(&b, "%d.", days)
	}
	h, m, s := ticks/36e9, ticks/6e8%60, ticks/1e7%60
	fmt.Fprintf(&b, "%02d:%02d:%02d", h, m, s)
	if frac := ticks % 1e7; frac != 0 {
		fmt.Fprintf(&b, ".%07d", frac)
	}
	return b.String()
}

// order says how two values relate.
type order uint8

const (
	incomparable order = iota // different or unordered types: unknown
	equalOnly                 // only = and <> are defined (booleans, Guids, binary)
	ordered
)

// compare compares two non-null values: c is <0, 0 or >0.
func compare(a, b value) (c int, o order) {
	switch {
	case a.k == kInt && b.k == kInt:
		return cmpInt(a.n, b.n), ordered
	case isNumber(a) && isNumber(b):
		x, y := a.num(), b.num()
		if math.IsNaN(x) || math.IsNaN(y) {
			return 0, incomparable
		}
		switch {
		case x < y:
			return -1, ordered
		case x > y:
			return 1, ordered
		}
		return 0, ordered
	case a.k != b.k:
		return 0, incomparable
	}
	switch a.k {
	case kString:
		return strings.Compare(a.s, b.s), ordered
	case kTime, kDuration:
		return cmpInt(a.n, b.n), ordered
	case kBool:
		return cmpInt(a.n, b.n), equalOnly
	case kOther:
		switch x := a.o.(type) {
		case amqp.UUID:
			if y, ok := b.o.(amqp.UUID); ok {
				return bytes.Compare(x[:], y[:]), equalOnly
			}
		case []byte:
			if y, ok := b.o.([]byte); ok {
				return bytes.Compare(x, y), equalOnly
			}
		}
	}
	return 0, incomparable
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isNumber(v value) bool { return v.k == kInt || v.k == kFloat }

func (v value) num() float64 {
	if v.k == kInt {
		return float64(v.n)
	}
	return v.f
}

// equal reports whether two values are equal; unknown operands or
// incomparable types are not.
func equal(a, b value) bool {
	if a.k == kNull || b.k == kNull {
		return false
	}
	c, o := compare(a, b)
	return o != incomparable && c == 0
}
