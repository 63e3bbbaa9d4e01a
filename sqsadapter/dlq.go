package sqsadapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DeadLetterAPI is the part of *sqs.Client a DeadLetters uses.
type DeadLetterAPI interface {
	SendAPI
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ DeadLetterAPI = (*sqs.Client)(nil)

// DeadLettersConfig configures a DeadLetters.
type DeadLettersConfig struct {
	// Client is the SQS client (required).
	Client DeadLetterAPI
	// QueueURL is the queue whose dead letters are read, where replayed copies go (required);
	// DeadLetterQueueURL its redrive dead-letter queue (required; Source.DeadLetterQueueURL).
	QueueURL, DeadLetterQueueURL string
	// Visibility is how long a received dead letter stays invisible to others before it is
	// released or deleted (default 60s; whole seconds, 1s to 12h).
	Visibility time.Duration
	// Optional names a property a copy leaves out when the message has no room for it (SQS
	// takes MaxAttributes attributes).
	Optional string
}

// DeadLetters reads and replays the dead letters of a queue's redrive dead-letter queue for
// the operator commands. SQS has no peek: a dead letter is read by receiving it (invisible to
// others for Visibility, one more ApproximateReceiveCount) and given back by Release
// (visibility 0) or removed by Delete after its copy was sent. A FIFO queue serves no message
// of a group while one of that group is in flight, so Receive receives everything it is
// offered, holding what it got, and the caller releases it all at the end.
//
// Received messages are described as *azservicebus.ReceivedMessage, the shape the operator
// already lists and copies: SequenceNumber is the dead-letter queue's BrokerSequence, SessionID
// the MessageGroupId, ApplicationProperties the decoded attributes (DeadLetterReason and
// DeadLetterErrorDescription among them, and in DeadLetterReason and
// DeadLetterErrorDescription), DeliveryCount the ApproximateReceiveCount. Safe for concurrent
// use.
type DeadLetters struct {
	cfg DeadLettersConfig

	mu      sync.Mutex
	handles map[int64]string // broker sequence → receipt handle of the latest receive
}

// NewDeadLetters checks cfg and returns a DeadLetters. It connects to nothing.
func NewDeadLetters(cfg DeadLettersConfig) (*DeadLetters, error) {
	if cfg.Client == nil || cfg.QueueURL == "" || cfg.DeadLetterQueueURL == "" {
		return nil, fmt.Errorf("%w: DeadLettersConfig: Client, QueueURL and DeadLetterQueueURL are required", ErrConfig)
	}
	if cfg.Visibility == 0 {
		cfg.Visibility = 60 * time.Second
	}
	if cfg.Visibility < time.Second || cfg.Visibility > 12*time.Hour || cfg.Visibility%time.Second != 0 {
		return nil, fmt.Errorf("%w: DeadLettersConfig.Visibility %s: want whole seconds from 1s to 12h", ErrConfig, cfg.Visibility)
	}
	return &DeadLetters{cfg: cfg, handles: map[int64]string{}}, nil
}

// Target is the queue replayed copies are sent to.
func (d *DeadLetters) Target() string { return d.cfg.QueueURL }

// receiveWait is the long poll of the receives: an empty answer after it means the queue offers
// nothing more now.
const receiveWait = 1

// Receive receives every dead letter the queue offers until a receive returns nothing, each
// invisible to others for Visibility. Messages of a group whose first ones are held stay in the
// queue (FIFO): Visible tells how many were left.
func (d *DeadLetters) Receive(ctx context.Context) ([]*azservicebus.ReceivedMessage, error) {
	var out []*azservicebus.ReceivedMessage
	for {
		res, err := d.cfg.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(d.cfg.DeadLetterQueueURL),
			ReceiveRequestAttemptId:     aws.String(attemptID()),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             receiveWait,
			VisibilityTimeout:           int32(d.cfg.Visibility / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return out, mapErr("sqsadapter: receive from the dead-letter queue "+d.cfg.DeadLetterQueueURL, false, err)
		}
		if len(res.Messages) == 0 {
			return out, nil
		}
		for _, m := range res.Messages {
			out = append(out, d.received(m))
		}
	}
}

// received describes m and remembers its receipt handle.
func (d *DeadLetters) received(m types.Message) *azservicebus.ReceivedMessage {
	msg, _ := toMessage(m) // attributes that do not decode are kept raw
	seq := msg.BrokerSequence
	d.mu.Lock()
	d.handles[seq] = aws.ToString(m.ReceiptHandle)
	d.mu.Unlock()
	r := &azservicebus.ReceivedMessage{
		MessageID: msg.MessageID, Body: msg.Body, ApplicationProperties: msg.Properties,
		SequenceNumber: &seq, DeliveryCount: msg.DeliveryCount, State: azservicebus.MessageStateActive,
	}
	if msg.SessionID != "" {
		r.SessionID = &msg.SessionID
	}
	if !msg.EnqueuedTime.IsZero() {
		t := msg.EnqueuedTime
		r.EnqueuedTime = &t
	}
	if s, ok := msg.Properties[DeadLetterReasonAttribute].(string); ok {
		r.DeadLetterReason = &s
	}
	if s, ok := msg.Properties[DeadLetterDescriptionAttribute].(string); ok {
		r.DeadLetterErrorDescription = &s
	}
	if s, ok := msg.Properties[ContentTypeAttribute].(string); ok {
		r.ContentType = &s
		delete(msg.Properties, ContentTypeAttribute) // the copy carries it again as the content type
	}
	return r
}

// handlesOf returns the entries of msgs' receipt handles, ids by position.
func (d *DeadLetters) handlesOf(msgs []*azservicebus.ReceivedMessage) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, len(msgs))
	for i, m := range msgs {
		if m == nil || m.SequenceNumber == nil {
			return nil, errors.New("sqsadapter: a dead letter without a sequence number")
		}
		h, ok := d.handles[*m.SequenceNumber]
		if !ok {
			return nil, fmt.Errorf("sqsadapter: dead letter %d was not received here", *m.SequenceNumber)
		}
		out[i] = h
	}
	return out, nil
}

// Release makes msgs visible again at once (visibility 0), in batches.
func (d *DeadLetters) Release(ctx context.Context, msgs []*azservicebus.ReceivedMessage) error {
	handles, err := d.handlesOf(msgs)
	if err != nil {
		return err
	}
	var errs []error
	for from := 0; from < len(handles); from += MaxBatch {
		batch := handles[from:min(from+MaxBatch, len(handles))]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, h := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0}
		}
		out, err := d.cfg.Client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(d.cfg.DeadLetterQueueURL), Entries: entries})
		if err != nil {
			errs = append(errs, mapErr("sqsadapter: release dead letters", false, err))
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, wrapKind("sqsadapter: release a dead letter", false, codeKind(aws.ToString(f.Code), aws.ToString(f.Message)),
				&batchErr{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)}))
		}
	}
	return errors.Join(errs...)
}

// Delete removes msgs from the dead-letter queue and returns how many it removed.
func (d *DeadLetters) Delete(ctx context.Context, msgs []*azservicebus.ReceivedMessage) (int, error) {
	handles, err := d.handlesOf(msgs)
	if err != nil {
		return 0, err
	}
	var errs []error
	deleted := 0
	for from := 0; from < len(handles); from += MaxBatch {
		batch := handles[from:min(from+MaxBatch, len(handles))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
		for i, h := range batch {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)}
		}
		out, err := d.cfg.Client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(d.cfg.DeadLetterQueueURL), Entries: entries})
		if err != nil {
			errs = append(errs, mapErr("sqsadapter: delete dead letters", true, err))
			continue
		}
		deleted += len(out.Successful)
		for _, f := range out.Failed {
			errs = append(errs, wrapKind("sqsadapter: delete a dead letter", true, codeKind(aws.ToString(f.Code), aws.ToString(f.Message)),
				&batchErr{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)}))
		}
	}
	return deleted, errors.Join(errs...)
}

// Send sends copies to the queue in order, one group's in batches, and returns how many were
// sent before the first that failed (the ones after it are not sent). A copy's MessageID
// becomes its deduplication id (DeduplicationID); the property Optional is left out of a copy
// that has no room for it.
func (d *DeadLetters) Send(ctx context.Context, copies []*azservicebus.Message) (int, error) {
	sent := 0
	for sent < len(copies) {
		batch := copies[sent:min(sent+MaxBatch, len(copies))]
		entries := make([]types.SendMessageBatchRequestEntry, len(batch))
		for i, c := range batch {
			e, err := entry(d.fit(c))
			if err != nil {
				return sent, err
			}
			e.Id = aws.String(strconv.Itoa(i))
			entries[i] = e
		}
		out, err := d.cfg.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(d.cfg.QueueURL), Entries: entries})
		if err != nil {
			return sent, mapErr("sqsadapter: send replayed copies to "+d.cfg.QueueURL, false, err)
		}
		failed := len(batch)
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < failed {
				failed = i
			}
		}
		sent += failed
		if failed < len(batch) {
			f := out.Failed[0]
			return sent, wrapKind("sqsadapter: send a replayed copy to "+d.cfg.QueueURL, false, codeKind(aws.ToString(f.Code), aws.ToString(f.Message)),
				&batchErr{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)})
		}
	}
	return sent, nil
}

// fit leaves the Optional property out of c when c has more properties than SQS takes.
func (d *DeadLetters) fit(c *azservicebus.Message) *azservicebus.Message {
	n := len(c.ApplicationProperties)
	if c.ContentType != nil && *c.ContentType != "" {
		n++
	}
	if _, ok := c.ApplicationProperties[d.cfg.Optional]; !ok || n <= MaxAttributes {
		return c
	}
	cp := *c
	cp.ApplicationProperties = make(map[string]any, len(c.ApplicationProperties))
	for k, v := range c.ApplicationProperties {
		if k != d.cfg.Optional {
			cp.ApplicationProperties[k] = v
		}
	}
	return &cp
}

// InFlight returns how many messages of the dead-letter queue are in flight (SQS's approximate
// count), received by anyone and neither deleted nor released.
func (d *DeadLetters) InFlight(ctx context.Context) (int, error) {
	return d.count(ctx, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
}

// Visible returns how many messages of the dead-letter queue are visible (SQS's approximate
// count): after Receive, those held back behind their groups' messages in flight.
func (d *DeadLetters) Visible(ctx context.Context) (int, error) {
	return d.count(ctx, types.QueueAttributeNameApproximateNumberOfMessages)
}

// count reads one count of the dead-letter queue.
func (d *DeadLetters) count(ctx context.Context, name types.QueueAttributeName) (int, error) {
	out, err := d.cfg.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(d.cfg.DeadLetterQueueURL), AttributeNames: []types.QueueAttributeName{name},
	})
	if err != nil {
		return 0, mapErr("sqsadapter: count the dead-letter queue "+d.cfg.DeadLetterQueueURL, false, err)
	}
	n, err := strconv.Atoi(out.Attributes[string(name)])
	if err != nil {
		return 0, fmt.Errorf("sqsadapter: %s of %s: %w", name, d.cfg.DeadLetterQueueURL, err)
	}
	return n, nil
}
