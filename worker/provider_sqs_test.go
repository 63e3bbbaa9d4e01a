package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	emusqs "github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
)

const testQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo"

// validSQS is a worker on an SQS FIFO queue with what SQS needs: the Postgres store, early
// messages held in it.
func validSQS() Config {
	c := DefaultConfig()
	c.Provider, c.SQSQueueURL = ProviderSQS, testQueueURL
	c.StateStore, c.DatabaseURL, c.EarlyMessages = StateStorePostgres, "postgres://u:p@localhost/seqbus", EarlyMessagesStore
	c.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	return c
}

func TestValidateSQS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // problems the message names
	}{
		{"valid", func(*Config) {}, nil},
		{"unknown provider", func(c *Config) { c.Provider = "kafka" }, []string{`SEQBUS_PROVIDER: "kafka" is not one of servicebus, sqs`}},
		{"no queue url", func(c *Config) { c.SQSQueueURL = "" }, []string{"SEQBUS_SQS_QUEUE_URL: required with SEQBUS_PROVIDER=sqs"}},
		{"queue url not a url", func(c *Config) { c.SQSQueueURL = "orders.fifo" }, []string{`SEQBUS_SQS_QUEUE_URL: "orders.fifo" is not a queue URL`}},
		{"queue url without account", func(c *Config) { c.SQSQueueURL = "https://sqs.us-east-1.amazonaws.com/orders.fifo" }, []string{"its path must be /<account>/<queue>"}},
		{"standard queue", func(c *Config) { c.SQSQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders" }, []string{`SEQBUS_SQS_QUEUE_URL: queue "orders" is not a FIFO queue`}},
		{"service bus state store", func(c *Config) { c.StateStore, c.DatabaseURL = StateStoreServiceBus, "" },
			[]string{"SEQBUS_STATE_STORE: SEQBUS_PROVIDER=sqs needs SEQBUS_STATE_STORE=postgres: an SQS message group has no session state"}},
		{"deferral", func(c *Config) { c.EarlyMessages = EarlyMessagesDefer },
			[]string{"SEQBUS_EARLY_MESSAGES: SEQBUS_PROVIDER=sqs needs SEQBUS_EARLY_MESSAGES=store: SQS FIFO cannot defer a message"}},
		{"unordered", func(c *Config) { c.Ordering = OrderingNone }, []string{"SEQBUS_ORDERING: SEQBUS_PROVIDER=sqs restores the order of message groups: SEQBUS_ORDERING=none is Service Bus only"}},
		{"connection string", func(c *Config) { c.ConnectionString = testConn }, []string{"SEQBUS_CONNECTION_STRING: is a Service Bus setting, refused with SEQBUS_PROVIDER=sqs"}},
		{"namespace", func(c *Config) { c.Namespace = "x.servicebus.windows.net" }, []string{"SEQBUS_NAMESPACE: is a Service Bus setting"}},
		{"queue", func(c *Config) { c.Queue = "orders" }, []string{"SEQBUS_QUEUE: is a Service Bus setting"}},
		{"topic and subscription", func(c *Config) { c.Topic, c.Subscription = "t", "s" }, []string{"SEQBUS_TOPIC: is a Service Bus setting", "SEQBUS_SUBSCRIPTION: is a Service Bus setting"}},
		{"deferral on partitioned entities", func(c *Config) { c.DeferOnPartitioned = true }, []string{"SEQBUS_DEFER_ON_PARTITIONED: is a Service Bus setting"}},
		{"session connections", func(c *Config) { c.SessionConnections = 2 }, []string{"SEQBUS_SESSION_CONNECTIONS: is a Service Bus setting"}},
		{"the common settings are checked too", func(c *Config) { c.MaxConcurrentSessions = 0 }, []string{"SEQBUS_MAX_CONCURRENT_SESSIONS: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validSQS()
			tt.mutate(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// A queue URL belongs to the SQS provider: a Service Bus worker given one says so.
// On SQS the sessions delete their completions at close when the engine runs pipelined, whose
// replay window then covers a session's messages, and each at once when it awaits each one.
func TestSQSDeletesFollowTheReplayWindow(t *testing.T) {
	t.Parallel()
	c := validSQS()
	require.Equal(t, sqsadapter.DeleteAtClose, c.sqsDeletes())
	require.Equal(t, sqsadapter.MaxReceive, c.EngineConfig().ReplayWindow(), "a crash hands a session's messages over again")
	c.PipelineRuns = false
	require.Equal(t, sqsadapter.DeleteEach, c.sqsDeletes())
	require.Equal(t, 1, c.EngineConfig().ReplayWindow())
	sb := DefaultConfig()
	require.Equal(t, 17, sb.EngineConfig().ReplayWindow(), "Service Bus keeps its window")
}

func TestValidateQueueURLWithServiceBus(t *testing.T) {
	t.Parallel()
	c := valid()
	c.SQSQueueURL = testQueueURL
	require.ErrorContains(t, c.Validate(), "SEQBUS_SQS_QUEUE_URL: is read with SEQBUS_PROVIDER=sqs only, got SEQBUS_PROVIDER=servicebus")
}

func TestSQSEntity(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{testQueueURL, "sqs:123456789012/orders.fifo"},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo/", "sqs:123456789012/orders.fifo"},
		{"http://127.0.0.1:9324/000000000000/demo.fifo", "sqs:000000000000/demo.fifo"},
	}
	for _, tt := range tests {
		got, err := SQSEntity(tt.url)
		require.NoError(t, err, tt.url)
		require.Equal(t, tt.want, got)
	}
	for _, bad := range []string{"", "orders.fifo", "ftp://h/1/q.fifo", "https://h/1/q", "https://h/1/2/q.fifo", "https://h//q.fifo"} {
		_, err := SQSEntity(bad)
		require.Error(t, err, bad)
	}
}

// localSQS serves a local SQS on a free port for the test and returns a client of its own
// transport (closed with the test, so that no connection outlives it).
func localSQS(t *testing.T) *awssqs.Client {
	t.Helper()
	srv := httptest.NewServer(emusqs.New(emusqs.Config{}))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	return awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: &http.Client{Transport: tr},
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

func fifoQueue(t *testing.T, client *awssqs.Client, name string) string {
	t.Helper()
	out, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl)
}

// The scaling signal on SQS counts the queue's messages, visible and in flight, with one call.
func TestSQSMessagesCount(t *testing.T) {
	t.Parallel()
	client := localSQS(t)
	url := fifoQueue(t, client, "scale.fifo")
	calls := map[string]int{}
	count := sqsMessages(client, url, func(op string, n int) { calls[op] += n })

	n, err := count(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "an empty queue asks for no replica")
	for i := range 7 {
		_, err := client.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"),
			MessageGroupId: aws.String(fmt.Sprintf("g%d", i%3)), MessageDeduplicationId: aws.String(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	got, err := client.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	n, err = count(t.Context())
	require.NoError(t, err)
	require.Equal(t, 7, n, "6 visible and 1 in flight")
	_, err = client.DeleteMessage(t.Context(), &awssqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: got.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	n, err = count(t.Context())
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, map[string]int{"get_queue_attributes": 3}, calls)
	require.Equal(t, 1, replicasWanted(n, 8, 100))

	_, err = sqsMessages(client, url+"-gone", func(string, int) {})(t.Context())
	require.ErrorContains(t, err, "read the queue's message counts")
}

func TestSQSProbe(t *testing.T) {
	t.Parallel()
	client := localSQS(t)
	url := fifoQueue(t, client, "probe.fifo")
	require.NoError(t, probeSQS(t.Context(), client, url))
	err := probeSQS(t.Context(), client, url+"-gone")
	require.Error(t, err)
	require.True(t, sqsFatal(err), "a missing queue: %v", err)

	tests := []struct {
		err   error
		fatal bool
	}{
		{&types.QueueDoesNotExist{}, true},
		{fmt.Errorf("wrapped: %w", errNotFIFO), true},
		{&smithy.GenericAPIError{Code: "AccessDenied"}, true},
		{&smithy.GenericAPIError{Code: "InvalidClientTokenId"}, true},
		{&smithy.GenericAPIError{Code: "ThrottlingException"}, false},
		{errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.fatal, sqsFatal(tt.err), "%v", tt.err)
	}
}

// New connects to the queue: one without a dead-letter queue is refused, naming the setting.
func TestNewSQSNeedsRedrivePolicy(t *testing.T) {
	t.Parallel()
	client := localSQS(t)
	c := validSQS()
	c.SQSClient, c.SQSQueueURL = client, fifoQueue(t, client, "noredrive.fifo")
	c.DatabaseURL = "postgres://nobody@127.0.0.1:1/none"
	_, err := New(c)
	require.ErrorContains(t, err, "SEQBUS_SQS_QUEUE_URL")
	require.ErrorContains(t, err, "RedrivePolicy")
}

// fifoQueueWithDLQ creates a FIFO queue with a redrive policy to a FIFO dead-letter queue.
func fifoQueueWithDLQ(t *testing.T, client *awssqs.Client, name string) string {
	t.Helper()
	dlq := fifoQueue(t, client, strings.TrimSuffix(name, ".fifo")+"-dlq.fifo")
	arn, err := client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: &dlq, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	out, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"FifoQueue": "true", "RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"5"}`, arn.Attributes["QueueArn"]),
	}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl)
}

// `worker scaler` on an SQS queue serves the count of its messages as the ready sessions.
func TestScalerOnSQS(t *testing.T) {
	t.Parallel()
	pgtest.RequireServer(t)
	client := localSQS(t)
	url := fifoQueueWithDLQ(t, client, "scaler.fifo")
	for i := range 20 {
		_, err := client.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"),
			MessageGroupId: aws.String(fmt.Sprintf("g%d", i%5)), MessageDeduplicationId: aws.String(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	pool := pgtest.NewPool(t, nil)
	cfg := validSQS()
	cfg.Handler = nil
	cfg.SQSClient, cfg.SQSQueueURL, cfg.DatabaseURL, cfg.Pool, cfg.MigrateOnStart = client, url, "", pool, true
	cfg.HTTPAddr, cfg.ScaleInterval, cfg.MaxConcurrentSessions = HTTPOff, 50*time.Millisecond, 8
	s, err := NewScaler(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	defer func() { require.NoError(t, s.Stop(context.Background())) }()
	require.Eventually(t, func() bool { _, ok := s.Last(); return ok }, 10*time.Second, 10*time.Millisecond)
	sc, _ := s.Last()
	require.Equal(t, 20, sc.SessionsReady, "the queue's 20 messages, an upper bound of its 5 groups")
	require.Equal(t, 3, sc.ReplicasWanted)
}

// The relay's senders on SQS: an entity is the name of a FIFO queue; another name, or a queue
// that does not exist, is an error that names it.
func TestSQSSenders(t *testing.T) {
	t.Parallel()
	client := localSQS(t)
	fifoQueue(t, client, "relayed.fifo")
	open := sqsSenders(client)
	s, err := open(t.Context(), "relayed.fifo")
	require.NoError(t, err)
	require.NotNil(t, s)
	_, err = open(t.Context(), "relayed")
	require.ErrorContains(t, err, `entity "relayed" is not the name of an SQS FIFO queue`)
	_, err = open(t.Context(), "missing.fifo")
	require.ErrorContains(t, err, `queue "missing.fifo"`)
}
