package sqlrule

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

// Message annotations the broker stores system properties in.
const (
	annSequenceNumber        = "x-opt-sequence-number"
	annEnqueuedTime          = "x-opt-enqueued-time"
	annScheduledEnqueueTime  = "x-opt-scheduled-enqueue-time"
	annEnqueueSequenceNumber = "x-opt-enqueue-sequence-number"
	annDeadLetterSource      = "x-opt-deadletter-source"
	annPartitionKey          = "x-opt-partition-key"
	annViaPartitionKey       = "x-opt-via-partition-key"
	annLockedUntil           = "x-opt-locked-until"
	annMessageState          = "x-opt-message-state"
)

// sysProp is a system property: how to read it and, for the settable ones,
// how to write a string (nil clears it).
type sysProp struct {
	name string // canonical .NET name
	get  func(m *amqp.Message) value
	set  func(m *amqp.Message, s *string)
}

func props(m *amqp.Message) *amqp.MessageProperties {
	if m.Properties == nil {
		m.Properties = &amqp.MessageProperties{}
	}
	return m.Properties
}

func strPtr(p *string) value {
	if p == nil {
		return null
	}
	return stringValue(*p)
}

// idValue renders a message-id or correlation-id (string, uuid, ulong or binary) as a string.
func idValue(x any) value {
	switch x := x.(type) {
	case nil:
		return null
	case string:
		return stringValue(x)
	case amqp.UUID:
		return stringValue(x.String())
	case uint64:
		return stringValue(strconv.FormatUint(x, 10))
	case []byte:
		return stringValue(hex.EncodeToString(x))
	}
	return fromGo(x)
}

func annotation(m *amqp.Message, key string) value {
	if m.Annotations == nil {
		return null
	}
	if v, ok := m.Annotations[key]; ok {
		return fromGo(v)
	}
	if v, ok := m.Annotations[amqp.Symbol(key)]; ok {
		return fromGo(v)
	}
	return null
}

func setAnnotation(key string) func(m *amqp.Message, s *string) {
	return func(m *amqp.Message, s *string) {
		if m.Annotations != nil {
			delete(m.Annotations, amqp.Symbol(key))
			delete(m.Annotations, key)
		}
		if s == nil {
			return
		}
		if m.Annotations == nil {
			m.Annotations = amqp.Annotations{}
		}
		m.Annotations[key] = *s
	}
}

func ann(key string) func(m *amqp.Message) value {
	return func(m *amqp.Message) value { return annotation(m, key) }
}

func stringField(f func(p *amqp.MessageProperties) **string) (func(*amqp.Message) value, func(*amqp.Message, *string)) {
	get := func(m *amqp.Message) value {
		if m.Properties == nil {
			return null
		}
		return strPtr(*f(m.Properties))
	}
	set := func(m *amqp.Message, s *string) { *f(props(m)) = s }
	return get, set
}

func enqueuedTime(m *amqp.Message) value { return annotation(m, annEnqueuedTime) }

// bodySize approximates .NET's Message.Size by the size of the body.
func bodySize(m *amqp.Message) value {
	n := 0
	for _, d := range m.Data {
		n += len(d)
	}
	switch v := m.Value.(type) {
	case string:
		n += len(v)
	case []byte:
		n += len(v)
	}
	return intValue(int64(n))
}

// systemProperties maps lower-cased names to system properties.
var systemProperties = func() map[string]*sysProp {
	ps := []*sysProp{
		{name: "MessageId",
			get: func(m *amqp.Message) value {
				if m.Properties == nil {
					return null
				}
				return idValue(m.Properties.MessageID)
			},
			set: func(m *amqp.Message, s *string) {
				if s == nil {
					props(m).MessageID = nil
					return
				}
				props(m).MessageID = *s
			}},
		{name: "CorrelationId",
			get: func(m *amqp.Message) value {
				if m.Properties == nil {
					return null
				}
				return idValue(m.Properties.CorrelationID)
			},
			set: func(m *amqp.Message, s *string) {
				if s == nil {
					props(m).CorrelationID = nil
					return
				}
				props(m).CorrelationID = *s
			}},
		{name: "PartitionKey", get: ann(annPartitionKey), set: setAnnotation(annPartitionKey)},
		{name: "ViaPartitionKey", get: ann(annViaPartitionKey), set: setAnnotation(annViaPartitionKey)},
		{name: "SequenceNumber", get: ann(annSequenceNumber)},
		{name: "EnqueuedSequenceNumber", get: ann(annEnqueueSequenceNumber)},
		{name: "EnqueuedTimeUtc", get: enqueuedTime},
		{name: "ScheduledEnqueueTimeUtc", get: ann(annScheduledEnqueueTime)},
		{name: "LockedUntilUtc", get: ann(annLockedUntil)},
		{name: "DeadLetterSource", get: ann(annDeadLetterSource)},
		{name: "State", get: ann(annMessageState)},
		{name: "MessageState", get: ann(annMessageState)},
		{name: "TransactionPartitionKey", get: ann(annViaPartitionKey), set: setAnnotation(annViaPartitionKey)},
		{name: "LockToken", get: func(*amqp.Message) value { return null }},
		{name: "DeliveryCount", get: func(m *amqp.Message) value {
			if m.Header == nil {
				return intValue(0)
			}
			return intValue(int64(m.Header.DeliveryCount))
		}},
		{name: "TimeToLive", get: func(m *amqp.Message) value {
			if m.Header == nil || m.Header.TTL <= 0 {
				return null
			}
			return value{k: kDuration, n: int64(m.Header.TTL)}
		}},
		{name: "ExpiresAtUtc", get: func(m *amqp.Message) value {
			t := enqueuedTime(m)
			if t.k != kTime || m.Header == nil || m.Header.TTL <= 0 {
				return null
			}
			return value{k: kTime, n: time.Unix(0, t.n).Add(m.Header.TTL).UnixNano()}
		}},
		{name: "Size", get: bodySize},
	}
	for _, s := range []struct {
		name string
		f    func(p *amqp.MessageProperties) **string
	}{
		{"To", func(p *amqp.MessageProperties) **string { return &p.To }},
		{"ReplyTo", func(p *amqp.MessageProperties) **string { return &p.ReplyTo }},
		{"Label", func(p *amqp.MessageProperties) **string { return &p.Subject }},
		{"Subject", func(p *amqp.MessageProperties) **string { return &p.Subject }},
		{"SessionId", func(p *amqp.MessageProperties) **string { return &p.GroupID }},
		{"ReplyToSessionId", func(p *amqp.MessageProperties) **string { return &p.ReplyToGroupID }},
		{"ContentType", func(p *amqp.MessageProperties) **string { return &p.ContentType }},
	} {
		get, set := stringField(s.f)
		ps = append(ps, &sysProp{name: s.name, get: get, set: set})
	}
	out := make(map[string]*sysProp, len(ps))
	for _, p := range ps {
		out[strings.ToLower(p.name)] = p
	}
	return out
}()

func lookupSystemProperty(name string) *sysProp { return systemProperties[strings.ToLower(name)] }

// userProperty reads an application property; names are case-insensitive.
func userProperty(m *amqp.Message, name string) (value, bool) {
	k, ok := userKey(m, name)
	if !ok {
		return null, false
	}
	return fromGo(m.ApplicationProperties[k]), true
}

// userKey finds the key of an application property: an exact match first,
// then one differing in case.
func userKey(m *amqp.Message, name string) (string, bool) {
	if m.ApplicationProperties == nil {
		return "", false
	}
	if _, ok := m.ApplicationProperties[name]; ok {
		return name, true
	}
	for k := range m.ApplicationProperties {
		if strings.EqualFold(k, name) {
			return k, true
		}
	}
	return "", false
}
