package sqsadapter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MaxBatch is the most entries one SendMessageBatch takes.
const MaxBatch = 10

// ContentTypeAttribute is the message attribute that carries a message's content type (SQS
// has no such field); it counts against MaxAttributes.
const ContentTypeAttribute = "ContentType"

// SendAPI is the part of *sqs.Client a Sender uses.
type SendAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ SendAPI = (*sqs.Client)(nil)

// Sender publishes to an SQS FIFO queue the messages the Publisher (package publisher) and the
// outbox relay (package outbox) build for Service Bus, converted as the worker's SQS source
// reads them back: the session id becomes the MessageGroupId, the message id the
// MessageDeduplicationId, the application properties message attributes (EncodeAttributes),
// the body the message body; a content type travels as the attribute ContentTypeAttribute,
// which the source reads back as an application property. It implements publisher.Sender,
// publisher.MessagesSender and outbox.Sender, so both publish to SQS FIFO unchanged.
//
// A message SQS would refuse is refused before anything of its call is sent, with an error
// naming it: no session id, a session id that is no message group id (1 to 128 alphanumeric or
// punctuation characters), an empty body or one that is not SQS text (UTF-8 without control characters
// other than tab, line feed and carriage return), attributes EncodeAttributes refuses. A message
// id that is no deduplication id (longer than 128, or other characters) is replaced by the hex
// SHA-256 of itself, so its copies still share one.
type Sender struct {
	client   SendAPI
	queueURL string
}

// NewSender returns a Sender to the FIFO queue at queueURL.
func NewSender(client SendAPI, queueURL string) (*Sender, error) {
	if client == nil {
		return nil, errors.New("sqsadapter: NewSender: nil client")
	}
	if queueURL == "" {
		return nil, errors.New("sqsadapter: NewSender: empty queue URL")
	}
	return &Sender{client: client, queueURL: queueURL}, nil
}

// SendMessage sends one message (publisher.Sender). The options are not used.
func (s *Sender) SendMessage(ctx context.Context, msg *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	e, err := entry(msg)
	if err != nil {
		return err
	}
	if _, err := s.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &s.queueURL, MessageBody: e.MessageBody, MessageGroupId: e.MessageGroupId,
		MessageDeduplicationId: e.MessageDeduplicationId, MessageAttributes: e.MessageAttributes,
	}); err != nil {
		return fmt.Errorf("sqsadapter: send %s: %w", describe(msg), err)
	}
	return nil
}

// SendMessages sends msgs in order, in SendMessageBatch calls of up to MaxBatch entries, and
// returns how many of the leading ones SQS accepted (all of them when err is nil): the
// outbox.Sender and publisher.MessagesSender contract. A batch whose entry fails counts up to
// that entry: sending again from there keeps each group's order, and the deduplication ids
// absorb the later entries SQS did take. Every message is converted before the first call, so
// a message SQS would refuse sends nothing.
func (s *Sender) SendMessages(ctx context.Context, msgs []*azservicebus.Message) (int, error) {
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		e, err := entry(m)
		if err != nil {
			return 0, fmt.Errorf("message %d of %d: %w", i+1, len(msgs), err)
		}
		e.Id = aws.String(strconv.Itoa(i))
		entries[i] = e
	}
	sent := 0
	for sent < len(entries) {
		chunk := entries[sent:min(sent+MaxBatch, len(entries))]
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queueURL, Entries: chunk})
		if err != nil {
			return sent, fmt.Errorf("sqsadapter: send batch from %s: %w", describe(msgs[sent]), err)
		}
		if len(out.Failed) > 0 {
			first := len(msgs)
			var why types.BatchResultErrorEntry
			for _, f := range out.Failed {
				if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < first {
					first, why = i, f
				}
			}
			if first < sent || first >= len(msgs) {
				return sent, fmt.Errorf("sqsadapter: send batch from %s: %d entries failed, ids not in the batch", describe(msgs[sent]), len(out.Failed))
			}
			return first, fmt.Errorf("sqsadapter: send %s: %s: %s (sender fault %t)",
				describe(msgs[first]), aws.ToString(why.Code), aws.ToString(why.Message), why.SenderFault)
		}
		sent += len(chunk)
	}
	return sent, nil
}

// Close implements outbox.Sender: a Sender holds nothing (the client is the caller's).
func (s *Sender) Close(context.Context) error { return nil }

// entry converts msg into a batch entry without an id.
func entry(msg *azservicebus.Message) (types.SendMessageBatchRequestEntry, error) {
	if msg == nil {
		return types.SendMessageBatchRequestEntry{}, errors.New("sqsadapter: nil message")
	}
	group := aws.ToString(msg.SessionID)
	if group == "" {
		return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: %s has no session id: an SQS FIFO queue needs a message group", describe(msg))
	}
	if !validID(group) {
		return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: session id %q is no SQS message group id (1 to 128 alphanumeric or punctuation characters)", group)
	}
	if len(msg.Body) == 0 {
		return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: %s: the body is empty, which SQS refuses", describe(msg))
	}
	if !validBody(msg.Body) {
		return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: %s: the body is not SQS text (UTF-8 without control characters other than tab, line feed and carriage return)", describe(msg))
	}
	props := msg.ApplicationProperties
	if msg.ContentType != nil && *msg.ContentType != "" {
		props = make(map[string]any, len(msg.ApplicationProperties)+1)
		for k, v := range msg.ApplicationProperties {
			props[k] = v
		}
		if v, ok := props[ContentTypeAttribute]; ok && v != *msg.ContentType {
			return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: %s: application property %s %v differs from the content type %q it would carry",
				describe(msg), ContentTypeAttribute, v, *msg.ContentType)
		}
		props[ContentTypeAttribute] = *msg.ContentType
	}
	attrs, err := EncodeAttributes(props)
	if err != nil {
		return types.SendMessageBatchRequestEntry{}, fmt.Errorf("sqsadapter: %s: %w", describe(msg), err)
	}
	e := types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(msg.Body)), MessageGroupId: &group, MessageAttributes: attrs}
	if id := aws.ToString(msg.MessageID); id != "" {
		e.MessageDeduplicationId = aws.String(DeduplicationID(id))
	}
	return e, nil
}

// DeduplicationID is the MessageDeduplicationId a Sender gives a message with messageID: the id
// itself when SQS takes it, else its hex SHA-256.
func DeduplicationID(messageID string) string {
	if validID(messageID) {
		return messageID
	}
	sum := sha256.Sum256([]byte(messageID))
	return hex.EncodeToString(sum[:])
}

// validID reports whether s is 1 to 128 alphanumeric or punctuation characters (ASCII 0x21 to
// 0x7e), as SQS requires of group and deduplication ids.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validBody reports whether b is text SQS accepts: UTF-8 of #x9, #xA, #xD, #x20 to #xD7FF,
// #xE000 to #xFFFD and #x10000 to #x10FFFF.
func validBody(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// describe names a message in errors: its session and id.
func describe(m *azservicebus.Message) string {
	return fmt.Sprintf("message %q of session %q", aws.ToString(m.MessageID), aws.ToString(m.SessionID))
}
