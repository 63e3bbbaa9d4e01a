package sequencer

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parse reads the application sequence and the last mark of m. A non-empty desc means the
// message is invalid; desc names the property and the value.
func (e *Engine) parse(m *Message) (seq int64, last bool, desc string) {
	prop := e.cfg.SequenceProperty
	v, ok := m.Properties[prop]
	if !ok || v == nil {
		return 0, false, fmt.Sprintf("application property %q is missing", prop)
	}
	seq, ok = toInt64(v)
	if !ok {
		return 0, false, fmt.Sprintf("application property %q = %s is not an integer", prop, describe(v))
	}
	if seq < 1 {
		return 0, false, fmt.Sprintf("application property %q = %d is below the first sequence 1", prop, seq)
	}
	lv, ok := m.Properties[e.cfg.LastProperty]
	if !ok || lv == nil {
		return seq, false, ""
	}
	switch l := lv.(type) {
	case bool:
		return seq, l, ""
	case string:
		switch {
		case strings.EqualFold(l, "true"):
			return seq, true, ""
		case strings.EqualFold(l, "false"), l == "":
			return seq, false, ""
		}
	}
	return 0, false, fmt.Sprintf("application property %q = %s is neither a bool nor \"true\"/\"false\"",
		e.cfg.LastProperty, describe(lv))
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
