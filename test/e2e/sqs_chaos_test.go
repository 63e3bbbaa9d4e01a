package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/tcpproxy"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// sqsChaosShort is TestSQSChaos's preset. A killed replica's messages come back when their
// visibility lapses (30 s, the worker's), so the kills fall in the first seconds and the run
// ends within a minute.
var sqsChaosShort = chaosPreset{
	name: "sqs-short", sessions: 120, messages: 5, duplicates: 1, garbage: 4,
	replicas: 2, maxSessions: 8, latency: 2 * time.Millisecond, failRate: 0.02, maxFails: 2,
	killEvery: 2 * time.Second, cutEvery: 1500 * time.Millisecond, faultsFor: 5 * time.Second,
	finishWithin: 50 * time.Second, sweepInterval: time.Second,
}

// TestSQSChaos runs two worker processes on the local SQS FIFO (emulator/sqs) with the settings of
// docs/sqs-worker.md (state and early messages in Postgres), through a TCP proxy in front of the
// local SQS's HTTP port that cuts every connection again and again, SIGKILLs a random replica
// and starts a replacement, with a handler that fails transiently; the groups' messages are
// shuffled, with duplicates sent under ids of their own (past SQS's deduplication), and garbage
// without a sequence. Then the faults stop and the run must finish by itself: every sequence of
// every group handled (nothing lost), every handler call in order within the replay window (on
// SQS with pipelined runs a session's messages, up to 10: their deletes land when it closes), the
// queue empty and the dead-letter queue holding exactly the garbage.
//
//	go test ./test/e2e -run TestSQSChaos -v
func TestSQSChaos(t *testing.T) {
	t.Parallel()
	p := sqsChaosShort
	seed := *chaosSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0x5c4a05))

	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	px, err := tcpproxy.Start(srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	client := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	// A queue name of the test's own: the sweeper's lease is per entity in the database.
	name := fmt.Sprintf("chaos-%d", time.Now().UnixNano())
	queueURL, dlqURL := sqsFIFOQueue(t, client, name)

	cfg := worker.DefaultConfig()
	cfg.Provider, cfg.StateStore, cfg.EarlyMessages = worker.ProviderSQS, worker.StateStorePostgres, worker.EarlyMessagesStore
	window := cfg.EngineConfig().ReplayWindow()
	t.Logf("chaos %s on SQS, replay window %d, seed %d (-chaos.seed to repeat)", p.name, window, seed)
	h := newChaosHandler(p, window, rng.Uint64())
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	_, pgEnv := postgresEnv(t)
	home := t.TempDir()
	env := append(cleanEnv(),
		"HOME="+home, "AWS_CONFIG_FILE="+filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "credentials"),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS=http://"+px.Addr(),
		"SEQBUS_PROVIDER=sqs", "SEQBUS_SQS_QUEUE_URL="+queueURL, "SEQBUS_EARLY_MESSAGES=store",
		"SEQBUS_HANDLER=http",
		"SEQBUS_MAX_CONCURRENT_SESSIONS="+strconv.Itoa(p.maxSessions),
		"SEQBUS_SESSION_IDLE_TIMEOUT=1s",
		"SEQBUS_SWEEP_INTERVAL="+p.sweepInterval.String(),
		"SEQBUS_SHUTDOWN_TIMEOUT=10s",
		"SEQBUS_LOG_LEVEL=info", // "worker: running" tells the test a process has taken its signals
		"SEQBUS_HTTP_ADDR=127.0.0.1:0",
	)
	env = append(env, pgEnv...)
	var procs []*proc
	// Each process calls the handler under a path of its own, so that a violation can say which
	// processes' calls interleaved.
	start := func(name string) *proc {
		w := startWorker(t, name, append(slices.Clip(env), "SEQBUS_HANDLER_URL="+hs.URL+"/"+name))
		procs = append(procs, w)
		return w
	}
	live := make([]*proc, p.replicas)
	for i := range live {
		live[i] = start(fmt.Sprintf("worker-%d", i))
	}

	plan := demo.Plan(p.sessions, p.messages, p.duplicates, seed)
	began := time.Now()
	h.mu.Lock()
	h.began = began
	h.mu.Unlock()
	publishSQSPlan(t, client, queueURL, plan, p.garbage)

	cuts := 0
	kills := injectFaults(t, rng, live, start, p.killEvery, p.cutEvery, p.faultsFor, func() { cuts += px.Cut() })
	faultsEnd := time.Since(began)

	ids := sessionIDs(p.sessions)
	left := func(url string) int {
		n, err := sqsMessages(t.Context(), client, url)
		require.NoError(t, err)
		return n
	}
	waitFor(t, p.finishWithin, func() bool {
		return h.ended(ids, int64(p.messages)) && left(queueURL) == 0 && left(dlqURL) >= p.garbage
	}, func() string {
		return fmt.Sprintf("%s; queue %d messages, dead-letter queue %d", h.progress(ids, int64(p.messages)), left(queueURL), left(dlqURL))
	})
	took := time.Since(began)
	for _, w := range live {
		w.stop(t)
	}

	s := h.summary()
	t.Logf("sqs chaos summary: preset=%s seed=%d kills=%d cuts=%d calls=%d handled=%d failed=%d repeats=%d longest_replay=%d violations=%d dead_lettered=%d faults=%s total=%s",
		p.name, seed, kills, cuts, s.calls, s.handled, s.failed, s.repeats, s.longestReplay, len(s.violations), left(dlqURL),
		faultsEnd.Round(time.Second), took.Round(time.Second))
	if len(s.violations) > 0 {
		logViolations(t, h, s.violations, procs)
	}
	require.Empty(t, s.violations, "handler calls out of order")
	require.LessOrEqual(t, s.longestReplay, int64(window), "no replay beyond the window")
	require.Equal(t, p.sessions*p.messages, s.handled, "every sequence handled once, repeats aside")
	require.Positive(t, kills)
	require.Positive(t, cuts)
	require.Zero(t, left(queueURL), "the queue is empty")
	requireOnlySQSGarbage(t, client, dlqURL, p.garbage)
}

// sqsFIFOQueue creates name.fifo with its dead-letter queue name-dlq.fifo (maxReceiveCount 50, as
// docs/sqs.md advises) and returns both URLs.
func sqsFIFOQueue(t *testing.T, client *awssqs.Client, name string) (queueURL, dlqURL string) {
	t.Helper()
	queueURL, dlqURL, err := sqsadapter.CreateFIFO(t.Context(), client, name, 50)
	require.NoError(t, err)
	return queueURL, dlqURL
}

// publishSQSPlan sends plan, one group per session, and then garbage messages without a
// sequence into the first groups. SQS drops a copy whose deduplication id it saw within 5
// minutes, so each duplicate gets an id of its own, as a producer retrying after that window
// sends it: the copies reach the workers, which drop them by sequence.
func publishSQSPlan(t *testing.T, client *awssqs.Client, queueURL string, plan []demo.Publication, garbage int) {
	t.Helper()
	sender, err := sqsadapter.NewSender(client, queueURL)
	require.NoError(t, err)
	copies := map[string]int{}
	msgs := make([]*azservicebus.Message, 0, len(plan)+garbage)
	for _, p := range plan {
		sid, mid := p.SessionID, p.SessionID+"/"+strconv.FormatInt(p.Sequence, 10)
		if p.Duplicate {
			copies[mid]++
			mid += "/copy-" + strconv.Itoa(copies[mid])
		}
		props := map[string]any{contract.SequenceProperty: p.Sequence}
		if p.Last {
			props[contract.LastProperty] = true
		}
		msgs = append(msgs, &azservicebus.Message{SessionID: &sid, MessageID: &mid, ApplicationProperties: props,
			Body: fmt.Appendf(nil, `{"order":%q,"step":%d}`, p.SessionID, p.Sequence)})
	}
	for i := range garbage {
		sid, mid := demo.SessionID(i), "garbage-"+strconv.Itoa(i)
		msgs = append(msgs, &azservicebus.Message{SessionID: &sid, MessageID: &mid, Body: []byte("garbage")})
	}
	_, err = sender.SendMessages(t.Context(), msgs)
	require.NoError(t, err)
}

// sqsMessages is the queue's messages, visible and in flight.
func sqsMessages(ctx context.Context, client *awssqs.Client, queueURL string) (int, error) {
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: names})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		v, err := strconv.Atoi(strings.TrimSpace(out.Attributes[string(name)]))
		if err != nil {
			return 0, fmt.Errorf("attribute %s: %w", name, err)
		}
		n += v
	}
	return n, nil
}

// requireOnlySQSGarbage checks that the dead-letter queue holds exactly n messages, all
// dead-lettered as InvalidSequence with the garbage body.
func requireOnlySQSGarbage(t *testing.T, client *awssqs.Client, dlqURL string, n int) {
	t.Helper()
	var got []types.Message
	for range 10 {
		out, err := client.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{
			QueueUrl: &dlqURL, MaxNumberOfMessages: 10, VisibilityTimeout: 60, MessageAttributeNames: []string{"All"},
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			break
		}
		got = append(got, out.Messages...)
	}
	require.Len(t, got, n, "the dead-letter queue holds the garbage and nothing else")
	for _, m := range got {
		require.Equal(t, "garbage", aws.ToString(m.Body))
		reason := m.MessageAttributes["DeadLetterReason"]
		require.Equal(t, sequencer.ReasonInvalidSequence, aws.ToString(reason.StringValue), "%v", m.MessageAttributes)
	}
}
