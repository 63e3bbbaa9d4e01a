package sqlrule

import (
	"time"

	"github.com/Azure/go-amqp"
)

func ptr[T any](v T) *T { return &v }

var testEnqueued = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

// testMessage is a message as the broker stores it: system properties in
// Properties, Header and Annotations, and the given application properties.
func testMessage(app map[string]any) *amqp.Message {
	return &amqp.Message{
		Header: &amqp.MessageHeader{DeliveryCount: 2, TTL: time.Hour},
		Properties: &amqp.MessageProperties{
			MessageID:      "msg-1",
			CorrelationID:  amqp.UUID{0x01, 0x02},
			To:             ptr("Store5"),
			ReplyTo:        ptr("replies"),
			Subject:        ptr("Electronics"),
			GroupID:        ptr("session-1"),
			ReplyToGroupID: ptr("reply-session"),
			ContentType:    ptr("application/json"),
		},
		Annotations: amqp.Annotations{
			"x-opt-sequence-number":            int64(42),
			amqp.Symbol("x-opt-enqueued-time"): testEnqueued,
			"x-opt-partition-key":              "pk",
		},
		ApplicationProperties: app,
		Data:                  [][]byte{[]byte("hello")},
	}
}
