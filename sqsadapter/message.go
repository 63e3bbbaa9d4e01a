package sqsadapter

import (
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/seqbus/seqbus/sequencer"
)

// Received is the Raw of a sequencer.Message from this adapter: the SQS message as received and
// what settling it needs.
type Received struct {
	// ReceiptHandle identifies this receive of the message; settling uses it.
	ReceiptHandle string
	// GroupID is the MessageGroupId, the session id.
	GroupID string
	// SequenceNumber is SQS's sequence number, a decimal of up to 128 bits (BrokerSequence is
	// derived from it).
	SequenceNumber string
	// Message is the SDK's message as ReceiveMessage returned it.
	Message types.Message
}

var mod63 = new(big.Int).Lsh(big.NewInt(1), 63)

// BrokerSequence reduces an SQS SequenceNumber (a decimal of up to 128 bits, rising within a
// group) to an int64: the number modulo 2^63. Distinct numbers less than 2^63 apart stay distinct
// and keep their order, except across a multiple of 2^63 (a wrap), which a group meets at most
// once in 2^63 messages of the queue.
func BrokerSequence(sequenceNumber string) (int64, error) {
	if n, err := strconv.ParseInt(sequenceNumber, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	n, ok := new(big.Int).SetString(sequenceNumber, 10)
	if !ok || n.Sign() < 0 {
		return 0, fmt.Errorf("sqsadapter: SequenceNumber %q is not a non-negative decimal", sequenceNumber)
	}
	return n.Mod(n, mod63).Int64(), nil
}

// toMessage maps a received SQS message. Attributes that do not decode are kept as their raw
// string (or bytes) and reported in badAttrs, so that nothing is lost: the engine then finds the
// contract broken and dead-letters the message with the reason.
func toMessage(m types.Message) (msg *sequencer.Message, badAttrs error) {
	sys := m.Attributes
	rec := &Received{
		ReceiptHandle:  aws.ToString(m.ReceiptHandle),
		GroupID:        sys[string(types.MessageSystemAttributeNameMessageGroupId)],
		SequenceNumber: sys[string(types.MessageSystemAttributeNameSequenceNumber)],
		Message:        m,
	}
	msg = &sequencer.Message{
		MessageID: aws.ToString(m.MessageId),
		SessionID: rec.GroupID,
		Body:      []byte(aws.ToString(m.Body)),
		Raw:       rec,
	}
	if bs, err := BrokerSequence(rec.SequenceNumber); err == nil {
		msg.BrokerSequence = bs
	} else {
		badAttrs = err
	}
	if n, err := strconv.ParseUint(sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)], 10, 32); err == nil {
		msg.DeliveryCount = uint32(n)
	}
	if ms, err := strconv.ParseInt(sys[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		msg.EnqueuedTime = time.UnixMilli(ms).UTC()
	}
	props, err := DecodeAttributes(m.MessageAttributes)
	if err != nil {
		badAttrs = err
		props = make(map[string]any, len(m.MessageAttributes))
		for name, a := range m.MessageAttributes {
			if v, err := decodeValue(a); err == nil {
				props[name] = v
			} else if a.StringValue != nil {
				props[name] = *a.StringValue
			} else {
				props[name] = a.BinaryValue
			}
		}
	}
	if ct, ok := props[ContentTypeAttribute].(string); ok {
		// The content type the Sender sent as an attribute (SQS has no field for it).
		msg.ContentType = ct
		delete(props, ContentTypeAttribute)
	}
	msg.Properties = props
	return msg, badAttrs
}

// raw returns the Received of m, or an error for a message of another provider.
func raw(m *sequencer.Message) (*Received, error) {
	if m == nil {
		return nil, fmt.Errorf("sqsadapter: nil message")
	}
	rec, ok := m.Raw.(*Received)
	if !ok {
		return nil, fmt.Errorf("sqsadapter: message %q was not received through sqsadapter (Raw is %T)", m.MessageID, m.Raw)
	}
	return rec, nil
}
