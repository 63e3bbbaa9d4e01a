package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/internal/workerbin"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sqsadapter"
)

// sqsQueue serves a local SQS on a free port with a FIFO queue and its FIFO dead-letter queue,
// and returns the server's URL, a client and the queue's URL.
func sqsQueue(t *testing.T) (endpoint string, client *awssqs.Client, queueURL string) {
	t.Helper()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	client = awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	ctx := t.Context()
	dlq, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-dlq.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	arn, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders.fifo"), Attributes: map[string]string{
		"FifoQueue":     "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"10"}`, arn.Attributes["QueueArn"]),
	}})
	require.NoError(t, err)
	return srv.URL, client, aws.ToString(q.QueueUrl)
}

// awsEnv is the environment of a worker that reaches the local SQS through the standard AWS
// chain, reading no file of the machine's.
func awsEnv(t *testing.T, endpoint string) []string {
	home := t.TempDir()
	return []string{
		"HOME=" + home, "AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials"),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS=" + endpoint,
	}
}

// TestSQSWorkerProcess runs the worker binary as a user does on an SQS FIFO queue: the settings
// of docs/configuration.md in the environment, region, credentials and endpoint from the AWS
// chain. It restores the order of shuffled groups with their early messages held in Postgres,
// drops the duplicate copies and stops on SIGTERM with exit code 0.
func TestSQSWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker binary")
	}
	pgtest.RequireServer(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, workerbin.Build(ctx, bin, os.Stderr))

	endpoint, client, queueURL := sqsQueue(t)
	_, schema := pgtest.NewPoolWithSchema(t, nil)

	// 5 groups of 30, each shuffled, with 2 copies of random messages sent under ids of their
	// own (a producer retrying after the deduplication window).
	const groups, perGroup = 5, 30
	rng := rand.New(rand.NewPCG(7, 7))
	var msgs []*azservicebus.Message
	for g := range groups {
		sid := fmt.Sprintf("order-%d", g)
		seqs := rng.Perm(perGroup)
		seqs = append(seqs, rng.IntN(perGroup), rng.IntN(perGroup))
		for k, i := range seqs {
			seq := int64(i + 1)
			id := publisher.MessageID(sid, seq)
			if k >= perGroup {
				id += fmt.Sprintf("/copy-%d", k)
			}
			props := map[string]any{"Sequence": seq}
			if seq == perGroup {
				props["IsLast"] = true
			}
			msgs = append(msgs, &azservicebus.Message{SessionID: &sid, MessageID: &id, Body: fmt.Appendf(nil, `{"n":%d}`, seq), ApplicationProperties: props})
		}
	}
	sender, err := sqsadapter.NewSender(client, queueURL)
	require.NoError(t, err)
	_, err = sender.SendMessages(ctx, msgs)
	require.NoError(t, err)

	cmd := exec.CommandContext(ctx, bin, "run")
	cmd.Env = append(awsEnv(t, endpoint),
		"PATH="+os.Getenv("PATH"),
		"SEQBUS_PROVIDER=sqs", "SEQBUS_SQS_QUEUE_URL="+queueURL,
		"SEQBUS_STATE_STORE=postgres", "SEQBUS_DATABASE_URL="+pgtest.SchemaDSN(schema), "SEQBUS_MIGRATE_ON_START=true",
		"SEQBUS_EARLY_MESSAGES=store", "SEQBUS_REORDER_WINDOW=4", "SEQBUS_SESSION_IDLE_TIMEOUT=1s",
		"SEQBUS_SWEEP_INTERVAL=200ms", "SEQBUS_HTTP_ADDR=off", "SEQBUS_HANDLER=log",
	)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr testio.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	// The log handler prints one JSON line per handled message.
	handled := map[string][]int64{}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for n := 0; n < groups*perGroup; n++ {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the worker ended early: %s", stderr.String())
			var rec struct {
				SessionID string `json:"session_id"`
				Sequence  int64  `json:"sequence"`
			}
			require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
			handled[rec.SessionID] = append(handled[rec.SessionID], rec.Sequence)
		case <-ctx.Done():
			t.Fatalf("handled %d of %d: %s", n, groups*perGroup, stderr.String())
		}
	}
	want := make([]int64, perGroup)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for g := range groups {
		require.Equal(t, want, handled[fmt.Sprintf("order-%d", g)], "group order-%d handled once each, in order", g)
	}
	// The copies are dropped: the queue empties with nothing more handled.
	require.Eventually(t, func() bool {
		out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	}, 30*time.Second, 50*time.Millisecond, "stderr: %s", stderr.String())

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	for l := range lines {
		t.Errorf("handled after the last: %s", l)
	}
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	log := stderr.String()
	require.Contains(t, log, `"provider":"sqs"`)
	require.Contains(t, log, `"entity":"sqs:000000000000/orders.fifo"`)
	require.Contains(t, log, "worker: stopped")
	require.Contains(t, log, `"duplicates":10`, "the 10 copies were dropped")
}

// A worker on a queue that does not exist, or that SQS refuses otherwise, stops at start naming
// the setting.
func TestSQSWorkerRefusals(t *testing.T) {
	pgtest.RequireServer(t)
	endpoint, _, queueURL := sqsQueue(t)
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"missing queue", map[string]string{"SEQBUS_SQS_QUEUE_URL": strings.Replace(queueURL, "orders.fifo", "nothing.fifo", 1)}, "SEQBUS_SQS_QUEUE_URL"},
		{"no store", map[string]string{"SEQBUS_STATE_STORE": "servicebus", "SEQBUS_DATABASE_URL": ""}, "SEQBUS_STATE_STORE: SEQBUS_PROVIDER=sqs needs SEQBUS_STATE_STORE=postgres"},
		{"deferral", map[string]string{"SEQBUS_EARLY_MESSAGES": "defer"}, "SEQBUS_EARLY_MESSAGES: SEQBUS_PROVIDER=sqs needs SEQBUS_EARLY_MESSAGES=store"},
		{"a service bus setting", map[string]string{"SEQBUS_QUEUE": "orders"}, "SEQBUS_QUEUE: is a Service Bus setting, refused with SEQBUS_PROVIDER=sqs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for _, kv := range awsEnv(t, endpoint) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			env := map[string]string{
				"SEQBUS_PROVIDER": "sqs", "SEQBUS_SQS_QUEUE_URL": queueURL, "SEQBUS_STATE_STORE": "postgres",
				"SEQBUS_DATABASE_URL": pgtest.SchemaDSN(schema), "SEQBUS_MIGRATE_ON_START": "true", "SEQBUS_EARLY_MESSAGES": "store",
			}
			for k, v := range tt.env {
				env[k] = v
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			c, _, errOut := newTestCLI()
			require.Equal(t, 1, c.run(t.Context(), nil), errOut.String())
			require.Contains(t, errOut.String(), tt.wantErr)
		})
	}
	// The commands that read Service Bus only say so.
	for _, cmd := range [][]string{{"dlq", "list"}, {"sessions", "list"}, {"doctor"}, {"console"}, {"relay"}} {
		clearEnv(t)
		t.Setenv("SEQBUS_PROVIDER", "sqs")
		t.Setenv("SEQBUS_SQS_QUEUE_URL", queueURL)
		t.Setenv("SEQBUS_STATE_STORE", "postgres")
		t.Setenv("SEQBUS_DATABASE_URL", pgtest.SchemaDSN(schema))
		t.Setenv("SEQBUS_EARLY_MESSAGES", "store")
		c, _, errOut := newTestCLI()
		require.Equal(t, 1, c.run(t.Context(), cmd), errOut.String())
		require.Contains(t, errOut.String(), "worker "+strings.Join(cmd, " ")+": not available with SEQBUS_PROVIDER=sqs in this build", cmd)
	}
}
