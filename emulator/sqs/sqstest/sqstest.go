package sqstest

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

// Target is one server under test.
type Target struct {
	// Endpoint is the base URL the SDK sends its requests to, e.g. http://127.0.0.1:9324.
	Endpoint string
	// Advance moves the server's clock forward by d. Nil means the server runs on the
	// wall clock: the suite then waits in real time and skips the cases that need minutes.
	Advance func(d time.Duration)
}

// Run runs the conformance suite. newTarget is called once per case and may return the
// same server each time: every case works on queues with names of its own.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t)
			c.run(t, newEnv(t, tg))
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"QueueLifecycle", testQueueLifecycle},
	{"CreateQueueRefusals", testCreateQueueRefusals},
	{"SetQueueAttributes", testSetQueueAttributes},
	{"UnknownQueue", testUnknownQueue},
	{"SendRefusals", testSendRefusals},
	{"OrderWithinGroupAndAttributes", testOrderAndAttributes},
	{"GroupBlockedWhileInFlight", testGroupBlocked},
	{"VisibilityLapseRedelivers", testVisibilityLapse},
	{"ChangeMessageVisibility", testChangeVisibility},
	{"DeduplicationByID", testDedupByID},
	{"DeduplicationByContent", testDedupByContent},
	{"DeduplicationWindowEnds", testDedupWindowEnds},
	{"RedriveToFIFODeadLetterQueue", testRedrive},
	{"LongPoll", testLongPoll},
	{"Batches", testBatches},
	{"PurgeQueue", testPurge},
	{"ReceiveRequestAttemptID", testReceiveAttempt},
	{"DeduplicationScopeMessageGroup", testDedupScopeGroup},
	{"QueueDelayAndRetention", testDelayAndRetention},
	{"LongPollEndsEmpty", testLongPollEmpty},
	{"ConcurrentConsumersKeepGroupOrder", testConcurrentConsumers},
	{"QueueDeletedRecently", testDeletedRecently},
	{"ListQueuesPages", testListQueuesPages},
	{"DeadLetterRetentionFromMove", testDeadLetterRetention},
}

// env is one case's client and helpers.
type env struct {
	t   *testing.T
	tg  Target
	c   *sqs.Client
	ctx context.Context
}

var queueSeq atomic.Int64

func newEnv(t *testing.T, tg Target) *env {
	c := sqs.New(sqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(tg.Endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("AKIDSQSTEST", "secret", ""),
		RetryMaxAttempts: 1,
	})
	return &env{t: t, tg: tg, c: c, ctx: t.Context()}
}

// name returns a queue name unique to this run.
func (e *env) name(base string) string {
	return fmt.Sprintf("%s-%d-%d.fifo", base, time.Now().UnixNano()%1e9, queueSeq.Add(1))
}

// fifo creates a FIFO queue with the given extra attributes and returns its URL.
func (e *env) fifo(base string, attrs map[string]string) string {
	e.t.Helper()
	a := map[string]string{"FifoQueue": "true"}
	for k, v := range attrs {
		a[k] = v
	}
	out, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(e.name(base)), Attributes: a})
	require.NoError(e.t, err, "CreateQueue")
	require.NotEmpty(e.t, aws.ToString(out.QueueUrl))
	return aws.ToString(out.QueueUrl)
}

func (e *env) send(url, group, dedup, body string) *sqs.SendMessageOutput {
	e.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String(group)}
	if dedup != "" {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	out, err := e.c.SendMessage(e.ctx, in)
	require.NoError(e.t, err, "SendMessage %q", body)
	return out
}

// receive makes one ReceiveMessage call without waiting.
func (e *env) receive(url string, max, visibility int32) []types.Message {
	e.t.Helper()
	out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max, VisibilityTimeout: visibility,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	require.NoError(e.t, err, "ReceiveMessage")
	return out.Messages
}

// receiveAfter lets d pass on the server's clock (or waits for it in real time) and
// then receives, polling with short long-polls for at most d plus 10 seconds when
// the server runs on the wall clock.
func (e *env) receiveAfter(url string, d time.Duration, max, visibility int32) []types.Message {
	e.t.Helper()
	if e.tg.Advance != nil {
		e.tg.Advance(d)
		return e.receive(url, max, visibility)
	}
	deadline := time.Now().Add(d + 10*time.Second)
	for time.Now().Before(deadline) {
		out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: max, VisibilityTimeout: visibility, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(e.t, err, "ReceiveMessage")
		if len(out.Messages) > 0 {
			return out.Messages
		}
	}
	return nil
}

func (e *env) needsClock() {
	if e.tg.Advance == nil {
		e.t.Skip("needs minutes to pass: runs only against a server with an injected clock")
	}
}

func (e *env) delete(url string, m types.Message) {
	e.t.Helper()
	_, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	require.NoError(e.t, err, "DeleteMessage %q", aws.ToString(m.Body))
}

func (e *env) attrs(url string, names ...types.QueueAttributeName) map[string]string {
	e.t.Helper()
	out, err := e.c.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	require.NoError(e.t, err, "GetQueueAttributes")
	return out.Attributes
}

func bodies(ms []types.Message) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// requireCode checks that err is an API error with the given code.
func requireCode(t *testing.T, err error, code string, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "not an API error: %v", err)
	require.Equal(t, code, ae.ErrorCode(), "%v", err)
}

func testQueueLifecycle(t *testing.T, e *env) {
	name := e.name("life")
	attrs := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "45"}
	created, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	url := aws.ToString(created.QueueUrl)
	require.True(t, strings.HasSuffix(url, "/"+name), url)

	again, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err, "CreateQueue with the same attributes returns the queue")
	require.Equal(t, url, aws.ToString(again.QueueUrl))

	_, err = e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "46"}})
	var exists *types.QueueNameExists
	require.ErrorAs(t, err, &exists, "CreateQueue with other attributes")

	got, err := e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	require.NoError(t, err)
	require.Equal(t, url, aws.ToString(got.QueueUrl))

	a := e.attrs(url, types.QueueAttributeNameAll)
	require.Equal(t, "true", a["FifoQueue"])
	require.Equal(t, "45", a["VisibilityTimeout"])
	require.Equal(t, "false", a["ContentBasedDeduplication"])
	require.Equal(t, "0", a["ApproximateNumberOfMessages"])
	require.True(t, strings.HasPrefix(a["QueueArn"], "arn:aws:sqs:"), a["QueueArn"])
	require.True(t, strings.HasSuffix(a["QueueArn"], ":"+name), a["QueueArn"])
	for _, k := range []string{"DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds", "CreatedTimestamp", "LastModifiedTimestamp"} {
		require.Contains(t, a, k)
	}
	one := e.attrs(url, types.QueueAttributeNameVisibilityTimeout)
	require.Equal(t, map[string]string{"VisibilityTimeout": "45"}, one)

	prefix := strings.TrimSuffix(name, ".fifo")
	listed, err := e.c.ListQueues(e.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	require.NoError(t, err)
	require.Equal(t, []string{url}, listed.QueueUrls)

	_, err = e.c.DeleteQueue(e.ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	require.NoError(t, err)
	_, err = e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing, "GetQueueUrl after DeleteQueue")
}

func testCreateQueueRefusals(t *testing.T, e *env) {
	for _, tc := range []struct {
		name  string
		queue string
		attrs map[string]string
		code  string
	}{
		{"FIFO without the .fifo suffix", "plain-" + strconv.Itoa(int(queueSeq.Add(1))), map[string]string{"FifoQueue": "true"}, "InvalidParameterValue"},
		{"name with a space", "bad name.fifo", map[string]string{"FifoQueue": "true"}, "InvalidParameterValue"},
		{"name too long", strings.Repeat("n", 76) + ".fifo", map[string]string{"FifoQueue": "true"}, "InvalidParameterValue"},
		{"visibility timeout over 12 hours", e.name("vt"), map[string]string{"FifoQueue": "true", "VisibilityTimeout": "43201"}, "InvalidAttributeValue"},
		{"negative delay", e.name("delay"), map[string]string{"FifoQueue": "true", "DelaySeconds": "-1"}, "InvalidAttributeValue"},
		{"unknown attribute", e.name("unknown"), map[string]string{"FifoQueue": "true", "NoSuchAttribute": "1"}, "InvalidAttributeName"},
		{"redrive to a missing queue", e.name("redrive"), map[string]string{"FifoQueue": "true",
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:missing-dlq.fifo","maxReceiveCount":"3"}`}, "InvalidParameterValue"},
	} {
		_, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(tc.queue), Attributes: tc.attrs})
		requireCode(t, err, tc.code, tc.name)
	}
}

func testSetQueueAttributes(t *testing.T, e *env) {
	url := e.fifo("set", nil)
	_, err := e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
		Attributes: map[string]string{"VisibilityTimeout": "120", "ContentBasedDeduplication": "true"}})
	require.NoError(t, err)
	a := e.attrs(url, types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameContentBasedDeduplication)
	require.Equal(t, map[string]string{"VisibilityTimeout": "120", "ContentBasedDeduplication": "true"}, a)

	_, err = e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
		Attributes: map[string]string{"ReceiveMessageWaitTimeSeconds": "21"}})
	requireCode(t, err, "InvalidAttributeValue", "ReceiveMessageWaitTimeSeconds 21")
	require.Equal(t, "120", e.attrs(url, types.QueueAttributeNameVisibilityTimeout)["VisibilityTimeout"], "a refused change changes nothing")
}

func testUnknownQueue(t *testing.T, e *env) {
	url := e.fifo("gone", nil)
	_, err := e.c.DeleteQueue(e.ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	require.NoError(t, err)
	_, err = e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing)
	require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", missing.ErrorCode())
	_, err = e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
	require.ErrorAs(t, err, &missing)
	_, err = e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("never-created.fifo")})
	require.ErrorAs(t, err, &missing)
}

func testSendRefusals(t *testing.T, e *env) {
	url := e.fifo("refuse", nil)
	for _, tc := range []struct {
		name string
		in   sqs.SendMessageInput
		code string
	}{
		{"no MessageGroupId", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageDeduplicationId: aws.String("d1")}, "MissingParameter"},
		{"no deduplication id without content-based deduplication", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String("g")}, "InvalidParameterValue"},
		{"per-message delay", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d2"), DelaySeconds: 5}, "InvalidParameterValue"},
		{"group id too long", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String(strings.Repeat("g", 129)), MessageDeduplicationId: aws.String("d3")}, "InvalidParameterValue"},
		{"control character in the body", sqs.SendMessageInput{MessageBody: aws.String("a\x01b"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d4")}, "InvalidMessageContents"},
		{"attribute of an unknown data type", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d5"),
			MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("Float"), StringValue: aws.String("1.5")}}}, "InvalidParameterValue"},
		{"attribute name starting with AWS.", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d6"),
			MessageAttributes: map[string]types.MessageAttributeValue{"AWS.k": {DataType: aws.String("String"), StringValue: aws.String("v")}}}, "InvalidParameterValue"},
		{"Number attribute that is not a number", sqs.SendMessageInput{MessageBody: aws.String("a"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d7"),
			MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("one")}}}, "InvalidParameterValue"},
	} {
		in := tc.in
		in.QueueUrl = aws.String(url)
		_, err := e.c.SendMessage(e.ctx, &in)
		requireCode(t, err, tc.code, tc.name)
	}
	require.Empty(t, e.receive(url, 10, 30), "nothing refused reached the queue")
}

func testOrderAndAttributes(t *testing.T, e *env) {
	url := e.fifo("order", nil)
	var seqs []string
	for i := range 5 {
		body := fmt.Sprintf("m%d", i)
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String("g1"),
			MessageDeduplicationId: aws.String(body),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"seq":  {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(i))},
				"last": {DataType: aws.String("String"), StringValue: aws.String(strconv.FormatBool(i == 4))},
				"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, byte(i), 0xff}},
			}}
		out, err := e.c.SendMessage(e.ctx, in)
		require.NoError(t, err)
		sum := md5.Sum([]byte(body))
		require.Equal(t, hex.EncodeToString(sum[:]), aws.ToString(out.MD5OfMessageBody))
		require.NotEmpty(t, aws.ToString(out.MD5OfMessageAttributes))
		require.NotEmpty(t, aws.ToString(out.MessageId))
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}
	for i := 1; i < len(seqs); i++ {
		require.True(t, seqLess(seqs[i-1], seqs[i]), "SequenceNumber rises: %q then %q", seqs[i-1], seqs[i])
	}
	got := e.receive(url, 10, 30)
	require.Equal(t, []string{"m0", "m1", "m2", "m3", "m4"}, bodies(got))
	for i, m := range got {
		require.Equal(t, "g1", m.Attributes["MessageGroupId"])
		require.Equal(t, fmt.Sprintf("m%d", i), m.Attributes["MessageDeduplicationId"])
		require.Equal(t, seqs[i], m.Attributes["SequenceNumber"])
		require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"])
		require.Contains(t, m.Attributes, "SentTimestamp")
		require.Contains(t, m.Attributes, "ApproximateFirstReceiveTimestamp")
		require.Contains(t, m.Attributes, "SenderId")
		require.Equal(t, strconv.Itoa(i), aws.ToString(m.MessageAttributes["seq"].StringValue))
		require.Equal(t, "Number", aws.ToString(m.MessageAttributes["seq"].DataType))
		require.Equal(t, strconv.FormatBool(i == 4), aws.ToString(m.MessageAttributes["last"].StringValue))
		require.Equal(t, []byte{0, byte(i), 0xff}, m.MessageAttributes["blob"].BinaryValue)
		require.NotEmpty(t, aws.ToString(m.MD5OfMessageAttributes))
	}

	// Only the attributes asked for come back.
	for _, m := range got {
		_, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
	}
	out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1,
		MessageAttributeNames:       []string{"seq"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSequenceNumber}})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	m := out.Messages[0]
	require.Equal(t, map[string]string{"SequenceNumber": seqs[0]}, m.Attributes)
	require.Len(t, m.MessageAttributes, 1)
	require.Contains(t, m.MessageAttributes, "seq")
}

// seqLess compares two decimal sequence numbers of any length.
func seqLess(a, b string) bool {
	if len(a) != len(b) {
		return len(strings.TrimLeft(a, "0")) < len(strings.TrimLeft(b, "0"))
	}
	return a < b
}

func testGroupBlocked(t *testing.T, e *env) {
	url := e.fifo("blocked", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "A", "", "a1")
	e.send(url, "A", "", "a2")
	e.send(url, "B", "", "b1")

	first := e.receive(url, 1, 30)
	require.Equal(t, []string{"a1"}, bodies(first))
	require.Equal(t, []string{"b1"}, bodies(e.receive(url, 10, 30)), "group A is blocked while a1 is in flight")
	require.Empty(t, e.receive(url, 10, 30), "both groups in flight")

	a := e.attrs(url, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	require.Equal(t, "1", a["ApproximateNumberOfMessages"])
	require.Equal(t, "2", a["ApproximateNumberOfMessagesNotVisible"])

	e.delete(url, first[0])
	require.Equal(t, []string{"a2"}, bodies(e.receive(url, 10, 30)), "deleting a1 unblocks group A")
}

func testVisibilityLapse(t *testing.T, e *env) {
	url := e.fifo("lapse", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "g", "", "x1")
	e.send(url, "g", "", "x2")
	first := e.receive(url, 1, 1)
	require.Equal(t, []string{"x1"}, bodies(first))
	require.Empty(t, e.receive(url, 10, 30), "x2 waits behind x1 in flight")

	again := e.receiveAfter(url, 1100*time.Millisecond, 1, 30)
	require.Equal(t, []string{"x1"}, bodies(again), "the lapsed message comes back first, in order")
	require.Equal(t, "2", again[0].Attributes["ApproximateReceiveCount"])
	require.NotEqual(t, aws.ToString(first[0].ReceiptHandle), aws.ToString(again[0].ReceiptHandle))

	_, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle})
	requireCode(t, err, "InvalidParameterValue", "a receipt handle of an earlier receive has expired")
	e.delete(url, again[0])
	require.Equal(t, []string{"x2"}, bodies(e.receive(url, 10, 30)))

	_, err = e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("not-a-receipt-handle")})
	var invalid *types.ReceiptHandleIsInvalid
	require.ErrorAs(t, err, &invalid)
}

func testChangeVisibility(t *testing.T, e *env) {
	url := e.fifo("cmv", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "g", "", "y1")
	got := e.receive(url, 1, 30)
	require.Len(t, got, 1)
	h := got[0].ReceiptHandle

	_, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 43201})
	requireCode(t, err, "InvalidParameterValue", "over 12 hours")

	if e.tg.Advance != nil {
		e.tg.Advance(10 * time.Second)
		_, err = e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 43200})
		requireCode(t, err, "InvalidParameterValue", "more than 12 hours from the receive")
		_, err = e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 43190})
		require.NoError(t, err, "exactly 12 hours from the receive")
		_, err = e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 3600})
		require.NoError(t, err)
		e.tg.Advance(40 * time.Second)
		require.Empty(t, e.receive(url, 10, 30), "the extension holds past the receive's 30 s")
		e.tg.Advance(3600 * time.Second)
		again := e.receive(url, 1, 30)
		require.Equal(t, []string{"y1"}, bodies(again), "and lapses when it ends")
		h = again[0].ReceiptHandle
	}

	_, err = e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 0})
	require.NoError(t, err)
	released := e.receive(url, 1, 1)
	require.Equal(t, []string{"y1"}, bodies(released), "visibility 0 makes the message visible at once")

	require.NotEmpty(t, e.receiveAfter(url, 1100*time.Millisecond, 1, 30), "lapsed again")
	_, err = e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: released[0].ReceiptHandle, VisibilityTimeout: 10})
	require.Error(t, err, "a receipt handle of an earlier receive cannot change the visibility")
}

func testDedupByID(t *testing.T, e *env) {
	url := e.fifo("dedupid", nil)
	first := e.send(url, "g", "same", "one")
	second := e.send(url, "g", "same", "two")
	require.Equal(t, aws.ToString(first.MessageId), aws.ToString(second.MessageId), "a duplicate is accepted and answered with the first message's id")
	e.send(url, "h", "other", "three")
	got := e.receive(url, 10, 30)
	require.ElementsMatch(t, []string{"one", "three"}, bodies(got))
	for _, m := range got {
		e.delete(url, m)
	}
	e.send(url, "g", "same", "four")
	require.Empty(t, e.receive(url, 10, 30), "the id is remembered after the message is deleted")
}

func testDedupByContent(t *testing.T, e *env) {
	url := e.fifo("dedupbody", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "g", "", "body")
	e.send(url, "g2", "", "body")
	e.send(url, "g", "", "other")
	e.send(url, "g", "explicit", "body")
	got := e.receive(url, 10, 30)
	require.Equal(t, []string{"body", "other", "body"}, bodies(got), "an explicit id wins over the content")
	require.Equal(t, "explicit", got[2].Attributes["MessageDeduplicationId"])
}

func testDedupWindowEnds(t *testing.T, e *env) {
	e.needsClock()
	url := e.fifo("window", nil)
	e.send(url, "g", "d", "one")
	e.tg.Advance(4 * time.Minute)
	e.send(url, "g", "d", "dropped")
	e.tg.Advance(61 * time.Second)
	e.send(url, "g", "d", "two")
	require.Equal(t, []string{"one", "two"}, bodies(e.receive(url, 10, 30)), "the window is 5 minutes from the first send")
}

func testRedrive(t *testing.T, e *env) {
	dlq := e.fifo("dlq", nil)
	arn := e.attrs(dlq, types.QueueAttributeNameQueueArn)["QueueArn"]
	url := e.fifo("src", map[string]string{"ContentBasedDeduplication": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, arn)})
	sent := e.send(url, "g", "", "poison")
	e.send(url, "g", "", "next")

	for range 2 {
		got := e.receive(url, 1, 30)
		require.Equal(t, []string{"poison"}, bodies(got))
		_, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
	}
	got := e.receive(url, 1, 30)
	require.Equal(t, []string{"next"}, bodies(got), "after maxReceiveCount receives the message moves, and its group goes on")

	dead := e.receive(dlq, 10, 30)
	require.Len(t, dead, 1)
	require.Equal(t, "poison", aws.ToString(dead[0].Body))
	require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(dead[0].MessageId))
	require.Equal(t, "g", dead[0].Attributes["MessageGroupId"])
	require.Equal(t, sent.SequenceNumber != nil, dead[0].Attributes["SequenceNumber"] != "")

	standardArn := strings.TrimSuffix(arn, ".fifo")
	_, err := e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
		Attributes: map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, standardArn)}})
	requireCode(t, err, "InvalidParameterValue", "a FIFO queue's dead-letter queue must be a FIFO queue that exists")
	_, err = e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
		Attributes: map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":0}`, arn)}})
	requireCode(t, err, "InvalidParameterValue", "maxReceiveCount 0")
}

func testLongPoll(t *testing.T, e *env) {
	url := e.fifo("poll", map[string]string{"ContentBasedDeduplication": "true"})
	type result struct {
		msgs []types.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20, MaxNumberOfMessages: 10})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{msgs: out.Messages}
	}()
	// The receive may start before or after the send: either way it must return the message.
	e.send(url, "g", "", "awaited")
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, []string{"awaited"}, bodies(r.msgs))
	case <-time.After(15 * time.Second):
		t.Fatal("a long poll did not return a message sent while it waited")
	}

	_, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 21})
	requireCode(t, err, "InvalidParameterValue", "WaitTimeSeconds 21")
	_, err = e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
	requireCode(t, err, "InvalidParameterValue", "MaxNumberOfMessages 11")
}

func testBatches(t *testing.T, e *env) {
	url := e.fifo("batch", nil)
	out, err := e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("b1"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("1")},
		{Id: aws.String("b"), MessageBody: aws.String("b2"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("2")},
		{Id: aws.String("c"), MessageBody: aws.String("b3"), MessageDeduplicationId: aws.String("3")},
	}})
	require.NoError(t, err)
	require.Len(t, out.Successful, 2)
	for _, ok := range out.Successful {
		require.NotEmpty(t, aws.ToString(ok.MessageId))
		require.NotEmpty(t, aws.ToString(ok.SequenceNumber))
		require.Len(t, aws.ToString(ok.MD5OfMessageBody), 32)
	}
	require.True(t, seqLess(aws.ToString(out.Successful[0].SequenceNumber), aws.ToString(out.Successful[1].SequenceNumber)))
	require.Len(t, out.Failed, 1)
	require.Equal(t, "c", aws.ToString(out.Failed[0].Id))
	require.Equal(t, "MissingParameter", aws.ToString(out.Failed[0].Code))
	require.True(t, out.Failed[0].SenderFault)

	_, err = e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("x"), MessageBody: aws.String("1"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("4")},
		{Id: aws.String("x"), MessageBody: aws.String("2"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("5")},
	}})
	var notDistinct *types.BatchEntryIdsNotDistinct
	require.ErrorAs(t, err, &notDistinct)
	entries := make([]types.SendMessageBatchRequestEntry, 11)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("m"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("e" + strconv.Itoa(i))}
	}
	_, err = e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	var tooMany *types.TooManyEntriesInBatchRequest
	require.ErrorAs(t, err, &tooMany)

	got := e.receive(url, 10, 30)
	require.Equal(t, []string{"b1", "b2"}, bodies(got))
	cv, err := e.c.ChangeMessageVisibilityBatch(e.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("1"), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 60},
		{Id: aws.String("2"), ReceiptHandle: aws.String("garbage"), VisibilityTimeout: 60},
	}})
	require.NoError(t, err)
	require.Len(t, cv.Successful, 1)
	require.Len(t, cv.Failed, 1)
	require.Equal(t, "ReceiptHandleIsInvalid", aws.ToString(cv.Failed[0].Code))

	del, err := e.c.DeleteMessageBatch(e.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("1"), ReceiptHandle: got[0].ReceiptHandle},
		{Id: aws.String("2"), ReceiptHandle: got[1].ReceiptHandle},
		{Id: aws.String("3"), ReceiptHandle: aws.String("garbage")},
	}})
	require.NoError(t, err)
	require.Len(t, del.Successful, 2)
	require.Len(t, del.Failed, 1)
	require.Equal(t, "3", aws.ToString(del.Failed[0].Id))
	require.Equal(t, "0", e.attrs(url, types.QueueAttributeNameApproximateNumberOfMessages)["ApproximateNumberOfMessages"])
}

func testPurge(t *testing.T, e *env) {
	url := e.fifo("purge", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "g", "", "p1")
	e.send(url, "h", "", "p2")
	require.Len(t, e.receive(url, 1, 30), 1)
	_, err := e.c.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
	require.NoError(t, err)
	a := e.attrs(url, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	require.Equal(t, map[string]string{"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}, a)
	_, err = e.c.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
	var inProgress *types.PurgeQueueInProgress
	require.ErrorAs(t, err, &inProgress, "a second purge within 60 seconds")
	if e.tg.Advance != nil {
		e.tg.Advance(61 * time.Second)
		_, err = e.c.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		require.NoError(t, err)
	}
}

func testReceiveAttempt(t *testing.T, e *env) {
	url := e.fifo("attempt", map[string]string{"ContentBasedDeduplication": "true"})
	e.send(url, "g", "", "r1")
	e.send(url, "h", "", "r2")
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, ReceiveRequestAttemptId: aws.String("attempt-1")}
	first, err := e.c.ReceiveMessage(e.ctx, in)
	require.NoError(t, err)
	require.Len(t, first.Messages, 2)
	retry, err := e.c.ReceiveMessage(e.ctx, in)
	require.NoError(t, err)
	require.Equal(t, bodies(first.Messages), bodies(retry.Messages), "a retry with the same attempt id returns the same messages")
	for i := range first.Messages {
		require.Equal(t, aws.ToString(first.Messages[i].ReceiptHandle), aws.ToString(retry.Messages[i].ReceiptHandle))
	}
	other, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, ReceiveRequestAttemptId: aws.String("attempt-2")})
	require.NoError(t, err)
	require.Empty(t, other.Messages, "another attempt id receives anew")
}

func testDedupScopeGroup(t *testing.T, e *env) {
	url := e.fifo("scope", map[string]string{"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})
	e.send(url, "g", "same", "in g")
	e.send(url, "h", "same", "in h")
	e.send(url, "g", "same", "again in g")
	require.ElementsMatch(t, []string{"in g", "in h"}, bodies(e.receive(url, 10, 30)), "the same id in another group is not a duplicate")

	_, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(e.name("scopebad")),
		Attributes: map[string]string{"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"}})
	requireCode(t, err, "InvalidParameterValue", "perMessageGroupId needs DeduplicationScope messageGroup")
}

func testDelayAndRetention(t *testing.T, e *env) {
	e.needsClock()
	url := e.fifo("delay", map[string]string{"ContentBasedDeduplication": "true", "DelaySeconds": "10", "MessageRetentionPeriod": "60"})
	e.send(url, "g", "", "late")
	require.Empty(t, e.receive(url, 10, 30), "delayed by the queue's DelaySeconds")
	require.Equal(t, "1", e.attrs(url, types.QueueAttributeNameApproximateNumberOfMessagesDelayed)["ApproximateNumberOfMessagesDelayed"])
	e.tg.Advance(10 * time.Second)
	got := e.receive(url, 10, 30)
	require.Equal(t, []string{"late"}, bodies(got))
	e.delete(url, got[0])

	e.send(url, "g", "", "old")
	e.tg.Advance(61 * time.Second)
	require.Empty(t, e.receive(url, 10, 30), "past MessageRetentionPeriod the message is gone")
	a := e.attrs(url, types.QueueAttributeNameAll)
	require.Equal(t, "0", a["ApproximateNumberOfMessages"])
	require.Equal(t, "0", a["ApproximateNumberOfMessagesDelayed"])
}

func testLongPollEmpty(t *testing.T, e *env) {
	url := e.fifo("empty", nil)
	done := make(chan error, 1)
	go func() {
		out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 2})
		if err == nil && len(out.Messages) > 0 {
			err = fmt.Errorf("received %d messages from an empty queue", len(out.Messages))
		}
		done <- err
	}()
	deadline := time.After(15 * time.Second)
	for {
		if e.tg.Advance != nil {
			e.tg.Advance(time.Second)
		}
		select {
		case err := <-done:
			require.NoError(t, err)
			return
		case <-deadline:
			t.Fatal("a long poll on an empty queue did not end")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// testConcurrentConsumers has several consumers receive, hold and delete messages of a
// few groups at once: each group's messages are handled once each, in order, and never
// by two consumers at a time.
func testConcurrentConsumers(t *testing.T, e *env) {
	url := e.fifo("concurrent", map[string]string{"ContentBasedDeduplication": "true"})
	const groups, perGroup, consumers = 4, 15, 4
	for i := range perGroup {
		var entries []types.SendMessageBatchRequestEntry
		for g := range groups {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(g)),
				MessageBody: aws.String(fmt.Sprintf("g%d-%02d", g, i)), MessageGroupId: aws.String(fmt.Sprintf("g%d", g))})
		}
		out, err := e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
	}

	// Consumers long-poll; the last delete ends the waits of the others.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var mu sync.Mutex
	held := map[string]bool{}
	seen := map[string][]string{}
	total := 0
	errs := make(chan error, consumers)
	var wg sync.WaitGroup
	receive := func(wait int32) ([]types.Message, error) {
		out, err := e.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 3, WaitTimeSeconds: wait,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
		if err != nil {
			return nil, err
		}
		return out.Messages, nil
	}
	// take records what a receive returned and marks its groups held, failing if one is
	// held already, by this consumer or another.
	take := func(msgs []types.Message, mine map[string]bool) error {
		mu.Lock()
		defer mu.Unlock()
		fresh := map[string]bool{}
		for _, m := range msgs {
			g := m.Attributes["MessageGroupId"]
			if held[g] && !fresh[g] {
				return fmt.Errorf("group %s received while it is held", g)
			}
			fresh[g], held[g], mine[g] = true, true, true
			seen[g] = append(seen[g], aws.ToString(m.Body))
		}
		return nil
	}
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				finished := total == groups*perGroup
				mu.Unlock()
				if finished {
					errs <- nil
					return
				}
				// Two receives before settling: the second must not return a group the
				// first holds, nor one another consumer holds.
				mine := map[string]bool{}
				var msgs []types.Message
				for i := range 2 {
					wait := int32(20) // the first receive waits; the second must not wait for what this consumer holds
					if i == 1 {
						wait = 0
					}
					got, err := receive(wait)
					if err != nil {
						if ctx.Err() != nil {
							break // the last message was handled meanwhile
						}
						errs <- err
						return
					}
					if err := take(got, mine); err != nil {
						errs <- err
						return
					}
					msgs = append(msgs, got...)
					if len(got) == 0 {
						break
					}
				}
				mu.Lock()
				for g := range mine {
					held[g] = false // released before the deletes that let others receive the group
				}
				mu.Unlock()
				for _, m := range msgs {
					if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						errs <- err
						return
					}
				}
				mu.Lock()
				total += len(msgs)
				if total == groups*perGroup {
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for g := range groups {
		want := make([]string, perGroup)
		for i := range want {
			want[i] = fmt.Sprintf("g%d-%02d", g, i)
		}
		require.Equal(t, want, seen[fmt.Sprintf("g%d", g)], "group g%d", g)
	}
	require.Empty(t, e.receive(url, 10, 30))
}

func testDeletedRecently(t *testing.T, e *env) {
	e.needsClock()
	name := e.name("recreate")
	in := &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true"}}
	created, err := e.c.CreateQueue(e.ctx, in)
	require.NoError(t, err)
	_, err = e.c.DeleteQueue(e.ctx, &sqs.DeleteQueueInput{QueueUrl: created.QueueUrl})
	require.NoError(t, err)
	_, err = e.c.CreateQueue(e.ctx, in)
	var recently *types.QueueDeletedRecently
	require.ErrorAs(t, err, &recently, "the same name within 60 seconds of the delete")
	e.tg.Advance(60 * time.Second)
	_, err = e.c.CreateQueue(e.ctx, in)
	require.NoError(t, err, "60 seconds after the delete")
}

func testListQueuesPages(t *testing.T, e *env) {
	prefix := fmt.Sprintf("pages-%d-%d-", time.Now().UnixNano()%1e9, queueSeq.Add(1))
	var want []string
	for i := range 3 {
		out, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(prefix + strconv.Itoa(i) + ".fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
		require.NoError(t, err)
		want = append(want, aws.ToString(out.QueueUrl))
	}
	var got []string
	var token *string
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 2, "3 queues in pages of 2")
		out, err := e.c.ListQueues(e.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(2), NextToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(out.QueueUrls), 2)
		got = append(got, out.QueueUrls...)
		if out.NextToken == nil {
			break
		}
		token = out.NextToken
	}
	require.ElementsMatch(t, want, got)
}

// testDeadLetterRetention: on a FIFO queue the retention of a message moved to the
// dead-letter queue counts from the move, not from the first send.
func testDeadLetterRetention(t *testing.T, e *env) {
	e.needsClock()
	dlq := e.fifo("dlqkeep", map[string]string{"MessageRetentionPeriod": "120"})
	arn := e.attrs(dlq, types.QueueAttributeNameQueueArn)["QueueArn"]
	url := e.fifo("srckeep", map[string]string{"ContentBasedDeduplication": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, arn)})
	e.send(url, "g", "", "kept")
	got := e.receive(url, 1, 30)
	require.Len(t, got, 1)
	_, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	e.tg.Advance(100 * time.Second)
	require.Empty(t, e.receive(url, 1, 30), "the second receive moves the message")
	e.tg.Advance(100 * time.Second)
	dead := e.receive(dlq, 10, 30)
	require.Equal(t, []string{"kept"}, bodies(dead), "200 s after the send, 100 s after the move, within 120 s of retention")
	require.Equal(t, got[0].Attributes["SentTimestamp"], dead[0].Attributes["SentTimestamp"])
}
