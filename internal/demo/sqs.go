package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgschema"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// sqsFIFO is the in-process SQS FIFO (emulator/sqs) on a free port with a FIFO queue and its
// dead-letter queue, and a migrated schema of its own in Postgres for the state store.
type sqsFIFO struct {
	srv      *http.Server
	tr       *http.Transport
	client   *awssqs.Client
	queueURL string
	pool     *pgxpool.Pool
	drop     func()
}

func startSQS(ctx context.Context, databaseURL string, logger *slog.Logger) (_ *sqsFIFO, err error) {
	b := &sqsFIFO{}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen for the local SQS: %w", err)
	}
	// An account of the run's own: the state store keeps the queue's states, and the sweeper its
	// lease, under sqs:<account>/<queue>, and the lease is per database, whatever the schema.
	account := fmt.Sprintf("%012d", rand.Int64N(1e12))
	b.srv = &http.Server{Handler: sqs.New(sqs.Config{AccountID: account, Logger: logger.With(slog.String("component", "sqs"))}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	// A transport of the demo's own, so that closing leaves no idle connection behind.
	b.tr = http.DefaultTransport.(*http.Transport).Clone()
	b.client = awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://" + ln.Addr().String()), HTTPClient: &http.Client{Transport: b.tr},
		Credentials: credentials.NewStaticCredentialsProvider("demo", "demo", ""),
	})

	if b.queueURL, _, err = sqsadapter.CreateFIFO(ctx, b.client, queueName, 50); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}

	schema, err := pgschema.Create(ctx, databaseURL, "seqbus_demo", 16)
	if err != nil {
		return nil, fmt.Errorf("demo: the SQS demo keeps its state in Postgres (-database-url): %w", err)
	}
	b.pool, b.drop = schema.Pool, schema.Drop
	return b, nil
}

func (b *sqsFIFO) close() {
	if b.drop != nil {
		b.drop()
	}
	if b.tr != nil {
		b.tr.CloseIdleConnections()
	}
	if b.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.srv.Shutdown(ctx)
	}
}

// replica is a worker on the queue's message groups, its early messages held in the store.
func (b *sqsFIFO) replica() worker.Config {
	cfg := worker.DefaultConfig()
	cfg.Provider, cfg.SQSQueueURL, cfg.SQSClient = worker.ProviderSQS, b.queueURL, b.client
	cfg.StateStore, cfg.Pool, cfg.EarlyMessages = worker.StateStorePostgres, b.pool, worker.EarlyMessagesStore
	return cfg
}

// publish sends the plan through the SQS FIFO sender, one group per session. SQS drops a copy
// with a deduplication id it saw in the last 5 minutes, so each duplicate copy gets an id of its
// own, as a producer retrying after that window would send it: the copies reach the workers,
// which drop them by sequence.
func (b *sqsFIFO) publish(ctx context.Context, plan []Publication) error {
	sender, err := sqsadapter.NewSender(b.client, b.queueURL)
	if err != nil {
		return fmt.Errorf("demo: sender: %w", err)
	}
	copies := map[string]int{}
	msgs := make([]*azservicebus.Message, len(plan))
	for i, p := range plan {
		sid, mid := p.SessionID, p.SessionID+"/"+strconv.FormatInt(p.Sequence, 10)
		if p.Duplicate {
			copies[mid]++
			mid += "/copy-" + strconv.Itoa(copies[mid])
		}
		props := map[string]any{contract.SequenceProperty: p.Sequence}
		if p.Last {
			props[contract.LastProperty] = true
		}
		msgs[i] = &azservicebus.Message{
			SessionID: &sid, MessageID: &mid, ApplicationProperties: props,
			Body: fmt.Appendf(nil, `{"order":%q,"step":%d}`, p.SessionID, p.Sequence),
		}
	}
	if _, err := sender.SendMessages(ctx, msgs); err != nil {
		return fmt.Errorf("demo: publish: %w", err)
	}
	return nil
}

// left waits until the queue holds no message, visible or in flight, or timeout, and returns
// how many it still holds.
func (b *sqsFIFO) left(ctx context.Context, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		n, err := b.count(ctx)
		if err != nil {
			return -1
		}
		if n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *sqsFIFO) count(ctx context.Context) (int64, error) {
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := b.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &b.queueURL, AttributeNames: names})
	if err != nil {
		return 0, err
	}
	var n int64
	var errs []error
	for _, name := range names {
		v, err := strconv.ParseInt(strings.TrimSpace(out.Attributes[string(name)]), 10, 64)
		errs = append(errs, err)
		n += v
	}
	return n, errors.Join(errs...)
}
