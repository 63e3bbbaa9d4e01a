package bench

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/internal/pgschema"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// Provider is the broker the cells run on.
type Provider string

// Providers.
const (
	// ProviderServiceBus runs the cells on Service Bus: the in-process emulator or the namespace
	// of Options.ConnectionString.
	ProviderServiceBus Provider = "servicebus"
	// ProviderSQS runs the cells on the in-process SQS FIFO (emulator/sqs), the replicas' state
	// and early messages in Postgres (Options.DatabaseURL), beside a plain SDK FIFO consumer.
	ProviderSQS Provider = "sqs"
)

// sideHeader tells the counting SQS handler which client sent a request.
const sideHeader = "X-Bench-Side"

// The sides of an SQS cell whose calls are counted apart.
const (
	sideWorker    = "worker"
	sidePlain     = "plain"
	sidePublisher = "publisher"
	sideSetup     = "setup"
)

// callCounter is an http.Handler in front of the local SQS counting its API calls per side (the
// client's sideHeader) and per operation (X-Amz-Target). With latency, every call waits that
// long before the local SQS serves it (the latency pressure: a network and a service that take
// time, as the real SQS does).
type callCounter struct {
	next    http.Handler
	latency time.Duration
	mu      sync.Mutex
	by      map[string]map[string]uint64 // side → operation → calls
}

func (c *callCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.latency > 0 {
		t := time.NewTimer(c.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	side, op := r.Header.Get(sideHeader), r.Header.Get("X-Amz-Target")
	c.mu.Lock()
	if c.by[side] == nil {
		c.by[side] = map[string]uint64{}
	}
	c.by[side][op]++
	c.mu.Unlock()
	c.next.ServeHTTP(w, r)
}

// calls is every API call side made so far.
func (c *callCounter) calls(side string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, v := range c.by[side] {
		n += v
	}
	return n
}

// sidedTransport marks each request with its side.
type sidedTransport struct {
	side string
	next http.RoundTripper
}

func (t sidedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(sideHeader, t.side)
	return t.next.RoundTrip(r)
}

// localSQS is one cell's in-process SQS FIFO: the worker's queue and the plain consumer's, each
// with a dead-letter queue, and a migrated Postgres schema of the cell's own.
type localSQS struct {
	srv      *http.Server
	tr       *http.Transport
	endpoint string
	counter  *callCounter
	workerQ  string
	plainQ   string
	pool     *pgxpool.Pool
	drop     func()
}

func startLocalSQS(ctx context.Context, o Options, cell Cell) (_ *localSQS, err error) {
	l := &localSQS{counter: &callCounter{next: sqs.New(sqs.Config{Logger: o.Logger.With(slog.String("component", "sqs"))}), by: map[string]map[string]uint64{}}}
	if cell.Pressure == PressureLatency {
		l.counter.latency = o.Latency
	}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the local SQS: %w", err)
	}
	l.srv = &http.Server{Handler: l.counter, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.srv.Serve(ln) }()
	l.endpoint = "http://" + ln.Addr().String()
	l.tr = http.DefaultTransport.(*http.Transport).Clone()
	l.tr.MaxIdleConnsPerHost = 64
	admin := l.client(sideSetup)
	for _, q := range []struct {
		name string
		url  *string
	}{{"bench", &l.workerQ}, {"bench-plain", &l.plainQ}} {
		if *q.url, _, err = sqsadapter.CreateFIFO(ctx, admin, q.name, 50); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	schema, err := pgschema.Create(ctx, o.DatabaseURL, "seqbus_bench", 32)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	l.pool, l.drop = schema.Pool, schema.Drop
	return l, nil
}

// client is an SDK client of the local SQS whose calls count for side.
func (l *localSQS) client(side string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(l.endpoint),
		HTTPClient:  &http.Client{Transport: sidedTransport{side: side, next: l.tr}},
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""),
	})
}

func (l *localSQS) close() {
	if l.drop != nil {
		l.drop()
	}
	if l.tr != nil {
		l.tr.CloseIdleConnections()
	}
	if l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.srv.Shutdown(ctx)
	}
}

// runSQSCell runs one cell on a local SQS FIFO: the cell's replicas on the worker's queue until
// every group was handled, then the plain consumer on a queue of its own with the same input.
// The broker calls of each are the API calls the local SQS counted from its client.
func runSQSCell(ctx context.Context, o Options, index int, cell Cell) Result {
	res := Result{Cell: cell, Sessions: o.Sessions, Messages: o.Sessions * o.Messages}
	ctx, cancel := context.WithTimeout(ctx, o.CellTimeout)
	defer cancel()
	l, err := startLocalSQS(ctx, o, cell)
	if err != nil {
		res.Err = err
		return res
	}
	defer l.close()
	onSide(ctx, "worker", func(ctx context.Context) { res.Err = runSQSWorkers(ctx, o, index, cell, l, &res) })
	if res.Err == nil {
		onSide(ctx, "plain", func(ctx context.Context) { res.Err = runSQSPlain(ctx, o, index, cell, l, &res) })
	}
	return res
}

// runSQSWorkers runs the cell's replicas on the worker's queue of l until they handled every
// group, and fills in their part of res.
func runSQSWorkers(ctx context.Context, o Options, index int, cell Cell, l *localSQS, res *Result) error {
	ids := make([]string, o.Sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-c%02d-s%04d", o.RunID, index, i)
	}
	base := o.sqsReplicaConfig(cell)
	h := newCellHandler(ids, o.Messages, base.EngineConfig().ReplayWindow(), cell.ExceptionRate)
	client := l.client(sideWorker)
	replicas := make([]*worker.Client, 0, cell.Replicas)
	regs := make([]*prometheus.Registry, 0, cell.Replicas)
	defer func() {
		for _, w := range replicas {
			stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			if err := w.Stop(stopCtx); err != nil {
				_ = w.StopAndCancel(stopCtx)
			}
			stopCancel()
		}
	}()
	for n := range cell.Replicas {
		reg := prometheus.NewRegistry()
		cfg := o.sqsReplicaConfig(cell)
		cfg.SQSQueueURL, cfg.SQSClient, cfg.Pool = l.workerQ, client, l.pool
		cfg.Handler, cfg.HTTPAddr = &countingHandler{h: h}, worker.HTTPOff
		cfg.MaxHandlerAttempts, cfg.RetryBase, cfg.RetryMax = o.HandlerRetry.Attempts, o.HandlerRetry.Base, o.HandlerRetry.Cap
		cfg.SessionIdleTimeout, cfg.MaxConcurrentSessions, cfg.SweepInterval = time.Second, o.SessionsPerReplica, 2*time.Second
		cfg.Registry, cfg.Logger = reg, o.Logger.With(slog.Int("replica", n))
		w, err := worker.New(cfg)
		if err == nil {
			err = w.Start(context.WithoutCancel(ctx))
		}
		if err != nil {
			return fmt.Errorf("bench: replica %d: %w", n, err)
		}
		replicas = append(replicas, w)
		regs = append(regs, reg)
	}

	callsBefore := l.counter.calls(sideWorker)
	start := time.Now()
	pubErr := make(chan error, 1)
	go onSide(ctx, "publisher", func(ctx context.Context) {
		pubErr <- publishSQS(ctx, o, l, l.workerQ, ids, cell, uint64(index), &h.finished, cell.Replicas*o.SessionsPerReplica*2)
	})
	var err error
	select {
	case <-h.checker.Done():
	case err = <-pubErr:
		if err != nil {
			break
		}
		select {
		case <-h.checker.Done():
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	res.Elapsed = time.Since(start)
	res.BrokerCalls = l.counter.calls(sideWorker) - callsBefore
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("bench: cell did not finish within %s", o.CellTimeout)
	}
	handled := h.checker.Handled() - h.checker.Redelivered()
	res.Rate = float64(handled) / res.Elapsed.Seconds()
	res.HandlerCalls, res.HandlerErrors = h.calls.Load(), h.errors.Load()
	res.LatencyP50, res.LatencyP99 = h.percentiles()
	violations := h.checker.Violations()
	res.Violations = len(violations)
	res.ViolationSamples = violations[:min(len(violations), maxViolationSamples)]
	res.Incomplete = len(h.checker.Incomplete())
	for i, w := range replicas {
		st := w.Stats()
		res.StoreCalls += st.StoreCalls
		res.Duplicates += st.Duplicates
		res.StateWrites += counterValue(regs[i], "seqbus_state_saves_total")
	}
	return err
}

// sqsReplicaConfig is what every replica of an SQS cell starts from: the cell's settings on the
// SQS provider, state and early messages in Postgres.
func (o Options) sqsReplicaConfig(cell Cell) worker.Config {
	cfg := o.replicaConfig(cell)
	cfg.Provider, cfg.StateStore, cfg.EarlyMessages = worker.ProviderSQS, worker.StateStorePostgres, worker.EarlyMessagesStore
	cfg.DatabaseURL, cfg.MigrateOnStart = "", false
	return cfg
}

// publishSQS sends each group's messages through the SQS FIFO sender (batches of 10), in order,
// shuffled or reversed, keeping at most backlog groups published but not finished.
func publishSQS(ctx context.Context, o Options, l *localSQS, queueURL string, ids []string, cell Cell, seed uint64, finished *sessionsFinished, backlog int) error {
	sender, err := sqsadapter.NewSender(l.client(sidePublisher), queueURL)
	if err != nil {
		return fmt.Errorf("bench: publisher: %w", err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, seed))
	for i, id := range ids {
		if err := finished.waitBacklog(ctx, i, backlog); err != nil {
			return nil // the cell ended
		}
		now := time.Now()
		seqs := sessionSeqs(o.Messages, cell.Arrival, rng)
		msgs := make([]*azservicebus.Message, len(seqs))
		for j, seq := range seqs {
			msgs[j] = benchMessage(id, seq, o.Messages, now)
		}
		if _, err := sender.SendMessages(ctx, msgs); err != nil {
			return ignoreEnded(ctx, fmt.Errorf("bench: publish group %s: %w", id, err))
		}
	}
	return nil
}

// runSQSPlain runs the plain FIFO consumer on the plain queue of l with the cell's input and
// fills in its part of res.
func runSQSPlain(ctx context.Context, o Options, index int, cell Cell, l *localSQS, res *Result) error {
	ids := make([]string, o.Sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-c%02d-p%04d", o.RunID, index, i)
	}
	var finished sessionsFinished
	// As many receive loops as the replicas have sessions at once: the same concurrency.
	p := &PlainSQSConsumer{Client: l.client(sidePlain), QueueURL: l.plainQ, Consumers: cell.Replicas * o.SessionsPerReplica,
		Expect: o.Sessions * o.Messages, PerGroup: o.Messages, GroupDone: finished.add}
	callsBefore := l.counter.calls(sidePlain)
	start := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pubErr := make(chan error, 1)
	go onSide(pctx, "publisher", func(pctx context.Context) {
		pubErr <- publishSQS(pctx, o, l, l.plainQ, ids, cell, uint64(index), &finished, cell.Replicas*o.SessionsPerReplica*2)
	})
	done, err := p.Run(ctx)
	res.PlainElapsed = time.Since(start)
	res.PlainRate = float64(done) / res.PlainElapsed.Seconds()
	res.PlainBrokerCalls = l.counter.calls(sidePlain) - callsBefore
	cancel()
	if perr := <-pubErr; err == nil && perr != nil {
		err = perr
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("bench: plain consumer did not finish within %s: %w", o.CellTimeout, err)
	}
	return err
}

// PlainSQSConsumer is the plain AWS SDK FIFO consumer the worker is measured against:
// Consumers loops of ReceiveMessage (up to 10), a handler that counts, and DeleteMessage per
// message. It restores no order of its own (SQS FIFO hands out a group's messages in the order
// they were sent) and keeps no state.
type PlainSQSConsumer struct {
	Client    *awssqs.Client
	QueueURL  string
	Consumers int
	// Expect is the messages to delete before Run returns; PerGroup the messages of each group,
	// GroupDone (optional) called when a group has them all.
	Expect, PerGroup int
	GroupDone        func()
}

// Run consumes until Expect messages were deleted or ctx ends, and returns how many were.
func (p *PlainSQSConsumer) Run(ctx context.Context) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		deleted atomic.Int64
		mu      sync.Mutex
		groups  = map[string]int{}
		errs    = make(chan error, p.Consumers)
	)
	var wg sync.WaitGroup
	for range max(p.Consumers, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				out, err := p.Client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
					QueueUrl: &p.QueueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					// As AWS advises for FIFO queues: a retry after a lost answer gets that
					// answer's messages instead of leaving them in flight.
					ReceiveRequestAttemptId:     aws.String(cryptorand.Text()),
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
				})
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("bench: plain consumer: receive: %w", err)
						cancel()
					}
					return
				}
				for _, m := range out.Messages {
					if _, err := p.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: &p.QueueURL, ReceiptHandle: m.ReceiptHandle}); err != nil {
						if ctx.Err() == nil {
							errs <- fmt.Errorf("bench: plain consumer: delete: %w", err)
							cancel()
						}
						return
					}
					g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
					mu.Lock()
					groups[g]++
					whole := groups[g] == p.PerGroup
					mu.Unlock()
					if whole && p.GroupDone != nil {
						p.GroupDone()
					}
					if deleted.Add(1) >= int64(p.Expect) {
						cancel()
					}
				}
			}
		})
	}
	wg.Wait()
	n := int(deleted.Load())
	select {
	case err := <-errs:
		return n, err
	default:
	}
	if n < p.Expect {
		return n, errors.Join(ctx.Err(), fmt.Errorf("bench: plain consumer deleted %d of %d messages", n, p.Expect))
	}
	return n, nil
}

// Budgets of an SQS run.
const (
	// BudgetInOrderRatio is the least share of the plain consumer's rate the worker keeps when
	// each group's messages arrive in order.
	BudgetInOrderRatio = 0.8
	// BudgetShuffledExtraCalls is the most SQS calls per message a shuffled cell may add to the
	// in-order cell of the same replicas and exception rate.
	BudgetShuffledExtraCalls = 0.3
)

// Budget is one budget checked against a cell.
type Budget struct {
	Cell  Cell
	What  string  // the budget, in words
	Value float64 // what the cell measured
	Limit float64
	Pass  bool
}

func (b Budget) String() string {
	verdict := "pass"
	if !b.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s: %s: %.3f (limit %.3f) %s", b.Cell, b.What, b.Value, b.Limit, verdict)
}

// SQSBudgets checks the SQS budgets against results: in order, the worker's rate at least
// BudgetInOrderRatio of the plain consumer's; shuffled (and reversed), the worker's SQS calls
// per message at most the in-order cell's (same replicas and exception rate) plus
// BudgetShuffledExtraCalls. A cell without its in-order counterpart is not checked.
func SQSBudgets(results []Result) []Budget {
	type key struct {
		replicas int
		rate     float64
		early    worker.EarlyMessages
	}
	inOrder := map[key]Result{}
	for _, r := range results {
		if r.Arrival == ArrivalInOrder && r.Err == nil {
			inOrder[key{r.Replicas, r.ExceptionRate, r.Early}] = r
		}
	}
	var out []Budget
	for _, r := range results {
		if r.Err != nil {
			continue
		}
		if r.Arrival == ArrivalInOrder {
			out = append(out, Budget{Cell: r.Cell, What: "worker rate / plain rate", Value: r.Ratio(), Limit: BudgetInOrderRatio, Pass: r.Ratio() >= BudgetInOrderRatio})
			continue
		}
		base, ok := inOrder[key{r.Replicas, r.ExceptionRate, r.Early}]
		if !ok {
			continue
		}
		limit := base.perMessage(base.BrokerCalls) + BudgetShuffledExtraCalls
		v := r.perMessage(r.BrokerCalls)
		out = append(out, Budget{Cell: r.Cell, What: "worker SQS calls per message (in order + 0.3)", Value: v, Limit: limit, Pass: v <= limit})
	}
	return out
}
