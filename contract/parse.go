package contract

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrNoSequence is the error of Parse for a message without the sequence property (absent or
// nil): an unsequenced message, which a consumer may pass through instead of refusing.
var ErrNoSequence = errors.New("no sequence")

// Parse reads a message's place in its session from its application properties: the sequence
// under sequenceProperty and the last mark under lastProperty.
//
// The sequence is an integer of any Go integer type, or a base-10 string, of at least 1. The
// last mark is a bool, or the string "true" or "false" in any case; an empty string or an
// absent (or nil) property means false. Any other value breaks the contract: Parse returns an
// error naming the property and the value (wrapping ErrNoSequence when the sequence is absent),
// with sequence 0 and last false.
func Parse(props map[string]any, sequenceProperty, lastProperty string) (sequence int64, last bool, err error) {
	v, ok := props[sequenceProperty]
	if !ok || v == nil {
		return 0, false, missingError(sequenceProperty)
	}
	seq, ok := toInt64(v)
	if !ok {
		return 0, false, fmt.Errorf("application property %q = %s is not an integer", sequenceProperty, describe(v))
	}
	if seq < 1 {
		return 0, false, fmt.Errorf("application property %q = %d is below the first sequence 1", sequenceProperty, seq)
	}
	lv, ok := props[lastProperty]
	if !ok || lv == nil {
		return seq, false, nil
	}
	switch l := lv.(type) {
	case bool:
		return seq, l, nil
	case string:
		switch {
		case strings.EqualFold(l, "true"):
			return seq, true, nil
		case strings.EqualFold(l, "false"), l == "":
			return seq, false, nil
		}
	}
	return 0, false, fmt.Errorf("application property %q = %s is neither a bool nor \"true\"/\"false\"", lastProperty, describe(lv))
}

func describe(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s) + " (string)"
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint:
		return int64(n), uint64(n) <= math.MaxInt64
	case uint64:
		return int64(n), n <= math.MaxInt64
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// missingError is the error of an absent sequence property; it matches ErrNoSequence.
type missingError string

func (e missingError) Error() string {
	return fmt.Sprintf("application property %q is missing", string(e))
}
func (e missingError) Is(target error) bool { return target == ErrNoSequence }
