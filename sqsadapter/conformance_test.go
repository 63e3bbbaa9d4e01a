package sqsadapter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	"github.com/seqbus/seqbus/sqsadapter"
)

// publisher sends to a FIFO queue with the adapter's attribute encoding, the group as the
// session.
type publisher struct {
	c   *awssqs.Client
	url string
}

var dedup atomic.Int64

func (p publisher) Publish(ctx context.Context, sessionID string, props map[string]any, body []byte) error {
	attrs, err := sqsadapter.EncodeAttributes(props)
	if err != nil {
		return err
	}
	_, err = p.c.SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl: aws.String(p.url), MessageGroupId: aws.String(sessionID),
		MessageDeduplicationId: aws.String(fmt.Sprint("m-", dedup.Add(1))),
		MessageBody:            aws.String(string(body)), MessageAttributes: attrs,
	})
	return err
}

// newSource creates a queue with a dead-letter queue on l and a Source over it, closed when the
// test ends.
func newSource(t testing.TB, l *local, cfg sqsadapter.Config) (*sqsadapter.Source, publisher) {
	t.Helper()
	url, _ := l.queue(t, 100)
	cfg.Client, cfg.QueueURL = l.Client, url
	src, err := sqsadapter.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, src.Close(ctx))
	})
	return src, publisher{c: l.Client, url: url}
}

// deadLetters receives what the dead-letter queue holds of a group.
func deadLetters(ctx context.Context, c *awssqs.Client, dlq, group string) ([]sequencertest.DeadLettered, error) {
	var out []sequencertest.DeadLettered
	for {
		res, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil || len(res.Messages) == 0 {
			return out, err
		}
		for _, m := range res.Messages {
			if m.Attributes["MessageGroupId"] != group {
				continue
			}
			props, err := sqsadapter.DecodeAttributes(m.MessageAttributes)
			if err != nil {
				return nil, err
			}
			reason, _ := props[sqsadapter.DeadLetterReasonAttribute].(string)
			desc, _ := props[sqsadapter.DeadLetterDescriptionAttribute].(string)
			out = append(out, sequencertest.DeadLettered{SessionID: group, Body: []byte(aws.ToString(m.Body)),
				Properties: props, Reason: reason, Description: desc})
		}
	}
}

// TestSessionConformance runs the provider suite on the adapter over a local SQS FIFO: the
// suite the fake broker and the Service Bus adapter pass, without their capabilities (SQS has
// no deferral, no peek, no session state), and with the dead-letter queue checked.
func TestSessionConformance(t *testing.T) {
	t.Parallel()
	for _, deletes := range []sqsadapter.Deletes{sqsadapter.DeleteEach, sqsadapter.DeleteAtClose} {
		t.Run(deletes.String(), func(t *testing.T) {
			t.Parallel()
			l := newLocal(t, nil)
			var caps sequencer.Capabilities
			if deletes == sqsadapter.DeleteAtClose {
				caps.CompletionsAtClose = sqsadapter.MaxReceive
			}
			sequencertest.RunSessionConformance(t, func(t *testing.T) (sequencer.SessionSource, sequencertest.Publisher) {
				return newSource(t, l, sqsadapter.Config{Visibility: 2 * time.Second, Wait: time.Second, Deletes: deletes})
			}, &sequencertest.ConformanceOptions{
				Wait:         3 * time.Second,
				Capabilities: caps,
				DeadLetters: func(ctx context.Context, src sequencer.SessionSource, sessionID string) ([]sequencertest.DeadLettered, error) {
					return deadLetters(ctx, l.Client, src.(*sqsadapter.Source).DeadLetterQueueURL(), sessionID)
				},
			})
		})
	}
}
