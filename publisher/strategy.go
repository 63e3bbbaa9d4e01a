package publisher

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrNoSessionKey is returned (wrapped) when a message lacks the properties its strategy
// needs: a forwarding subscription would not forward it either.
var ErrNoSessionKey = errors.New("publisher: message lacks the session key properties")

// Strategy builds a message's session id from its application properties. ok is false
// when the message lacks what the strategy needs. A Publisher refuses an id that
// ValidateSessionID refuses, an empty one included (ErrEmptySessionID), unless its
// Strategy is None.
type Strategy interface {
	SessionID(props map[string]any) (id string, ok bool, err error)
}

// Composite joins the values of Properties with Separator, then appends Separator and
// Suffix when Suffix is set. It is the composite strategy of a topology file.
type Composite struct {
	Properties []string
	Separator  string
	Suffix     string
}

// SessionID implements Strategy.
func (c Composite) SessionID(props map[string]any) (string, bool, error) {
	parts := make([]string, 0, len(c.Properties)+1)
	for _, name := range c.Properties {
		v, ok := lookup(props, name)
		if !ok {
			return "", false, nil
		}
		s, err := Format(v)
		if err != nil {
			return "", false, fmt.Errorf("property %s: %w", name, err)
		}
		parts = append(parts, s)
	}
	if c.Suffix != "" {
		parts = append(parts, c.Suffix)
	}
	return strings.Join(parts, c.Separator), true, nil
}

// lookup finds a property by name, case-insensitively as Service Bus SQL does.
func lookup(props map[string]any, name string) (any, bool) {
	if v, ok := props[name]; ok {
		return v, v != nil
	}
	for k, v := range props {
		if strings.EqualFold(k, name) {
			return v, v != nil
		}
	}
	return nil, false
}

// Gjura returns the composite strategy SessionName_TransactionId_InstanceId.
func Gjura() Composite {
	return Composite{Properties: []string{"SessionName", "TransactionId", "InstanceId"}, Separator: "_"}
}

// Entity returns the ordering scope "entity", owner/repo/entity_type/entity_id, from the
// given four property names (default Owner, Repo, EntityType, EntityId).
func Entity(names ...string) Composite {
	if len(names) == 0 {
		names = []string{"Owner", "Repo", "EntityType", "EntityId"}
	}
	return Composite{Properties: names, Separator: "/"}
}

// Repository returns the ordering scope "repository", owner/repo/repository, from the
// given two property names (default Owner, Repo).
func Repository(names ...string) Composite {
	if len(names) == 0 {
		names = []string{"Owner", "Repo"}
	}
	return Composite{Properties: names, Separator: "/", Suffix: "repository"}
}

// Fallback uses the first of its strategies that applies to the message.
type Fallback []Strategy

// SessionID implements Strategy.
func (f Fallback) SessionID(props map[string]any) (string, bool, error) {
	for _, s := range f {
		id, ok, err := s.SessionID(props)
		if err != nil || ok {
			return id, ok, err
		}
	}
	return "", false, nil
}

// None sends messages without a session id, to entities that do not require sessions.
// It applies to a whole Publisher: as an alternative inside a Fallback it yields an
// empty session id, which the Publisher refuses.
type None struct{}

// SessionID implements Strategy.
func (None) SessionID(map[string]any) (string, bool, error) { return "", true, nil }

// Func is a Strategy written in Go, for session ids a SQL action cannot build.
type Func func(props map[string]any) (id string, ok bool, err error)

// SessionID implements Strategy.
func (f Func) SessionID(props map[string]any) (string, bool, error) { return f(props) }

// Format writes an application property value as the Service Bus SQL + operator does
// when it concatenates it to a string (.NET ToString): strings as they are, integers in
// decimal, booleans True/False, floats in shortest round-trip form (1.5, 1E+20, 1E-05).
func Format(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		if x {
			return "True", nil
		}
		return "False", nil
	case int:
		return strconv.Itoa(x), nil
	case int8:
		return strconv.FormatInt(int64(x), 10), nil
	case int16:
		return strconv.FormatInt(int64(x), 10), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint8:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint16:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint32:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float32:
		return formatFloat(float64(x)), nil
	case float64:
		return formatFloat(x), nil
	}
	return "", fmt.Errorf("publisher: cannot use a %T in a session id", v)
}

func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e15) {
		return strconv.FormatFloat(f, 'E', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
