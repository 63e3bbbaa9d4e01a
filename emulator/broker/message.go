package broker

import (
	"maps"
	"time"

	"github.com/Azure/go-amqp"
)

// Annotation and application-property names the SDK reads or sends.
const (
	AnnotationSequenceNumber        = "x-opt-sequence-number"
	AnnotationEnqueuedTime          = "x-opt-enqueued-time"
	AnnotationLockedUntil           = "x-opt-locked-until"
	AnnotationMessageState          = "x-opt-message-state"
	AnnotationScheduledEnqueueTime  = "x-opt-scheduled-enqueue-time"
	AnnotationEnqueueSequenceNumber = "x-opt-enqueue-sequence-number"
	AnnotationDeadLetterSource      = "x-opt-deadletter-source"
	AnnotationPartitionKey          = "x-opt-partition-key"
	// DeliveryAnnotationLockToken carries the lock token (uuid) in the delivery annotations.
	DeliveryAnnotationLockToken = "x-opt-lock-token"

	PropertyDeadLetterReason           = "DeadLetterReason"
	PropertyDeadLetterErrorDescription = "DeadLetterErrorDescription"
)

// Dead-letter reasons the broker itself uses.
const (
	ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"
	ReasonTTLExpired               = "TTLExpiredException"
	// ReasonFilterEvaluationException is the emulator's reason for a message whose
	// subscription rule failed to evaluate (see
	// EntityProperties.DropOnFilterEvaluationExceptions).
	ReasonFilterEvaluationException = "FilterEvaluationException"
)

// MessageState is the value of x-opt-message-state.
type MessageState int64

// Message states as the SDK reads them.
const (
	MessageStateActive    MessageState = 0
	MessageStateDeferred  MessageState = 1
	MessageStateScheduled MessageState = 2
)

// cloneMessage returns a copy of m whose maps, header and properties can be changed
// without touching m. When deep is set the body bytes are copied too (used on send,
// where the caller may reuse its buffers); otherwise they are shared, since the broker
// never changes a body.
func cloneMessage(m *amqp.Message, deep bool) *amqp.Message {
	c := &amqp.Message{
		Format:                m.Format,
		DeliveryAnnotations:   maps.Clone(m.DeliveryAnnotations),
		Annotations:           maps.Clone(m.Annotations),
		ApplicationProperties: maps.Clone(m.ApplicationProperties),
		Data:                  m.Data,
		Value:                 m.Value,
		Sequence:              m.Sequence,
		Footer:                maps.Clone(m.Footer),
	}
	if m.Header != nil {
		h := *m.Header
		c.Header = &h
	}
	if m.Properties != nil {
		p := *m.Properties
		c.Properties = &p
	}
	if deep && m.Data != nil {
		c.Data = make([][]byte, len(m.Data))
		for i, d := range m.Data {
			c.Data[i] = append([]byte(nil), d...)
		}
	}
	return c
}

// annotation reads a message annotation whose key may be a string or an amqp.Symbol.
func annotation(m *amqp.Message, key string) (any, bool) {
	if m.Annotations == nil {
		return nil, false
	}
	if v, ok := m.Annotations[key]; ok {
		return v, true
	}
	v, ok := m.Annotations[amqp.Symbol(key)]
	return v, ok
}

// setAnnotation sets a message annotation under a string key (encoded as a symbol),
// dropping any amqp.Symbol-keyed duplicate.
func setAnnotation(m *amqp.Message, key string, v any) {
	if m.Annotations == nil {
		m.Annotations = amqp.Annotations{}
	}
	delete(m.Annotations, amqp.Symbol(key))
	m.Annotations[key] = v
}

func scheduledTime(m *amqp.Message) (time.Time, bool) {
	v, ok := annotation(m, AnnotationScheduledEnqueueTime)
	if !ok {
		return time.Time{}, false
	}
	t, ok := v.(time.Time)
	return t, ok && !t.IsZero()
}

func sessionIDOf(m *amqp.Message) (string, bool) {
	if m.Properties == nil || m.Properties.GroupID == nil {
		return "", false
	}
	return *m.Properties.GroupID, true
}

// applyProperties merges properties-to-modify into the application properties.
func applyProperties(m *amqp.Message, props map[string]any) {
	if len(props) == 0 {
		return
	}
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = make(map[string]any, len(props))
	}
	maps.Copy(m.ApplicationProperties, props)
}
