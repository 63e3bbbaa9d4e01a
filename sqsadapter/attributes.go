package sqsadapter

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MaxAttributes is the number of message attributes SQS accepts on one message.
const MaxAttributes = 10

// The data types of the attribute encoding. SQS knows String, Number and Binary; the suffixes
// are SQS custom types that keep the Go type of the value across the queue.
const (
	typeString = "String"
	typeBool   = "String.bool"
	typeTime   = "String.time"
	typeNumber = "Number"
	typeFloat  = "Number.float"
	typeBinary = "Binary"
)

var attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// checkName reports an attribute name SQS refuses: up to 256 of A-Z a-z 0-9 _ - ., not
// starting with "AWS." or "Amazon." (any case), no leading, trailing or doubled '.'.
func checkName(name string) error {
	lower := strings.ToLower(name)
	switch {
	case !attrNameRE.MatchString(name):
		return fmt.Errorf("sqsadapter: attribute name %q is invalid: SQS takes 1 to 256 of A-Z, a-z, 0-9, '_', '-', '.'", name)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Errorf("sqsadapter: attribute name %q is invalid: SQS reserves the prefixes AWS. and Amazon.", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Errorf("sqsadapter: attribute name %q is invalid: SQS refuses a leading, trailing or doubled '.'", name)
	}
	return nil
}

// EncodeAttributes turns application properties into SQS message attributes:
//
//	string                  → String (SQS refuses an empty one)
//	bool                    → String.bool, "true" or "false"
//	int, int8 … uint64      → Number, decimal
//	float32, float64        → Number.float (finite, within SQS's range of 1e-128 to 1e126)
//	[]byte                  → Binary (SQS refuses an empty one)
//	time.Time               → String.time, RFC 3339 with nanoseconds, in UTC
//
// Any other type, more than MaxAttributes properties or a name SQS refuses is an error naming
// the property; nothing is encoded then. A nil or empty map encodes to nil.
func EncodeAttributes(props map[string]any) (map[string]types.MessageAttributeValue, error) {
	if len(props) == 0 {
		return nil, nil
	}
	if len(props) > MaxAttributes {
		return nil, fmt.Errorf("sqsadapter: %d application properties, SQS takes at most %d message attributes", len(props), MaxAttributes)
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad property named is the same every time
	out := make(map[string]types.MessageAttributeValue, len(props))
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, err
		}
		v, err := encodeValue(props[name])
		if err != nil {
			return nil, fmt.Errorf("sqsadapter: property %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func str(dataType, s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: aws.String(s)}
}

func encodeValue(v any) (types.MessageAttributeValue, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return types.MessageAttributeValue{}, fmt.Errorf("an empty string: SQS refuses an empty String attribute")
		}
		return str(typeString, x), nil
	case bool:
		return str(typeBool, strconv.FormatBool(x)), nil
	case int:
		return str(typeNumber, strconv.FormatInt(int64(x), 10)), nil
	case int8:
		return str(typeNumber, strconv.FormatInt(int64(x), 10)), nil
	case int16:
		return str(typeNumber, strconv.FormatInt(int64(x), 10)), nil
	case int32:
		return str(typeNumber, strconv.FormatInt(int64(x), 10)), nil
	case int64:
		return str(typeNumber, strconv.FormatInt(x, 10)), nil
	case uint:
		return str(typeNumber, strconv.FormatUint(uint64(x), 10)), nil
	case uint8:
		return str(typeNumber, strconv.FormatUint(uint64(x), 10)), nil
	case uint16:
		return str(typeNumber, strconv.FormatUint(uint64(x), 10)), nil
	case uint32:
		return str(typeNumber, strconv.FormatUint(uint64(x), 10)), nil
	case uint64:
		return str(typeNumber, strconv.FormatUint(x, 10)), nil
	case float32:
		return encodeFloat(float64(x), 32)
	case float64:
		return encodeFloat(x, 64)
	case []byte:
		if len(x) == 0 {
			return types.MessageAttributeValue{}, fmt.Errorf("an empty []byte: SQS refuses an empty Binary attribute")
		}
		return types.MessageAttributeValue{DataType: aws.String(typeBinary), BinaryValue: append([]byte(nil), x...)}, nil
	case time.Time:
		return str(typeTime, x.UTC().Format(time.RFC3339Nano)), nil
	case nil:
		return types.MessageAttributeValue{}, fmt.Errorf("nil: SQS has no null attribute (leave the property out)")
	}
	return types.MessageAttributeValue{}, fmt.Errorf("type %T cannot be a message attribute (string, bool, integers, floats, []byte and time.Time can)", v)
}

func encodeFloat(f float64, bits int) (types.MessageAttributeValue, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return types.MessageAttributeValue{}, fmt.Errorf("%v is not a number SQS can carry", f)
	}
	if a := math.Abs(f); a != 0 && (a < 1e-128 || a > 1e126) {
		return types.MessageAttributeValue{}, fmt.Errorf("%g is outside SQS's number range (1e-128 to 1e126)", f)
	}
	return str(typeFloat, strconv.FormatFloat(f, 'g', -1, bits)), nil
}

// DecodeAttributes turns SQS message attributes back into application properties, the inverse
// of EncodeAttributes: String → string, String.bool → bool, String.time → time.Time (UTC),
// Number → int64 when the value is an integer that fits, else float64, Number.float → float64,
// Binary → []byte. Other custom types (set by other publishers) decode by their base type, so
// nothing is dropped. A value that does not parse as its type is an error naming the attribute.
func DecodeAttributes(attrs map[string]types.MessageAttributeValue) (map[string]any, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(attrs))
	for name, a := range attrs {
		v, err := decodeValue(a)
		if err != nil {
			return nil, fmt.Errorf("sqsadapter: attribute %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func decodeValue(a types.MessageAttributeValue) (any, error) {
	dt := aws.ToString(a.DataType)
	s := aws.ToString(a.StringValue)
	switch dt {
	case typeBool:
		b, err := strconv.ParseBool(s)
		if err != nil || (s != "true" && s != "false") {
			return nil, fmt.Errorf("%s value %q is neither \"true\" nor \"false\"", dt, s)
		}
		return b, nil
	case typeTime:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("%s value %q is not an RFC 3339 time: %w", dt, s, err)
		}
		return t.UTC(), nil
	case typeFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s value %q is not a number", dt, s)
		}
		return f, nil
	}
	base, _, _ := strings.Cut(dt, ".")
	switch base {
	case "String":
		return s, nil
	case "Binary":
		return append([]byte(nil), a.BinaryValue...), nil
	case "Number":
		return decodeNumber(s)
	}
	return nil, fmt.Errorf("data type %q is none of String, Number, Binary", dt)
}

// decodeNumber reads an SQS Number: an integer that fits int64 (also written 1.0 or 1e3) as
// int64, anything else as float64.
func decodeNumber(s string) (any, error) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return nil, fmt.Errorf("number value %q is not a number", s)
		}
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return int64(f), nil
	}
	return f, nil
}
