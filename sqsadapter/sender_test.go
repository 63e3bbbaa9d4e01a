package sqsadapter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/outbox"
	pub "github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sqsadapter"
)

// The Sender is what the Publisher and the outbox relay send through.
var (
	_ pub.Sender         = (*sqsadapter.Sender)(nil)
	_ pub.MessagesSender = (*sqsadapter.Sender)(nil)
	_ outbox.Sender      = (*sqsadapter.Sender)(nil)
)

// senderSQS is a local SQS FIFO on a free port, with a client of the AWS SDK.
type senderSQS struct {
	client *awssqs.Client
	clock  *clock.Fake
}

func newSenderSQS(t *testing.T) *senderSQS {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(sqs.New(sqs.Config{Clock: clk}))
	t.Cleanup(srv.Close)
	client := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return &senderSQS{client: client, clock: clk}
}

// queue creates a FIFO queue without content-based deduplication and returns its URL.
func (l *senderSQS) queue(t *testing.T, name string) string {
	t.Helper()
	out, err := l.client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{
		QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true"},
	})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl)
}

// sentMessage is one message as a consumer reads it.
type sentMessage struct {
	group, dedup, body string
	attrs              map[string]types.MessageAttributeValue
}

// drain receives and deletes until the queue has been empty for one receive, and returns the
// messages in the order sentMessage.
func (l *senderSQS) drain(t *testing.T, url string) []sentMessage {
	t.Helper()
	var got []sentMessage
	for {
		out, err := l.client.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 30,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			return got
		}
		for _, m := range out.Messages {
			got = append(got, sentMessage{
				group: m.Attributes["MessageGroupId"], dedup: m.Attributes["MessageDeduplicationId"],
				body: aws.ToString(m.Body), attrs: m.MessageAttributes,
			})
			_, err := l.client.DeleteMessage(t.Context(), &awssqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
}

func sbMessage(session string, seq int, props map[string]any) *azservicebus.Message {
	id := pub.MessageID(session, int64(seq))
	return &azservicebus.Message{SessionID: &session, MessageID: &id, Body: fmt.Appendf(nil, "%s:%d", session, seq), ApplicationProperties: props}
}

// bodies returns the bodies sentMessage per group, in order.
func groupBodies(got []sentMessage) map[string][]string {
	per := map[string][]string{}
	for _, r := range got {
		per[r.group] = append(per[r.group], r.body)
	}
	return per
}

func TestSenderKeepsOrderPerGroup(t *testing.T) {
	t.Parallel()
	l := newSenderSQS(t)
	url := l.queue(t, "order.fifo")
	s, err := sqsadapter.NewSender(l.client, url)
	require.NoError(t, err)

	// 3 groups of 17 interleaved: 51 messages, 6 batches, groups spanning batches.
	var msgs []*azservicebus.Message
	want := map[string][]string{}
	for i := 1; i <= 17; i++ {
		for _, g := range []string{"order-a", "order-b", "order-c"} {
			m := sbMessage(g, i, map[string]any{"Kind": "step"})
			m.ContentType = aws.String("text/plain")
			msgs = append(msgs, m)
			want[g] = append(want[g], fmt.Sprintf("%s:%d", g, i))
		}
	}
	sent, err := s.SendMessages(t.Context(), msgs)
	require.NoError(t, err)
	require.Equal(t, 51, sent)

	got := l.drain(t, url)
	require.Len(t, got, 51)
	require.Equal(t, want, groupBodies(got))
	for _, r := range got {
		seq := strings.SplitN(r.body, ":", 2)[1]
		require.Equal(t, r.group+"/"+seq, r.dedup, "the deduplication id is the message id")
		require.Equal(t, "step", aws.ToString(r.attrs["Kind"].StringValue))
		require.Equal(t, "text/plain", aws.ToString(r.attrs[sqsadapter.ContentTypeAttribute].StringValue))
	}
}

// A copy sent within the 5 minutes of SQS's deduplication window is dropped; one sent after it
// is delivered. A message id SQS does not take as a deduplication id is hashed, and its copies
// are dropped all the same.
func TestSenderDeduplicatesWithinTheWindow(t *testing.T) {
	t.Parallel()
	l := newSenderSQS(t)
	url := l.queue(t, "dedup.fifo")
	s, err := sqsadapter.NewSender(l.client, url)
	require.NoError(t, err)

	long := strings.Repeat("x", 130)
	odd := "order 42/1" // a space: no deduplication id
	batch := func() []*azservicebus.Message {
		return []*azservicebus.Message{
			sbMessage("g", 1, nil), sbMessage("g", 2, nil),
			{SessionID: aws.String("g"), MessageID: &long, Body: []byte("long")},
			{SessionID: aws.String("g"), MessageID: &odd, Body: []byte("odd")},
		}
	}
	_, err = s.SendMessages(t.Context(), batch())
	require.NoError(t, err)
	l.clock.Advance(4 * time.Minute)
	_, err = s.SendMessages(t.Context(), batch()) // within the window: all dropped
	require.NoError(t, err)
	require.NoError(t, s.SendMessage(t.Context(), sbMessage("g", 1, nil), nil))

	got := l.drain(t, url)
	require.Equal(t, map[string][]string{"g": {"g:1", "g:2", "long", "odd"}}, groupBodies(got))
	require.Equal(t, sqsadapter.DeduplicationID(long), got[2].dedup)
	require.Len(t, got[2].dedup, 64)
	require.Equal(t, sqsadapter.DeduplicationID(odd), got[3].dedup)

	l.clock.Advance(2 * time.Minute) // 6 minutes after the first send: the window is over
	require.NoError(t, s.SendMessage(t.Context(), sbMessage("g", 1, nil), nil))
	require.Equal(t, map[string][]string{"g": {"g:1"}}, groupBodies(l.drain(t, url)))
}

// The Publisher numbers and sends to SQS FIFO unchanged: Sequence and IsLast arrive as message
// attributes, one group per session, in order, PublishBatch in batches.
func TestPublisherOverSQS(t *testing.T) {
	t.Parallel()
	l := newSenderSQS(t)
	url := l.queue(t, "publish.fifo")
	s, err := sqsadapter.NewSender(l.client, url)
	require.NoError(t, err)
	p, err := pub.New(s, &pub.Config{Strategy: pub.Gjura()})
	require.NoError(t, err)

	props := func(tx string) map[string]any {
		return map[string]any{"SessionName": "orders", "TransactionId": tx, "InstanceId": 1}
	}
	var items []pub.BatchItem
	for i := range 12 {
		for _, tx := range []string{"t1", "t2"} {
			items = append(items, pub.BatchItem{Message: &azservicebus.Message{Body: fmt.Appendf(nil, "%s-%d", tx, i), ApplicationProperties: props(tx)}, Last: i == 11})
		}
	}
	res, err := p.PublishBatch(t.Context(), items, nil)
	require.NoError(t, err)
	require.Equal(t, pub.Published{SessionID: "orders_t1_1", Sequence: 12}, res[22])
	one, err := p.Publish(t.Context(), &azservicebus.Message{Body: []byte("t3-0"), ApplicationProperties: props("t3")}, nil)
	require.NoError(t, err)
	require.Equal(t, pub.Published{SessionID: "orders_t3_1", Sequence: 1}, one)

	got := l.drain(t, url)
	require.Len(t, got, 25)
	next := map[string]int{}
	for _, r := range got {
		next[r.group]++
		require.Equal(t, strconv.Itoa(next[r.group]), aws.ToString(r.attrs[contract.SequenceProperty].StringValue), "group %s", r.group)
		require.Equal(t, pub.MessageID(r.group, int64(next[r.group])), r.dedup)
		_, last := r.attrs[contract.LastProperty]
		require.Equal(t, r.group != "orders_t3_1" && next[r.group] == 12, last, "IsLast only on the last of a session")
	}
	require.Equal(t, map[string]int{"orders_t1_1": 12, "orders_t2_1": 12, "orders_t3_1": 1}, next)
}

// What SQS would refuse is refused before anything of the call is sent, naming the message.
func TestSenderRefusals(t *testing.T) {
	t.Parallel()
	l := newSenderSQS(t)
	url := l.queue(t, "refused.fifo")
	s, err := sqsadapter.NewSender(l.client, url)
	require.NoError(t, err)
	tests := []struct {
		name    string
		bad     *azservicebus.Message
		wantErr string
	}{
		{"no session", &azservicebus.Message{MessageID: aws.String("m"), Body: []byte("x")}, "has no session id: an SQS FIFO queue needs a message group"},
		{"session with a space", sbMessage("order 42", 1, nil), `session id "order 42" is no SQS message group id`},
		{"session too long", sbMessage(strings.Repeat("s", 129), 1, nil), "is no SQS message group id"},
		{"binary body", &azservicebus.Message{SessionID: aws.String("g"), Body: []byte{0xff, 0x00}}, "the body is not SQS text"},
		{"control character", &azservicebus.Message{SessionID: aws.String("g"), Body: []byte("a\x01b")}, "the body is not SQS text"},
		{"empty body", &azservicebus.Message{SessionID: aws.String("g")}, "the body is empty"},
		{"nil message", nil, "nil message"},
		{"content type twice", &azservicebus.Message{SessionID: aws.String("g"), Body: []byte("x"), ContentType: aws.String("a/b"),
			ApplicationProperties: map[string]any{"ContentType": "c/d"}}, "application property ContentType c/d differs from the content type"},
		{"eleven properties", sbMessage("g", 2, map[string]any{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "j": 1, "k": 1}), "SQS takes at most 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := s.SendMessages(t.Context(), []*azservicebus.Message{sbMessage("g", 1, nil), tt.bad})
			require.ErrorContains(t, err, tt.wantErr)
			require.ErrorContains(t, err, "message 2 of 2")
			require.Zero(t, n)
			require.ErrorContains(t, s.SendMessage(t.Context(), tt.bad, nil), tt.wantErr)
		})
	}
	require.Empty(t, l.drain(t, url), "nothing refused reached the queue")
	_, err = sqsadapter.NewSender(nil, url)
	require.Error(t, err)
	_, err = sqsadapter.NewSender(l.client, "")
	require.Error(t, err)
}

// failingBatches is a SendAPI whose batches fail at one entry, or as a whole.
type failingBatches struct {
	failID   string // the entry that fails ("" none)
	failCall error
	calls    [][]string // the entry ids of each call
}

func (b *failingBatches) SendMessage(context.Context, *awssqs.SendMessageInput, ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	return &awssqs.SendMessageOutput{}, nil
}

func (b *failingBatches) SendMessageBatch(_ context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	var ids []string
	out := &awssqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		ids = append(ids, aws.ToString(e.Id))
		if aws.ToString(e.Id) == b.failID {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("try again")})
		} else {
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
		}
	}
	b.calls = append(b.calls, ids)
	if b.failCall != nil && len(b.calls) == 2 {
		return nil, b.failCall
	}
	return out, nil
}

// SendMessages counts the leading messages SQS took, so that sending again from there keeps
// each group's order.
func TestSenderPartialBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		api      *failingBatches
		wantSent int
		wantErr  string
		calls    int
	}{
		{"all sent", &failingBatches{}, 25, "", 3},
		{"entry 13 fails", &failingBatches{failID: "13"}, 13, `send message "g/14" of session "g": InternalError: try again`, 2},
		{"entry 0 fails", &failingBatches{failID: "0"}, 0, `message "g/1"`, 1},
		{"second call fails", &failingBatches{failCall: errors.New("connection reset")}, 10, "connection reset", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := sqsadapter.NewSender(tt.api, "https://sqs.us-east-1.amazonaws.com/1/q.fifo")
			require.NoError(t, err)
			var msgs []*azservicebus.Message
			for i := 1; i <= 25; i++ {
				msgs = append(msgs, sbMessage("g", i, nil))
			}
			n, err := s.SendMessages(t.Context(), msgs)
			require.Equal(t, tt.wantSent, n)
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
			require.Len(t, tt.api.calls, tt.calls)
			for _, c := range tt.api.calls {
				require.LessOrEqual(t, len(c), sqsadapter.MaxBatch)
			}
		})
	}
}

// The outbox relay sends what applications enqueued in Postgres to SQS FIFO, each session a
// message group in sequence order, with its Sequence, IsLast and Diagnostic-Id attributes.
func TestOutboxRelayToSQS(t *testing.T) {
	t.Parallel()
	l := newSenderSQS(t)
	url := l.queue(t, "orders.fifo")
	pool := pgtest.NewPool(t, &pgtest.Options{MaxConns: 8, Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	const sessions, perSession = 4, 23
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for i := range perSession {
		for s := range sessions {
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{
					Entity: "orders.fifo", SessionID: fmt.Sprintf("order-%d", s), Body: fmt.Appendf(nil, `{"step":%d}`, i+1),
					Properties: map[string]any{"Kind": "step"}, Last: i == perSession-1, Traceparent: tp,
				})
				return err
			}))
		}
	}
	var mu sync.Mutex
	opened := map[string]int{}
	relay, err := outbox.NewRelay(&outbox.RelayConfig{
		Pool: pool, BatchSize: 7, PollInterval: 50 * time.Millisecond,
		NewSender: func(_ context.Context, entity string) (outbox.Sender, error) {
			mu.Lock()
			opened[entity]++
			mu.Unlock()
			return sqsadapter.NewSender(l.client, url)
		},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	require.Eventually(t, func() bool { return relay.Stats().Sent == sessions*perSession }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, unlessCanceled(<-done))

	got := l.drain(t, url)
	require.Len(t, got, sessions*perSession)
	next := map[string]int{}
	for _, r := range got {
		next[r.group]++
		n := next[r.group]
		require.Equal(t, fmt.Sprintf(`{"step":%d}`, n), r.body, "group %s in order", r.group)
		require.Equal(t, strconv.Itoa(n), aws.ToString(r.attrs[contract.SequenceProperty].StringValue))
		require.Equal(t, r.group+"/"+strconv.Itoa(n), r.dedup)
		require.Equal(t, tp, aws.ToString(r.attrs[outbox.DiagnosticIDProperty].StringValue))
		_, last := r.attrs[contract.LastProperty]
		require.Equal(t, n == perSession, last)
	}
	require.Len(t, next, sessions)
	require.Equal(t, map[string]int{"orders.fifo": 1}, opened, "one sender per entity")
	var left int64
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM seqbus_outbox WHERE sent_at IS NULL").Scan(&left))
	require.Zero(t, left, "every message was sent and deleted")
}

func unlessCanceled(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// The content type the Sender sends as an attribute comes back as the message's content type,
// not as an application property.
func TestSenderContentTypeRoundTrip(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	url, _ := l.queue(t, 50)
	s, err := sqsadapter.NewSender(l.Client, url)
	require.NoError(t, err)
	m := sbMessage("ct", 1, map[string]any{"Kind": "step"})
	m.ContentType = aws.String("application/json")
	_, err = s.SendMessages(t.Context(), []*azservicebus.Message{m})
	require.NoError(t, err)

	src, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sess, err := src.AcceptNext(ctx)
	require.NoError(t, err)
	got, err := sess.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "application/json", got[0].ContentType)
	require.NotContains(t, got[0].Properties, sqsadapter.ContentTypeAttribute)
	require.Equal(t, "step", got[0].Properties["Kind"])
	require.NoError(t, sess.Complete(ctx, got[0]))
	require.NoError(t, sess.Close(ctx))
}
