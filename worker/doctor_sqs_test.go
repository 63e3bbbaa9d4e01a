package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	emusqs "github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// sqsIntercept answers an SQS call (its operation, such as "ReceiveMessage", and its JSON body)
// instead of the local SQS, or returns false to let it through.
type sqsIntercept func(w http.ResponseWriter, op string, body []byte) bool

// doctorSQS serves a local SQS, each call first offered to intercept (when not nil), and returns
// a client of it.
func doctorSQS(t *testing.T, intercept sqsIntercept) *awssqs.Client {
	t.Helper()
	local := emusqs.New(emusqs.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
		if intercept != nil && intercept(w, op, body) {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		local.ServeHTTP(w, r)
	}))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	return awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: &http.Client{Transport: tr},
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// sqsError answers an SQS call with the error code, as SQS's JSON protocol does.
func sqsError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", code+";Sender")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"__type":"com.amazonaws.sqs#%s","message":%q}`, code, message)
}

// sqsDoctorConfig is a worker's configuration on the queue at queueURL, its state in the schema.
func sqsDoctorConfig(client *awssqs.Client, queueURL, schema string) worker.Config {
	cfg := worker.DefaultConfig()
	cfg.Provider, cfg.SQSClient, cfg.SQSQueueURL = worker.ProviderSQS, client, queueURL
	cfg.StateStore, cfg.DatabaseURL, cfg.EarlyMessages = worker.StateStorePostgres, pgtest.SchemaDSN(schema), worker.EarlyMessagesStore
	cfg.HTTPAddr = worker.HTTPOff
	return cfg
}

// redriveQueue creates the FIFO queue name.fifo redriving to dlq after maxReceive receives.
func redriveQueue(t *testing.T, client *awssqs.Client, name, dlqURL string, maxReceive int) string {
	t.Helper()
	arn, err := client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: &dlqURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	out, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name + ".fifo"), Attributes: map[string]string{
		"FifoQueue": "true", "RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn.Attributes["QueueArn"], maxReceive),
	}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl)
}

var sqsRoundTripSteps = []string{
	"round trip: scratch queue", "round trip: send", "round trip: accept a group", "round trip: receive",
	"round trip: group held while in flight", "round trip: renew the lock", "round trip: complete",
	"round trip: dead-letter", "round trip: close the group", "round trip: dead letter arrived",
	"round trip: delete the scratch queues",
}

// The doctor checks an SQS queue and makes the worker's calls on a scratch queue, taking nothing
// of the queue itself: its messages stay where they were, none received.
func TestDoctorSQS(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	client := doctorSQS(t, nil)
	queueURL, _, err := sqsadapter.CreateFIFO(ctx, client, "orders", 50)
	require.NoError(t, err)
	for i := range 3 {
		_, err := client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &queueURL, MessageBody: aws.String("x"),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(fmt.Sprint(i))})
		require.NoError(t, err)
	}

	for _, pipelined := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelined=%t", pipelined), func(t *testing.T) {
			cfg := sqsDoctorConfig(client, queueURL, schema)
			cfg.PipelineRuns = pipelined
			rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
			out := table(t, rep)
			require.False(t, rep.Failed(), out)
			require.Equal(t, "sqs:000000000000/orders.fifo", rep.Entity)
			for _, check := range append([]string{
				"settings", "connection and credentials", "queue exists", "queue is FIFO", "queue dead-letter queue",
				"queue max receive count", "group lock", "state store: database reachable", "state store: migrations applied",
			}, sqsRoundTripSteps...) {
				require.Equal(t, worker.DoctorPass, line(t, rep, check).Result, "%s\n%s", check, out)
			}
			require.Equal(t, worker.DoctorSkip, line(t, rep, "rights").Result, out)
			require.Contains(t, line(t, rep, "rights").Detail, "sqs:ChangeMessageVisibility and sqs:DeleteMessage on the queue")
			require.Contains(t, line(t, rep, "queue dead-letter queue").Detail, "orders-dlq.fifo")
			require.Contains(t, line(t, rep, "queue max receive count").Detail, "50 (at least 4")
			require.Contains(t, line(t, rep, "group lock").Detail, "30s")
			complete := line(t, rep, "round trip: complete").Detail
			if pipelined {
				require.Contains(t, complete, "DeleteMessageBatch at the group's close")
			} else {
				require.Equal(t, "DeleteMessage", complete)
			}
		})
	}

	queues, err := client.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(worker.DoctorScratchPrefix)})
	require.NoError(t, err)
	require.Empty(t, queues.QueueUrls, "the scratch queues are deleted")
	attrs, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	require.Equal(t, "3", attrs.Attributes["ApproximateNumberOfMessages"])
	require.Equal(t, "0", attrs.Attributes["ApproximateNumberOfMessagesNotVisible"])
	got, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: &queueURL, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	require.NoError(t, err)
	require.NotEmpty(t, got.Messages)
	require.Equal(t, "1", got.Messages[0].Attributes["ApproximateReceiveCount"], "the doctor received nothing of the queue")
}

// What the doctor finds wrong with a queue, its dead-letter queue and the settings.
func TestDoctorSQSQueue(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx := t.Context() // the parallel subtests end before it
	client := doctorSQS(t, nil)
	create := func(name string, attrs map[string]string) string {
		attrs["FifoQueue"] = "true"
		out, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		require.NoError(t, err)
		return aws.ToString(out.QueueUrl)
	}
	dlq := create("plain-dlq.fifo", map[string]string{})
	stingy := redriveQueue(t, client, "stingy", dlq, 3)
	noRedrive := create("noredrive.fifo", map[string]string{})
	redrivenDLQ := redriveQueue(t, client, "redriven-dlq", dlq, 10)
	toRedrivenDLQ := redriveQueue(t, client, "toredriven", redrivenDLQ, 50)
	base := strings.TrimSuffix(noRedrive, "noredrive.fifo")

	tests := []struct {
		name      string
		queueURL  string
		configure func(cfg *worker.Config)
		check     string
		result    worker.DoctorResult
		detail    string
		action    string
		failed    bool
	}{
		{"missing queue", base + "gone.fifo", nil, "queue exists", worker.DoctorFail, "does not exist", "SEQBUS_SQS_QUEUE_URL", true},
		{"no redrive policy", noRedrive, nil, "queue dead-letter queue", worker.DoctorFail, "has no RedrivePolicy", "deadLetterTargetArn", true},
		{"max receive count too low", stingy, nil, "queue max receive count", worker.DoctorWarn, "3: every receive counts", "at least 4", false},
		{"released retries need room", stingy, func(cfg *worker.Config) { cfg.MaxHandlerAttempts, cfg.RetryReleaseAfter = 10, 4 },
			"queue max receive count", worker.DoctorWarn, "the 6 released retries", "at least 10", false},
		{"dead-letter queue with a redrive policy", toRedrivenDLQ, nil, "queue dead-letter queue", worker.DoctorWarn, "has a RedrivePolicy of its own", "remove", false},
		{"renewed after the lock lapsed", stingy, func(cfg *worker.Config) { cfg.LockRenewInterval = 40 * time.Second },
			"group lock", worker.DoctorFail, "the group locks expire before they are renewed", "SEQBUS_LOCK_RENEW_INTERVAL", true},
		{"renewed late", stingy, func(cfg *worker.Config) { cfg.LockRenewInterval = 20 * time.Second },
			"group lock", worker.DoctorWarn, "one slow renewal loses the lock", "SEQBUS_LOCK_RENEW_INTERVAL", false},
		{"database unreachable", stingy, func(cfg *worker.Config) { cfg.DatabaseURL = "postgres://seqbus@127.0.0.1:1/nowhere" },
			"state store: database reachable", worker.DoctorFail, "SEQBUS_DATABASE_URL", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := sqsDoctorConfig(client, tt.queueURL, schema)
			cfg.MigrateOnStart = true
			if tt.configure != nil {
				tt.configure(&cfg)
			}
			rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
			out := table(t, rep)
			require.Equal(t, tt.failed, rep.Failed(), out)
			l := line(t, rep, tt.check)
			require.Equal(t, tt.result, l.Result, out)
			require.Contains(t, l.Detail, tt.detail)
			require.Contains(t, l.Action, tt.action)
		})
	}
}

// The doctor's lines when SQS does not answer, refuses the credentials or a right, or does not
// keep a group's order.
func TestDoctorSQSEndpoint(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx := t.Context() // the parallel subtests end before it
	// run runs the doctor on a queue created before intercept is armed.
	run := func(t *testing.T, intercept sqsIntercept) (worker.DoctorReport, string) {
		var armed atomic.Bool
		client := doctorSQS(t, func(w http.ResponseWriter, op string, body []byte) bool {
			return armed.Load() && intercept(w, op, body)
		})
		queueURL, _, err := sqsadapter.CreateFIFO(ctx, client, "orders", 50)
		require.NoError(t, err)
		armed.Store(true)
		cfg := sqsDoctorConfig(client, queueURL, schema)
		cfg.MigrateOnStart = true
		rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
		return rep, table(t, rep)
	}

	t.Run("no answer", func(t *testing.T) {
		t.Parallel()
		cfg := sqsDoctorConfig(doctorSQS(t, nil), "http://127.0.0.1:1/000000000000/orders.fifo", schema)
		cfg.SQSClient = awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), RetryMaxAttempts: 1})
		rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
		out := table(t, rep)
		require.True(t, rep.Failed(), out)
		l := line(t, rep, "connection and credentials")
		require.Equal(t, worker.DoctorFail, l.Result, out)
		require.Contains(t, l.Detail, "did not answer")
		require.Contains(t, l.Action, "AWS_ENDPOINT_URL_SQS")
		require.Equal(t, worker.DoctorPass, line(t, rep, "state store: database reachable").Result, "the store is still checked")
	})
	t.Run("credentials refused", func(t *testing.T) {
		t.Parallel()
		rep, out := run(t, func(w http.ResponseWriter, _ string, _ []byte) bool {
			sqsError(w, http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid.")
			return true
		})
		require.True(t, rep.Failed(), out)
		l := line(t, rep, "connection and credentials")
		require.Equal(t, worker.DoctorFail, l.Result, out)
		require.Contains(t, l.Detail, "refused the credentials")
		require.Len(t, rep.Checks, 4, "settings, connection, the store's two lines: %s", out)
	})
	t.Run("attributes refused", func(t *testing.T) {
		t.Parallel()
		rep, out := run(t, func(w http.ResponseWriter, op string, body []byte) bool {
			if op == "GetQueueAttributes" && bytes.Contains(body, []byte(`"All"`)) {
				sqsError(w, http.StatusBadRequest, "AccessDenied", "not authorized to perform: sqs:getqueueattributes")
				return true
			}
			return false
		})
		require.True(t, rep.Failed(), out)
		require.Equal(t, worker.DoctorPass, line(t, rep, "connection and credentials").Result, out)
		l := line(t, rep, "queue exists")
		require.Equal(t, worker.DoctorFail, l.Result, out)
		require.Contains(t, l.Action, "sqs:GetQueueAttributes")
	})
	t.Run("no right to create the scratch queue", func(t *testing.T) {
		t.Parallel()
		rep, out := run(t, func(w http.ResponseWriter, op string, _ []byte) bool {
			if op == "CreateQueue" {
				sqsError(w, http.StatusBadRequest, "AccessDenied", "not authorized to perform: sqs:createqueue")
				return true
			}
			return false
		})
		require.False(t, rep.Failed(), out)
		l := line(t, rep, "round trip: scratch queue")
		require.Equal(t, worker.DoctorSkip, l.Result, out)
		require.Contains(t, l.Action, "sqs:CreateQueue")
	})
	t.Run("group not held", func(t *testing.T) {
		t.Parallel()
		// An endpoint that hands out the next message of a group whose first ones are in flight.
		rep, out := run(t, func(w http.ResponseWriter, op string, body []byte) bool {
			if op != "ReceiveMessage" || !bytes.Contains(body, []byte(`"WaitTimeSeconds":1`)) {
				return false
			}
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_, _ = io.WriteString(w, `{"Messages":[{"MessageId":"m3","ReceiptHandle":"h3","Body":"{}","MD5OfBody":"99914b932bd37a50b983c5e7c90ae93b"}]}`)
			return true
		})
		require.True(t, rep.Failed(), out)
		l := line(t, rep, "round trip: group held while in flight")
		require.Equal(t, worker.DoctorFail, l.Result, out)
		require.Contains(t, l.Detail, "does not keep a FIFO group's order")
		require.Equal(t, worker.DoctorSkip, line(t, rep, "round trip: renew the lock").Result, out)
		require.Equal(t, worker.DoctorPass, line(t, rep, "round trip: delete the scratch queues").Result, out)
	})
}
