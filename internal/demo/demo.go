package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// Options configure a demo run. Zero fields take the defaults in brackets.
type Options struct {
	Sessions   int    // sessions to publish [8]
	Messages   int    // messages per session [50]
	Duplicates int    // extra copies per session [3]
	Replicas   int    // worker replicas, each with its own connection [2]
	Seed       uint64 // shuffle seed [1]
	// Provider is the broker: ProviderServiceBus (the in-process Service Bus emulator, the
	// default) or ProviderSQS (the in-process SQS FIFO, with the Postgres store at DatabaseURL).
	Provider string
	// DatabaseURL is the Postgres database in which an SQS run makes a schema of its own, dropped
	// at the end [DefaultDatabaseURL].
	DatabaseURL string
	// Crash hard-stops replica 0 once a third of the messages are handled (in-flight work is
	// cancelled, nothing more is settled, its connection closes) and starts a replacement.
	Crash bool
	// Timeout bounds the whole run [2m].
	Timeout time.Duration
	// Out receives the log handler's lines when Verbose is set.
	Out     io.Writer
	Verbose bool
	// Logger receives the components' logs [discard].
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Sessions <= 0 {
		o.Sessions = 8
	}
	if o.Messages <= 0 {
		o.Messages = 50
	}
	if o.Duplicates < 0 {
		o.Duplicates = 0
	} else if o.Duplicates == 0 {
		o.Duplicates = 3
	}
	if o.Replicas <= 0 {
		o.Replicas = 2
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Provider == "" {
		o.Provider = ProviderServiceBus
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = DefaultDatabaseURL
	}
	return o
}

// The brokers a demo runs on.
const (
	ProviderServiceBus = "servicebus"
	ProviderSQS        = "sqs"
)

// DefaultDatabaseURL is the database of an SQS run unless Options.DatabaseURL says otherwise.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// backend is the broker a demo runs on: it publishes the plan, configures a replica and counts
// what is left.
type backend interface {
	// publish sends the plan in its order.
	publish(ctx context.Context, plan []Publication) error
	// replica returns a replica's configuration, without handler and logger.
	replica() worker.Config
	// left waits until the queue holds no message, or timeout, and returns how many it holds.
	left(ctx context.Context, timeout time.Duration) int64
	close()
}

// Summary is what a demo run found.
type Summary struct {
	// Provider is the broker the run used (ProviderServiceBus or ProviderSQS).
	Provider  string
	Sessions  int
	Messages  int // distinct messages (sessions × messages)
	Published int // including duplicates
	Handled   uint64
	// Redelivered counts handler calls that repeated a session's previous sequence after a
	// crash (at-least-once delivery); they are in Handled.
	Redelivered uint64
	Crashes     int
	Deferred    uint64
	Held        uint64
	// HeldInStore counts the early messages held in the Postgres store (SQS, which cannot defer).
	HeldInStore uint64
	// Duplicates counts the copies the workers recognised and dropped: every published duplicate
	// copy, plus messages handled before a crash whose completion the crash lost.
	Duplicates uint64
	// LeftAtBroker counts the messages still in the queue when the run ended (must be 0).
	LeftAtBroker int64
	// Violations lists every order violation the checker saw (must be empty).
	Violations []string
	// Incomplete lists sessions not finished when the run ended, with the next expected sequence.
	Incomplete map[string]int64
	Replicas   int
	// PerReplica is how many messages each replica handled.
	PerReplica []uint64
	Elapsed    time.Duration
}

// OK reports whether every message was handled in order, and exactly once unless a crash forced
// a redelivery.
func (s Summary) OK() bool {
	if s.Crashes == 0 && (s.Redelivered > 0 || s.Duplicates != s.copies()) {
		return false
	}
	return len(s.Violations) == 0 && len(s.Incomplete) == 0 && s.Handled-s.Redelivered == uint64(s.Messages) &&
		s.Duplicates >= s.copies() && s.LeftAtBroker == 0
}

// copies is how many duplicate copies were published.
func (s Summary) copies() uint64 { return uint64(max(s.Published-s.Messages, 0)) }

// Print writes the summary for people.
func (s Summary) Print(w io.Writer) {
	on := "the in-process emulator"
	if s.Provider == ProviderSQS {
		on = "the in-process SQS FIFO and Postgres"
	}
	_, _ = fmt.Fprintf(w, "seqbus demo: %d sessions × %d messages on %s, %d replicas\n",
		s.Sessions, s.Messages/max(s.Sessions, 1), on, s.Replicas)
	_, _ = fmt.Fprintf(w, "  published           %d (%d messages + %d duplicate copies, shuffled)\n", s.Published, s.Messages, s.copies())
	_, _ = fmt.Fprintf(w, "  handled             %d of %d %v\n", s.Handled-s.Redelivered, s.Messages, s.PerReplica)
	if s.Crashes > 0 {
		_, _ = fmt.Fprintf(w, "  crashes             %d (replica restarted; %d messages handled again)\n", s.Crashes, s.Redelivered)
	}
	if s.Provider == ProviderSQS {
		_, _ = fmt.Fprintf(w, "  held in the store   %d (held in memory: %d)\n", s.HeldInStore, s.Held)
	} else {
		_, _ = fmt.Fprintf(w, "  deferred            %d (held in memory: %d)\n", s.Deferred, s.Held)
	}
	if extra := int64(s.Duplicates) - int64(s.copies()); extra > 0 && s.Crashes > 0 {
		_, _ = fmt.Fprintf(w, "  duplicates dropped  %d (%d copies + %d messages redelivered after the crash)\n", s.Duplicates, s.copies(), extra)
	} else {
		_, _ = fmt.Fprintf(w, "  duplicates dropped  %d of %d copies\n", s.Duplicates, s.copies())
	}
	_, _ = fmt.Fprintf(w, "  left at the broker  %d\n", s.LeftAtBroker)
	_, _ = fmt.Fprintf(w, "  order violations    %d\n", len(s.Violations))
	_, _ = fmt.Fprintf(w, "  elapsed             %s\n", s.Elapsed.Round(time.Millisecond))
	for i, v := range s.Violations {
		if i == 10 {
			_, _ = fmt.Fprintf(w, "  … %d more violations\n", len(s.Violations)-10)
			break
		}
		_, _ = fmt.Fprintf(w, "  violation: %s\n", v)
	}
	for id, next := range s.Incomplete {
		_, _ = fmt.Fprintf(w, "  incomplete: session %s stopped before sequence %d\n", id, next)
	}
	if s.OK() && s.Crashes > 0 {
		_, _ = fmt.Fprintln(w, "OK: every session was handled in order, despite the crash")
	} else if s.OK() {
		_, _ = fmt.Fprintln(w, "OK: every session was handled exactly once, in order")
	} else {
		_, _ = fmt.Fprintln(w, "FAILED")
	}
}

const queueName = "demo-orders"

// Run starts the broker (and, for SQS, a schema of its own in Postgres), publishes, runs the
// replicas until every session is handled (or the timeout), stops everything and returns the
// summary. The error is about the run itself (the broker did not start, publishing failed, ...);
// order violations are in the summary.
func Run(ctx context.Context, opts Options) (Summary, error) {
	o := opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	sum := Summary{Provider: o.Provider, Sessions: o.Sessions, Messages: o.Sessions * o.Messages, Replicas: o.Replicas}

	var b backend
	var err error
	switch o.Provider {
	case ProviderServiceBus:
		b, err = startServiceBus(ctx, o.Logger)
	case ProviderSQS:
		b, err = startSQS(ctx, o.DatabaseURL, o.Logger)
	default:
		return sum, fmt.Errorf("demo: provider %q is not one of %s, %s", o.Provider, ProviderServiceBus, ProviderSQS)
	}
	if err != nil {
		return sum, err
	}
	defer b.close()
	return run(ctx, o, b, sum, start)
}

// run publishes the plan on b, runs the replicas until every session is handled (or ctx ends)
// and stops them.
func run(ctx context.Context, o Options, b backend, sum Summary, start time.Time) (Summary, error) {
	plan := Plan(o.Sessions, o.Messages, o.Duplicates, o.Seed)
	sum.Published = len(plan)
	if err := b.publish(ctx, plan); err != nil {
		return sum, err
	}

	ids := make([]string, o.Sessions)
	for i := range ids {
		ids[i] = SessionID(i)
	}
	// The replicas run the backend's configuration (startReplica), and so does the replay the
	// checker allows after the crash.
	checker := NewReplayChecker(ids, o.Messages, b.replica().EngineConfig().ReplayWindow())
	var logHandler sequencer.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	if o.Verbose {
		logHandler = handler.NewLog(o.Out)
	}

	replicas := make([]*replica, 0, o.Replicas)
	defer func() {
		stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stopCancel()
		for _, r := range replicas {
			r.stop(stopCtx)
		}
	}()
	for i := range o.Replicas {
		r, err := startReplica(ctx, i, b, checker, logHandler, o.Logger)
		if err != nil {
			return sum, err
		}
		replicas = append(replicas, r)
	}

	if err := waitDone(ctx, o, checker, &replicas, &sum, b, logHandler); err != nil {
		return sum, err
	}
	// Every session is handled; the copies still at the broker are dropped as they come.
	sum.LeftAtBroker = b.left(ctx, 15*time.Second)
	for _, r := range replicas {
		stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		r.stop(stopCtx)
		stopCancel()
		st := r.stats()
		sum.Deferred += st.Deferred
		sum.Held += st.Held
		sum.HeldInStore += st.HeldInStore
		sum.Duplicates += st.Duplicates
		sum.PerReplica = append(sum.PerReplica, r.handled.Load())
	}
	sum.Handled = checker.Handled()
	sum.Redelivered = checker.Redelivered()
	sum.Violations = checker.Violations()
	sum.Incomplete = checker.Incomplete()
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// waitDone waits until every session is handled or ctx ends; with o.Crash it crashes replica 0
// on the way and starts a replacement.
func waitDone(ctx context.Context, o Options, checker *Checker, replicas *[]*replica, sum *Summary, b backend, out sequencer.Handler) error {
	if !o.Crash {
		select {
		case <-checker.Done():
		case <-ctx.Done():
		}
		return nil
	}
	crashAt := uint64(sum.Messages / 3)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-checker.Done():
			return nil
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if sum.Crashes > 0 || checker.Handled() < crashAt {
			continue
		}
		crashCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		(*replicas)[0].crash(crashCtx)
		cancel()
		sum.Crashes++
		o.Logger.WarnContext(ctx, "demo: crashed replica 0; starting a replacement")
		r, err := startReplica(ctx, len(*replicas), b, checker, out, o.Logger)
		if err != nil {
			return err
		}
		*replicas = append(*replicas, r)
	}
}

// serviceBus is the in-process Service Bus emulator with a session-enabled queue.
type serviceBus struct {
	srv *emulator.Server
}

func startServiceBus(ctx context.Context, logger *slog.Logger) (*serviceBus, error) {
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-", Logger: logger.With(slog.String("component", "emulator"))})
	if err != nil {
		return nil, fmt.Errorf("demo: start emulator: %w", err)
	}
	if err := srv.Broker().CreateQueue(queueName, broker.EntityProperties{RequiresSession: true, LockDuration: 30 * time.Second, MaxDeliveryCount: 10}); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("demo: create queue: %w", err)
	}
	return &serviceBus{srv: srv}, nil
}

func (b *serviceBus) close() { _ = b.srv.Close() }

func (b *serviceBus) replica() worker.Config {
	cfg := worker.DefaultConfig()
	cfg.ConnectionString, cfg.Entity = b.srv.ConnectionString(), sbadapter.Entity{Queue: queueName}
	return cfg
}

// left waits until the demo queue holds no message, or timeout, and returns how many it still
// holds.
func (b *serviceBus) left(ctx context.Context, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		info, err := b.srv.Broker().GetQueue(queueName)
		if err != nil {
			return -1
		}
		if n := info.Counts.Active; n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *serviceBus) publish(ctx context.Context, plan []Publication) error {
	client, err := azservicebus.NewClientFromConnectionString(b.srv.ConnectionString(), nil)
	if err != nil {
		return fmt.Errorf("demo: publisher client: %w", err)
	}
	defer client.Close(context.WithoutCancel(ctx))
	sender, err := client.NewSender(queueName, nil)
	if err != nil {
		return fmt.Errorf("demo: sender: %w", err)
	}
	defer sender.Close(context.WithoutCancel(ctx))

	var batch *azservicebus.MessageBatch
	flush := func() error {
		if batch != nil && batch.NumMessages() > 0 {
			if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
				return fmt.Errorf("demo: send batch: %w", err)
			}
		}
		b, err := sender.NewMessageBatch(ctx, nil)
		if err != nil {
			return fmt.Errorf("demo: new batch: %w", err)
		}
		batch = b
		return nil
	}
	if err := flush(); err != nil {
		return err
	}
	for _, p := range plan {
		sid, mid := p.SessionID, p.SessionID+"/"+strconv.FormatInt(p.Sequence, 10)
		m := &azservicebus.Message{
			SessionID:             &sid,
			MessageID:             &mid,
			Body:                  fmt.Appendf(nil, `{"order":%q,"step":%d}`, p.SessionID, p.Sequence),
			ApplicationProperties: map[string]any{contract.SequenceProperty: p.Sequence, contract.LastProperty: p.Last},
		}
		err := batch.AddMessage(m, nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) {
			if err := flush(); err != nil {
				return err
			}
			err = batch.AddMessage(m, nil)
		}
		if err != nil {
			return fmt.Errorf("demo: add message %s: %w", mid, err)
		}
		if batch.NumMessages() >= 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// replica is one in-process worker, built like cmd/worker's.
type replica struct {
	w       *worker.Client
	handled atomic.Uint64
	once    sync.Once
}

func startReplica(ctx context.Context, n int, b backend, checker *Checker, out sequencer.Handler, logger *slog.Logger) (*replica, error) {
	r := &replica{}
	cfg := b.replica()
	cfg.HTTPAddr = worker.HTTPOff
	cfg.Handler = sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
		if err := checker.Handle(ctx, m); err != nil {
			return err
		}
		if err := out.Handle(ctx, m); err != nil {
			return err
		}
		r.handled.Add(1)
		return nil
	})
	// A small reorder window, so that some early messages are deferred at the broker (held in the
	// store on SQS).
	cfg.ReorderWindow, cfg.SessionIdleTimeout = 8, time.Second
	cfg.MaxConcurrentSessions, cfg.SweepInterval = 4, 2*time.Second
	cfg.Logger = logger.With(slog.Int("replica", n))
	w, err := worker.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("demo: replica %d: %w", n, err)
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("demo: replica %d: %w", n, err)
	}
	r.w = w
	return r, nil
}

func (r *replica) stats() sequencer.Stats { return r.w.Stats() }

// crash ends the replica as a killed process would: in-flight work is cancelled and nothing more
// is settled or saved; the connection closes, so the broker releases its session locks.
func (r *replica) crash(ctx context.Context) {
	r.once.Do(func() { _ = r.w.StopAndCancel(ctx) })
}

func (r *replica) stop(ctx context.Context) {
	r.once.Do(func() {
		if err := r.w.Stop(ctx); err != nil {
			_ = r.w.StopAndCancel(ctx)
		}
	})
}
