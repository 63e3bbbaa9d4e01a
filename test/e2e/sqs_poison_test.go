package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sqsadapter"
)

// sqsFixture is a local SQS FIFO queue with its FIFO redrive dead-letter queue, served on a free
// port, and the environment of a worker on it (the settings of docs/sqs-worker.md, region,
// credentials and endpoint from the standard AWS chain).
type sqsFixture struct {
	client   *awssqs.Client
	queueURL string
	dlqURL   string
	env      []string
}

func newSQSFixture(t *testing.T, name string, extra ...string) *sqsFixture {
	t.Helper()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	client := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	queueURL, dlqURL := sqsFIFOQueue(t, client, name)
	_, pgEnv := postgresEnv(t)
	home := t.TempDir()
	env := append(cleanEnv(),
		"HOME="+home, "AWS_CONFIG_FILE="+filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "credentials"),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS="+srv.URL,
		"SEQBUS_PROVIDER=sqs", "SEQBUS_SQS_QUEUE_URL="+queueURL, "SEQBUS_EARLY_MESSAGES=store",
		"SEQBUS_SESSION_IDLE_TIMEOUT=1s", "SEQBUS_SWEEP_INTERVAL=200ms", "SEQBUS_SHUTDOWN_TIMEOUT=10s",
		"SEQBUS_LOG_LEVEL=info", "SEQBUS_HTTP_ADDR=off",
		"SEQBUS_MAX_HANDLER_ATTEMPTS=2", "SEQBUS_RETRY_BASE=10ms", "SEQBUS_RETRY_MAX=20ms",
	)
	env = append(append(env, pgEnv...), extra...)
	return &sqsFixture{client: client, queueURL: queueURL, dlqURL: dlqURL, env: env}
}

// send publishes the sequences of group, in the order given, each with its own message id; last
// is the group's last sequence.
func (f *sqsFixture) send(t *testing.T, group string, last int64, seqs ...int64) {
	t.Helper()
	sender, err := sqsadapter.NewSender(f.client, f.queueURL)
	require.NoError(t, err)
	var msgs []*azservicebus.Message
	for _, seq := range seqs {
		props := map[string]any{"Sequence": seq}
		if seq == last {
			props["IsLast"] = true
		}
		id := fmt.Sprintf("%s-%d", group, seq)
		msgs = append(msgs, &azservicebus.Message{SessionID: &group, MessageID: &id, Body: fmt.Appendf(nil, `{"n":%d}`, seq), ApplicationProperties: props})
	}
	_, err = sender.SendMessages(t.Context(), msgs)
	require.NoError(t, err)
}

// count returns the approximate visible and in-flight messages of queueURL.
func (f *sqsFixture) count(t *testing.T, queueURL string) (visible, inFlight string) {
	t.Helper()
	out, err := f.client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	return out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

// TestSQSPoisonCanonicalRecovery runs the canonical recovery of docs/operations.md on SQS FIFO
// with the CLI as a user runs it: a handler bug parks a group whose poison message went to the
// redrive dead-letter queue, and a group whose poison message the state store held (its
// dead letter stays in the store); `worker dlq list` shows both, the handler is fixed,
// `worker dlq replay --session ID` and `worker sessions resume ID` bring each group back, and
// every group completes in order, nothing lost, both dead-letter places empty but for a message
// `worker sessions skip` gave up.
func TestSQSPoisonCanonicalRecovery(t *testing.T) {
	const n = 6
	// "active" fails at 3 when it is received; "held" fails at 3 while the store holds it (3 to
	// 6 arrive before 2); "given-up" fails at 2, which the operator skips; "clean" never fails.
	h := newBuggyHandler("active/3", "held/3", "given-up/2")
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	f := newSQSFixture(t, "poison", "SEQBUS_POISON_POLICY=park", "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)
	f.send(t, "active", n, 1, 2, 3, 4, 5, 6)
	f.send(t, "held", n, 1, 3, 4, 5, 6, 2)
	f.send(t, "clean", n, 1, 2, 3, 4, 5, 6)
	f.send(t, "given-up", n, 1, 2, 3, 4, 5, 6)
	w := startWorker(t, "worker", f.env, "run")

	// Step 1: see what is stuck.
	var parked operator.ListResult
	waitFor(t, waitLong, func() bool {
		parked = cliJSON[operator.ListResult](t, f.env, "sessions", "list", "--parked")
		return len(parked.Sessions) == 3 && h.complete([]string{"clean"}, n)
	}, func() string { return fmt.Sprintf("parked: %+v; handled: %s", parked.Sessions, h) })
	want := map[string]int64{"active": 3, "held": 3, "given-up": 2}
	for _, s := range parked.Sessions {
		require.NotNil(t, s.Parked, s.SessionID)
		require.Equal(t, want[s.SessionID], s.Parked.Sequence, s.SessionID)
		require.Contains(t, s.Parked.Reason, "status 500", s.SessionID)
	}
	var dlq operator.DLQListResult
	waitFor(t, waitLong, func() bool {
		dlq = cliJSON[operator.DLQListResult](t, f.env, "dlq", "list", "--session", "active")
		return len(dlq.Messages) == 1 && len(dlq.Held) == 0
	}, func() string { return fmt.Sprintf("dlq list: %+v", dlq) })
	require.Equal(t, "active", dlq.Messages[0].SessionID)
	require.Equal(t, int64(3), dlq.Messages[0].Sequence)
	require.Equal(t, "HandlerFailed", dlq.Messages[0].Reason)
	require.Contains(t, dlq.Messages[0].Description, "status 500")
	dlq = cliJSON[operator.DLQListResult](t, f.env, "dlq", "list", "--reason", "HandlerFailed")
	require.Len(t, dlq.Messages, 2)
	require.Len(t, dlq.Held, 1)
	require.Equal(t, "held", dlq.Held[0].SessionID)
	require.Equal(t, int64(3), dlq.Held[0].Sequence)
	require.Equal(t, "HandlerFailed", dlq.Held[0].Reason)
	table := runCLI(t, f.env, "dlq", "list")
	require.Equal(t, 0, table.code, table.stderr)
	require.Contains(t, table.stdout, "3 dead letters, 1 of them in the state store")
	show := cliJSON[operator.ShowResult](t, f.env, "sessions", "show", "active")
	require.Contains(t, show.MessagesUnavailable, "SQS has no peek")
	require.Len(t, show.DeadLetters, 1)
	// Listing gave every dead letter back: none is in flight.
	visible, inFlight := f.count(t, f.dlqURL)
	require.Equal(t, "2", visible)
	require.Equal(t, "0", inFlight)

	// Bad arguments and a dry run change nothing.
	for _, args := range [][]string{
		{"dlq", "replay"},
		{"dlq", "replay", "--session", "active", "--all"},
		{"dlq", "replay", "--session", "active", "--target", "elsewhere.fifo"},
		{"dlq", "list", "--limit", "-1"},
	} {
		r := runCLI(t, f.env, args...)
		require.Equal(t, 2, r.code, "%v: %s %s", args, r.stdout, r.stderr)
	}
	dry := cliJSON[operator.DLQReplayResult](t, f.env, "dlq", "replay", "--all", "--dry-run")
	require.True(t, dry.DryRun)
	require.Len(t, dry.Sessions, 3)
	require.Equal(t, []int64{3}, dry.Sessions[0].Sequences)
	again := cliJSON[operator.DLQListResult](t, f.env, "dlq", "list")
	require.Len(t, again.Messages, 2)
	require.Len(t, again.Held, 1)

	// Step 2: the fix is deployed. Steps 3 and 4 per session: replay, then resume.
	h.fix()
	for _, id := range []string{"active", "held"} {
		replay := runCLI(t, f.env, "dlq", "replay", "--session", id)
		require.Equal(t, 0, replay.code, replay.stderr)
		require.Contains(t, replay.stdout, "1 copies of 1 sessions sent to "+f.queueURL, replay.stdout)
		resume := runCLI(t, f.env, "sessions", "resume", id, "--json")
		require.Equal(t, 0, resume.code, "resume %s: %s", id, resume.stderr)
	}

	// The message that must not be handled is given up: the group goes on after it.
	skip := runCLI(t, f.env, "sessions", "skip", "given-up", "--json")
	require.Equal(t, 0, skip.code, skip.stderr)

	// Step 5: every group completes in order, nothing lost, nothing twice; nothing is parked, and
	// only the skipped message is still dead-lettered.
	waitFor(t, waitLong, func() bool {
		return h.complete([]string{"active", "held", "clean"}, n) && len(h.sequences("given-up")) == n-1
	}, h.String)
	for _, id := range []string{"active", "held", "clean"} {
		require.Equal(t, oneToN(1, n), h.sequences(id), "group %s: every sequence once, in order", id)
	}
	require.Equal(t, []int64{1, 3, 4, 5, 6}, h.sequences("given-up"))
	requireNoneListed(t, f.env, "--parked", isParked)
	final := cliJSON[operator.DLQListResult](t, f.env, "dlq", "list")
	require.Len(t, final.Messages, 1)
	require.Equal(t, "given-up", final.Messages[0].SessionID)
	require.Equal(t, int64(2), final.Messages[0].Sequence)
	require.Empty(t, final.Held)
	waitFor(t, waitLong, func() bool {
		v, fl := f.count(t, f.queueURL)
		dv, dfl := f.count(t, f.dlqURL)
		return v == "0" && fl == "0" && dv == "1" && dfl == "0"
	}, func() string {
		return "the queue is not empty, or the dead-letter queue holds more than the skipped message"
	})
	w.stop(t)
}

// TestSQSPoisonSkip runs the poison policy skip on SQS FIFO: the poison message goes to the
// redrive dead-letter queue, `worker dlq list` shows it, and the group's other messages are
// handled in order.
func TestSQSPoisonSkip(t *testing.T) {
	h := newBuggyHandler("orders/2")
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	f := newSQSFixture(t, "skip", "SEQBUS_POISON_POLICY=skip", "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)
	f.send(t, "orders", 5, 1, 2, 3, 4, 5)
	w := startWorker(t, "worker", f.env, "run")
	waitFor(t, waitLong, func() bool { return len(h.sequences("orders")) == 4 }, h.String)
	require.Equal(t, []int64{1, 3, 4, 5}, h.sequences("orders"))
	dlq := cliJSON[operator.DLQListResult](t, f.env, "dlq", "list", "--session", "orders", "--reason", "HandlerFailed")
	require.Len(t, dlq.Messages, 1)
	require.Equal(t, int64(2), dlq.Messages[0].Sequence)
	requireNoneListed(t, f.env, "--parked", isParked)
	w.stop(t)
}

// A replay on SQS killed between its copies and the deletes of their originals loses nothing:
// the replay run again waits for the originals the killed one held, sends their copies again
// (dropped as duplicates), deletes them, and the group completes once, in order.
func TestSQSReplayCrashHalfWay(t *testing.T) {
	h := newBuggyHandler("orders/3")
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	f := newSQSFixture(t, "crash", "SEQBUS_POISON_POLICY=park", "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)
	f.send(t, "orders", 5, 1, 2, 3, 4, 5)
	w := startWorker(t, "worker", f.env, "run")
	waitFor(t, waitLong, func() bool {
		return len(cliJSON[operator.DLQListResult](t, f.env, "dlq", "list", "--session", "orders").Messages) == 1
	}, h.String)
	h.fix()

	crash := runCLI(t, append(f.env, "SEQBUS_TEST_REPLAY_CRASH_AFTER=1"), "dlq", "replay", "--session", "orders")
	require.Equal(t, 137, crash.code, crash.stderr)
	_, inFlight := f.count(t, f.dlqURL)
	require.Equal(t, "1", inFlight, "the killed replay left its dead letter in flight")
	// The killed replay's dead letter stays invisible for 60s: longer than runCLI waits.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "dlq", "replay", "--session", "orders")
	cmd.Env = f.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	require.NoError(t, err, errOut.String())
	t.Logf("the replay run again waited %s for the killed one's dead letter", time.Since(start).Round(time.Second))
	again := cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
	require.Equal(t, 0, again.code, again.stderr)
	require.Contains(t, again.stderr, "in flight elsewhere")
	require.Contains(t, again.stdout, "1 copies of 1 sessions sent")
	resume := runCLI(t, f.env, "sessions", "resume", "orders")
	require.Equal(t, 0, resume.code, resume.stderr)

	waitFor(t, waitLong, func() bool { return len(h.sequences("orders")) == 5 }, h.String)
	require.Equal(t, oneToN(1, 5), h.sequences("orders"))
	require.Empty(t, cliJSON[operator.DLQListResult](t, f.env, "dlq", "list").Messages)
	visible, inFlight := f.count(t, f.dlqURL)
	require.Equal(t, "0", visible)
	require.Equal(t, "0", inFlight)
	w.stop(t)
	require.Equal(t, oneToN(1, 5), h.sequences("orders"), "the copy sent twice was handled once")
}
