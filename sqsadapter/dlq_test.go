package sqsadapter_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sqsadapter"
)

// dlqCounts returns the visible and in-flight messages of queueURL.
func dlqCounts(t *testing.T, l *local, queueURL string) (visible, inFlight int) {
	t.Helper()
	out, err := l.Client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	v, err := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
	require.NoError(t, err)
	f, err := strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
	require.NoError(t, err)
	return v, f
}

// deadLettered puts n dead letters of group into the dead-letter queue as DeadLetter leaves
// them: the message's attributes plus the reason and the description.
func deadLettered(t *testing.T, l *local, dlq, group string, n int) {
	t.Helper()
	s, err := sqsadapter.NewSender(l.Client, dlq)
	require.NoError(t, err)
	var msgs []*azservicebus.Message
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%d", group, i)
		msgs = append(msgs, &azservicebus.Message{SessionID: &group, MessageID: &id, Body: fmt.Appendf(nil, "body %d", i),
			ApplicationProperties: map[string]any{"Sequence": int64(i), "DeadLetterReason": "HandlerFailed", "DeadLetterErrorDescription": "status 500"}})
	}
	_, err = s.SendMessages(t.Context(), msgs)
	require.NoError(t, err)
}

// Receive reads what a FIFO dead-letter queue offers, a prefix of each group, and Visible counts
// the rest; Release gives everything back at once, and a second read sees the same.
func TestDeadLettersReceiveRelease(t *testing.T) {
	l := newLocal(t, nil)
	queue, dlq := l.queue(t, 50)
	deadLettered(t, l, dlq, "a", 12)
	deadLettered(t, l, dlq, "b", 3)
	d, err := sqsadapter.NewDeadLetters(sqsadapter.DeadLettersConfig{Client: l.Client, QueueURL: queue, DeadLetterQueueURL: dlq})
	require.NoError(t, err)
	require.Equal(t, queue, d.Target())

	read := func() map[string][]int64 {
		msgs, err := d.Receive(t.Context())
		require.NoError(t, err)
		got := map[string][]int64{}
		for _, m := range msgs {
			require.Equal(t, "HandlerFailed", *m.DeadLetterReason)
			require.Equal(t, "status 500", *m.DeadLetterErrorDescription)
			require.NotNil(t, m.SequenceNumber)
			got[*m.SessionID] = append(got[*m.SessionID], m.ApplicationProperties["Sequence"].(int64))
		}
		visible, err := d.Visible(t.Context())
		require.NoError(t, err)
		require.Equal(t, 15-len(msgs), visible, "what was not read is counted")
		require.NoError(t, d.Release(t.Context(), msgs))
		v, f := dlqCounts(t, l, dlq)
		require.Equal(t, 15, v, "every dead letter is visible again")
		require.Zero(t, f)
		return got
	}
	first := read()
	require.Equal(t, []int64{1, 2, 3}, first["b"])
	require.NotEmpty(t, first["a"])
	require.Less(t, len(first["a"]), 12, "a FIFO queue serves no more of a group while its first are in flight")
	for i, seq := range first["a"] {
		require.Equal(t, int64(i+1), seq, "a prefix of the group, in order")
	}
	require.Equal(t, first, read(), "a listing loses nothing and changes nothing")
}

// Send puts copies into the queue in order under their deduplication ids (a copy sent again is
// dropped), leaves the optional property out of a copy without room for it, and Delete removes
// the originals.
func TestDeadLettersSendDelete(t *testing.T) {
	l := newLocal(t, nil)
	queue, dlq := l.queue(t, 50)
	deadLettered(t, l, dlq, "a", 3)
	d, err := sqsadapter.NewDeadLetters(sqsadapter.DeadLettersConfig{Client: l.Client, QueueURL: queue, DeadLetterQueueURL: dlq, Optional: "replayed"})
	require.NoError(t, err)
	msgs, err := d.Receive(t.Context())
	require.NoError(t, err)
	require.Len(t, msgs, 3)

	group := "a"
	var copies []*azservicebus.Message
	for i, m := range msgs {
		id := fmt.Sprintf("%s/dlq-%d", m.MessageID, *m.SequenceNumber)
		props := map[string]any{"Sequence": m.ApplicationProperties["Sequence"], "replayed": "q"}
		if i == 2 { // ten attributes of its own: no room for the optional one
			for k := range 9 {
				props[fmt.Sprintf("p%d", k)] = "x"
			}
		}
		copies = append(copies, &azservicebus.Message{MessageID: &id, SessionID: &group, Body: m.Body, ApplicationProperties: props})
	}
	n, err := d.Send(t.Context(), copies)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = d.Send(t.Context(), copies[:1]) // a replay run again after a crash
	require.NoError(t, err)
	require.Equal(t, 1, n)
	deleted, err := d.Delete(t.Context(), msgs)
	require.NoError(t, err)
	require.Equal(t, 3, deleted)
	v, f := dlqCounts(t, l, dlq)
	require.Zero(t, v+f, "the originals are gone")

	out, err := l.Client.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Len(t, out.Messages, 3, "the copy sent again is dropped by deduplication")
	for i, m := range out.Messages {
		require.Equal(t, "a", m.Attributes["MessageGroupId"])
		require.Equal(t, strconv.Itoa(i+1), aws.ToString(m.MessageAttributes["Sequence"].StringValue), "in order")
		require.Equal(t, fmt.Sprintf("body %d", i+1), aws.ToString(m.Body))
		_, optional := m.MessageAttributes["replayed"]
		require.Equal(t, i < 2, optional, "copy %d", i)
		require.LessOrEqual(t, len(m.MessageAttributes), sqsadapter.MaxAttributes)
	}
}

func TestNewDeadLettersRefuses(t *testing.T) {
	l := newLocal(t, nil)
	for _, cfg := range []sqsadapter.DeadLettersConfig{
		{QueueURL: "q", DeadLetterQueueURL: "d"},
		{Client: l.Client, DeadLetterQueueURL: "d"},
		{Client: l.Client, QueueURL: "q"},
		{Client: l.Client, QueueURL: "q", DeadLetterQueueURL: "d", Visibility: 1500 * time.Millisecond},
	} {
		_, err := sqsadapter.NewDeadLetters(cfg)
		require.ErrorIs(t, err, sqsadapter.ErrConfig)
	}
}
