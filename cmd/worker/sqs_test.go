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
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/internal/workerbin"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// sqsQueue serves a local SQS on a free port with a FIFO queue and its FIFO dead-letter queue,
// name.fifo and name-dlq.fifo (a name of the test's own: the sweeper's lease is per entity in
// the database, whatever the schema), and returns the server's URL, a client and the queue's URL.
func sqsQueue(t *testing.T, name string) (endpoint string, client *awssqs.Client, queueURL string) {
	t.Helper()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	client = awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	queueURL, _, err := sqsadapter.CreateFIFO(t.Context(), client, name, 50)
	require.NoError(t, err)
	return srv.URL, client, queueURL
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

// shuffledGroups returns groups × perGroup messages, each group's sequences shuffled, with
// copies extra copies of random messages per group sent under ids of their own (a producer
// retrying after the deduplication window).
func shuffledGroups(groups, perGroup, copies int, seed uint64) []*azservicebus.Message {
	rng := rand.New(rand.NewPCG(seed, seed))
	var msgs []*azservicebus.Message
	for g := range groups {
		sid := fmt.Sprintf("order-%d", g)
		seqs := rng.Perm(perGroup)
		for range copies {
			seqs = append(seqs, rng.IntN(perGroup))
		}
		for k, i := range seqs {
			seq := int64(i + 1)
			id := publisher.MessageID(sid, seq)
			if k >= perGroup {
				id += fmt.Sprintf("/copy-%d", k)
			}
			props := map[string]any{"Sequence": seq}
			if seq == int64(perGroup) {
				props["IsLast"] = true
			}
			msgs = append(msgs, &azservicebus.Message{SessionID: &sid, MessageID: &id, Body: fmt.Appendf(nil, `{"n":%d}`, seq), ApplicationProperties: props})
		}
	}
	return msgs
}

// sqsWorker is a worker process on an SQS queue, with the handled messages its log handler
// prints.
type sqsWorker struct {
	cmd    *exec.Cmd
	stderr *testio.SyncBuffer
	lines  chan string
}

// startSQSWorker starts the worker binary as a user does: the settings of docs/sqs-worker.md in the
// environment, region, credentials and endpoint from the AWS chain.
func startSQSWorker(ctx context.Context, t *testing.T, bin, endpoint, queueURL, schema string) *sqsWorker {
	t.Helper()
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
	w := &sqsWorker{cmd: cmd, stderr: &testio.SyncBuffer{}, lines: make(chan string)}
	cmd.Stderr = w.stderr
	require.NoError(t, cmd.Start())
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w
}

// handled reads n handled messages (the log handler's JSON lines) into checker.
func (w *sqsWorker) handled(ctx context.Context, t *testing.T, n int, checker *demo.Checker) {
	t.Helper()
	for i := range n {
		select {
		case l, ok := <-w.lines:
			require.True(t, ok, "the worker ended early: %s", w.stderr.String())
			require.NoError(t, checker.Handle(ctx, handledLine(t, l)))
		case <-ctx.Done():
			t.Fatalf("handled %d of %d: %s", i, n, w.stderr.String())
		}
	}
}

// handledLine reads the log handler's line of a handled message.
func handledLine(t *testing.T, line string) *sequencer.Message {
	t.Helper()
	var rec struct {
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
	return &sequencer.Message{SessionID: rec.SessionID, Sequence: rec.Sequence}
}

// TestSQSWorkerProcess runs the worker binary on an SQS FIFO queue. It restores the order of
// shuffled groups with their early messages held in Postgres, drops the duplicate copies and
// stops on SIGTERM with exit code 0; killed (SIGKILL) mid-run, a new process takes over and
// every group still ends in order.
func TestSQSWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker binary")
	}
	pgtest.RequireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests
	bin := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, workerbin.Build(ctx, bin, os.Stderr))
	ids := func(groups int) []string {
		out := make([]string, groups)
		for g := range out {
			out[g] = fmt.Sprintf("order-%d", g)
		}
		return out
	}
	empty := func(t *testing.T, client *awssqs.Client, queueURL string, w *sqsWorker) {
		require.Eventually(t, func() bool {
			out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
		}, time.Minute, 50*time.Millisecond, "stderr: %s", w.stderr.String())
	}

	t.Run("in order", func(t *testing.T) {
		t.Parallel()
		endpoint, client, queueURL := sqsQueue(t, "orders")
		_, schema := pgtest.NewPoolWithSchema(t, nil)
		const groups, perGroup = 5, 30
		sender, err := sqsadapter.NewSender(client, queueURL)
		require.NoError(t, err)
		_, err = sender.SendMessages(ctx, shuffledGroups(groups, perGroup, 2, 7))
		require.NoError(t, err)

		w := startSQSWorker(ctx, t, bin, endpoint, queueURL, schema)
		checker := demo.NewChecker(ids(groups), perGroup)
		w.handled(ctx, t, groups*perGroup, checker)
		require.Empty(t, checker.Violations())
		require.Empty(t, checker.Incomplete(), "every group handled once each, in order")
		require.Zero(t, checker.Redelivered())
		empty(t, client, queueURL, w) // the copies are dropped: the queue empties, nothing more handled

		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		for l := range w.lines {
			t.Errorf("handled after the last: %s", l)
		}
		require.NoError(t, w.cmd.Wait(), "stderr: %s", w.stderr.String())
		log := w.stderr.String()
		require.Contains(t, log, `"provider":"sqs"`)
		require.Contains(t, log, `"entity":"sqs:000000000000/orders.fifo"`)
		require.Contains(t, log, "worker: stopped")
		require.Contains(t, log, `"duplicates":10`, "the 10 copies were dropped")
	})

	// The outbox on SQS, as docs/outbox.md sets it up: an application enqueues in Postgres under
	// the queue's name, `worker relay` with SEQBUS_PROVIDER=sqs sends each session as a message
	// group, and the worker hands every message over in order.
	t.Run("relayed from the outbox", func(t *testing.T) {
		t.Parallel()
		endpoint, client, queueURL := sqsQueue(t, "relayed")
		pool, schema := pgtest.NewPoolWithSchema(t, nil)
		_, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{})
		require.NoError(t, err)
		const groups, perGroup = 3, 12
		for i := range perGroup {
			for g := range groups {
				require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := outbox.Enqueue(ctx, tx, outbox.EnqueueParams{Entity: "relayed.fifo", SessionID: fmt.Sprintf("order-%d", g),
						Body: fmt.Appendf(nil, `{"step":%d}`, i+1), Last: i == perGroup-1})
					return err
				}))
			}
		}
		relay := exec.CommandContext(ctx, bin, "relay")
		relay.Env = append(awsEnv(t, endpoint), "PATH="+os.Getenv("PATH"), "SEQBUS_PROVIDER=sqs",
			"SEQBUS_DATABASE_URL="+pgtest.SchemaDSN(schema), "SEQBUS_HTTP_ADDR=off", "SEQBUS_RELAY_POLL_INTERVAL=100ms")
		relayErr := &testio.SyncBuffer{}
		relay.Stderr = relayErr
		require.NoError(t, relay.Start())

		w := startSQSWorker(ctx, t, bin, endpoint, queueURL, schema)
		checker := demo.NewChecker(ids(groups), perGroup)
		w.handled(ctx, t, groups*perGroup, checker)
		require.Empty(t, checker.Violations())
		require.Empty(t, checker.Incomplete(), "every group handled once each, in order")
		empty(t, client, queueURL, w)
		var left int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM seqbus_outbox WHERE sent_at IS NULL").Scan(&left))
		require.Zero(t, left, "the relay sent every message")

		for _, p := range []*exec.Cmd{relay, w.cmd} {
			require.NoError(t, p.Process.Signal(syscall.SIGTERM))
		}
		require.NoError(t, relay.Wait(), "relay stderr: %s", relayErr.String())
		require.NoError(t, w.cmd.Wait(), "stderr: %s", w.stderr.String())
		require.Contains(t, relayErr.String(), `"provider":"sqs"`)
		require.Contains(t, relayErr.String(), fmt.Sprintf(`"msg":"worker: relay stopped","sent":%d,"failures":0`, groups*perGroup))
	})

	t.Run("killed and replaced", func(t *testing.T) {
		t.Parallel()
		endpoint, client, queueURL := sqsQueue(t, "killed")
		_, schema := pgtest.NewPoolWithSchema(t, nil)
		const groups, perGroup = 4, 40
		sender, err := sqsadapter.NewSender(client, queueURL)
		require.NoError(t, err)
		_, err = sender.SendMessages(ctx, shuffledGroups(groups, perGroup, 0, 11))
		require.NoError(t, err)

		// The worker's default replay window: what a killed worker may hand over again.
		checker := demo.NewReplayChecker(ids(groups), perGroup, worker.DefaultConfig().EngineConfig().ReplayWindow())
		first := startSQSWorker(ctx, t, bin, endpoint, queueURL, schema)
		first.handled(ctx, t, groups*perGroup/3, checker)
		require.NoError(t, first.cmd.Process.Kill())
		_ = first.cmd.Wait()
		killedAfter := checker.Handled()
		for l := range first.lines { // what it handled and printed before it died
			require.NoError(t, checker.Handle(ctx, handledLine(t, l)))
		}

		second := startSQSWorker(ctx, t, bin, endpoint, queueURL, schema)
		for {
			select {
			case <-checker.Done():
			default:
				second.handled(ctx, t, 1, checker)
				continue
			}
			break
		}
		require.Empty(t, checker.Violations())
		require.Empty(t, checker.Incomplete())
		empty(t, client, queueURL, second)
		require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, second.cmd.Wait(), "stderr: %s", second.stderr.String())
		t.Logf("killed after %d handled; %d handled in all, %d again after the kill", killedAfter, checker.Handled(), checker.Redelivered())
	})
}

// A worker on a queue that does not exist, or that SQS refuses otherwise, stops at start naming
// the setting.
func TestSQSWorkerRefusals(t *testing.T) {
	pgtest.RequireServer(t)
	endpoint, _, queueURL := sqsQueue(t, "refusals")
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"missing queue", map[string]string{"SEQBUS_SQS_QUEUE_URL": strings.Replace(queueURL, "refusals.fifo", "nothing.fifo", 1)}, "SEQBUS_SQS_QUEUE_URL"},
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
}
