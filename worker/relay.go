package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/outbox"
)

// RelayConfig configures a Relay, the transactional outbox's relay run as a service (`worker
// relay`): the messages applications enqueue in Postgres (package outbox) go to Service Bus, or
// with ProviderSQS to SQS FIFO queues, in each session's order. Its settings follow Config's
// rules: DefaultRelayConfig holds the defaults, FromEnv reads the variables of the envconfig
// tags, 0 is zero (RelayEndedRetention 0 keeps ended sessions forever).
type RelayConfig struct {
	// Provider is where the relay sends: ProviderServiceBus (the default; the outbox's entities
	// are queues and topics of ServiceBus's namespace) or ProviderSQS (each entity is the name
	// of an SQS FIFO queue, found with GetQueueUrl; a session goes out as a message group).
	Provider Provider `envconfig:"PROVIDER" desc:"Where the relay sends: servicebus (the outbox's entities are queues and topics of the namespace) or sqs (each entity is the name of an SQS FIFO queue; region and credentials from the standard AWS chain)."`
	ServiceBus
	// SQSClient is the SQS client of ProviderSQS to use instead of one built from the standard
	// AWS chain; the caller owns it.
	SQSClient *sqs.Client `ignored:"true" desc:"An SQS client to use instead of one built from the standard AWS chain (tests, a local SQS)."`
	// Database holds the outbox (required).
	Database
	// SequenceProperty and LastProperty name the application properties the worker reads.
	SequenceProperty string `envconfig:"SEQUENCE_PROPERTY" desc:"Application property the relay sets to each message's sequence number (the worker's sequence property)."`
	LastProperty     string `envconfig:"LAST_PROPERTY" desc:"Application property the relay sets on a session's last message (the worker's last property)."`

	// Entities restricts the relay to these queues and topics (comma-separated in the
	// environment; default: every entity in the outbox).
	Entities []string `envconfig:"RELAY_ENTITIES" desc:"Queues and topics to relay, comma-separated (empty: every entity in the outbox)."`
	// BatchSize is the most messages of one session claimed and sent at once; Concurrency how
	// many sessions are sent at once; PollInterval how often the relay looks for work when no
	// notification comes.
	BatchSize    int           `envconfig:"RELAY_BATCH_SIZE" desc:"Most messages of one session claimed and sent at once."`
	Concurrency  int           `envconfig:"RELAY_CONCURRENCY" desc:"Sessions sent at once."`
	PollInterval time.Duration `envconfig:"RELAY_POLL_INTERVAL" desc:"How often the relay looks for work when no notification comes (LISTEN/NOTIFY)."`
	// MinBackoff and MaxBackoff bound the pause of a session after a failed send (doubling,
	// equal jitter).
	MinBackoff time.Duration `envconfig:"RELAY_MIN_BACKOFF" desc:"Pause of a session after a failed send, doubling with jitter."`
	MaxBackoff time.Duration `envconfig:"RELAY_MAX_BACKOFF" desc:"Longest pause of a session after failed sends."`
	// SendTimeout bounds one session's send.
	SendTimeout time.Duration `envconfig:"RELAY_SEND_TIMEOUT" desc:"Bound on one session's send."`
	// EndedRetention is how long an ended session is remembered (0: forever); PurgeInterval how
	// often the relay forgets those past it.
	EndedRetention time.Duration `envconfig:"RELAY_ENDED_RETENTION" desc:"How long an ended session is remembered, refusing new messages (0: forever)."`
	PurgeInterval  time.Duration `envconfig:"RELAY_PURGE_INTERVAL" desc:"How often ended sessions past their retention are forgotten."`

	Service
}

// DefaultRelayConfig returns the defaults of every relay setting: what an empty environment
// gives.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{
		Provider:         ProviderServiceBus,
		SequenceProperty: contract.SequenceProperty,
		LastProperty:     contract.LastProperty,
		BatchSize:        outbox.DefaultBatchSize,
		Concurrency:      outbox.DefaultConcurrency,
		PollInterval:     outbox.DefaultPollInterval,
		MinBackoff:       outbox.DefaultMinBackoff,
		MaxBackoff:       outbox.DefaultMaxBackoff,
		SendTimeout:      outbox.DefaultSendTimeout,
		EndedRetention:   outbox.DefaultEndedRetention,
		PurgeInterval:    outbox.DefaultPurgeInterval,
		Service:          defaultService(),
	}
}

// Validate checks c and reports every problem at once, each a *ConfigError naming its field
// and variable. NewRelay calls it.
func (c *RelayConfig) Validate() error {
	var p problems[RelayConfig]
	oneOf(&p, "Provider", c.Provider, ProviderServiceBus, ProviderSQS)
	switch c.Provider {
	case ProviderServiceBus:
		checkServiceBus(&p, c.ServiceBus)
	case ProviderSQS:
		for _, f := range []struct {
			field string
			set   bool
		}{{"ConnectionString", c.ConnectionString != ""}, {"Namespace", c.Namespace != ""}, {"Credential", c.Credential != nil}} {
			if f.set {
				p.add(f.field, "is a Service Bus setting, refused with %s=%s", p.v("Provider"), ProviderSQS)
			}
		}
	}
	checkDatabase(&p, c.Database, "required: the outbox lives in Postgres")
	checkContract(&p, c.SequenceProperty, c.LastProperty)
	for _, e := range c.Entities {
		if strings.TrimSpace(e) == "" {
			p.add("Entities", "has an empty entity name")
		}
	}
	p.positive("BatchSize", int64(c.BatchSize), c.BatchSize)
	p.positive("Concurrency", int64(c.Concurrency), c.Concurrency)
	p.positive("PollInterval", int64(c.PollInterval), c.PollInterval)
	p.positive("MinBackoff", int64(c.MinBackoff), c.MinBackoff)
	if c.MaxBackoff < c.MinBackoff {
		p.add("MaxBackoff", "must be at least %s (%s), got %s", p.v("MinBackoff"), c.MinBackoff, c.MaxBackoff)
	}
	p.positive("SendTimeout", int64(c.SendTimeout), c.SendTimeout)
	if c.EndedRetention < 0 {
		p.add("EndedRetention", "must not be negative (0 keeps ended sessions forever), got %s", c.EndedRetention)
	}
	p.positive("PurgeInterval", int64(c.PurgeInterval), c.PurgeInterval)
	checkService(&p, c.Service)
	return p.err()
}

// LogValue renders c for logs, its secrets redacted.
func (c RelayConfig) LogValue() slog.Value { return SettingsLogValue(c) }

// String renders c with its secrets redacted.
func (c RelayConfig) String() string { return c.LogValue().String() }

// Relay runs an outbox relay with its metrics and health endpoints.
type Relay struct {
	cfg    RelayConfig
	log    *slog.Logger
	client *azservicebus.Client // nil with ProviderSQS
	pool   *pgxpool.Pool
	own    bool
	relay  *outbox.Relay
	host   *base
	ready  service
	ops    ops

	mu       sync.Mutex
	started  bool
	stopping bool
	done     chan struct{}
}

// NewRelay checks cfg and builds a Relay; it connects to nothing yet.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Service = cfg.Service.withDefaults()
	r := &Relay{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	var newSender func(context.Context, string) (outbox.Sender, error)
	switch cfg.Provider {
	case ProviderSQS:
		client, err := newSQSClient(context.Background(), SQS{SQSClient: cfg.SQSClient})
		if err != nil {
			return nil, err
		}
		newSender = sqsSenders(client)
	default:
		var err error
		if r.client, err = newServiceBusClient(cfg.ServiceBus, &azservicebus.ClientOptions{RetryOptions: managementRetries}); err != nil {
			return nil, err
		}
	}
	var err error
	if r.pool, r.own, err = openPool(context.Background(), cfg.Database); err != nil {
		r.close()
		return nil, err
	}
	ocfg := outbox.RelayConfig{
		Pool: r.pool, Client: r.client, NewSender: newSender, Logger: r.log, Clock: cfg.Clock,
		Entities: cfg.Entities, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency,
		PollInterval: cfg.PollInterval, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff,
		SendTimeout: cfg.SendTimeout, SequenceProperty: cfg.SequenceProperty, LastProperty: cfg.LastProperty,
		EndedRetention: cfg.EndedRetention, PurgeInterval: cfg.PurgeInterval,
	}
	if cfg.EndedRetention == 0 {
		ocfg.EndedRetention = outbox.NoPurge
	}
	if r.relay, err = outbox.NewRelay(&ocfg); err != nil {
		r.close()
		return nil, fmt.Errorf("worker: relay: %w", err)
	}
	r.host = newBase("worker: relay", r.log, func(soft, _ context.Context) error { return r.relay.Run(soft) })

	reg := cfg.Registry
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "seqbus_ready", Help: "1 when the last readiness check reached the database, 0 otherwise."})
	stat := func(f func(outbox.RelayStats) int64) func() float64 {
		return func() float64 { return float64(f(r.relay.Stats())) }
	}
	for _, c := range []prometheus.Collector{
		ready,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqbus_relay_sent_total",
			Help: "Messages the broker accepted from this relay (a message sent again after a crash counts again; duplicate detection absorbs it)."},
			stat(func(s outbox.RelayStats) int64 { return s.Sent })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqbus_relay_batches_total", Help: "Successful sends of a session's claimed messages."},
			stat(func(s outbox.RelayStats) int64 { return s.Batches })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqbus_relay_failures_total", Help: "Failed sends; each paused its session, which is retried with backoff."},
			stat(func(s outbox.RelayStats) int64 { return s.Failures })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqbus_relay_purged_total", Help: "Ended sessions the purge forgot after their retention."},
			stat(func(s outbox.RelayStats) int64 { return s.Purged })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seqbus_relay_paused_sessions", Help: "Sessions paused after a failed send (by any relay), at this relay's last scan."},
			stat(func(s outbox.RelayStats) int64 { return s.PausedSessions })),
	} {
		if err := reg.Register(c); err != nil {
			r.close()
			return nil, fmt.Errorf("worker: registering relay metrics: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			r.close()
			return nil, fmt.Errorf("worker: registering relay metrics: %w", err)
		}
	}
	r.ops = ops{reg: reg, interval: cfg.ReadyInterval, readyGauge: ready, log: r.log, check: func(ctx context.Context) []string {
		if err := r.pool.Ping(ctx); err != nil {
			return []string{fmt.Sprintf("postgres: %v", err)}
		}
		return nil
	}}
	return r, nil
}

// Start checks the database (migrating it with MigrateOnStart), starts the HTTP server, the
// readiness checks and the relay, and returns.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("worker: relay already started")
	}
	r.started = true
	ready := r.ops.service(r.cfg.Clock)
	fail := func(err error) error {
		r.stopping = true
		_ = stopAll(ctx, true, ready, r.host)
		r.ops.shutdown(ctx)
		r.close()
		close(r.done)
		return err
	}
	if err := r.ops.listen(r.cfg.httpAddr()); err != nil {
		return fail(err)
	}
	if err := prepareDatabase(ctx, r.pool, r.cfg.Database, r.log); err != nil {
		return fail(err)
	}
	for _, s := range []service{ready, r.host} {
		if err := s.Start(ctx); err != nil {
			return fail(err)
		}
	}
	r.ready = ready
	r.log.InfoContext(ctx, "worker: relay running", slog.String("http_addr", r.ops.addr()))
	return nil
}

// Stop stops the relay: the sends in flight finish within SoftStopTimeout (or ctx), then the
// connections close. It returns the relay's own failure, if it stopped on one.
func (r *Relay) Stop(ctx context.Context) error { return r.stop(ctx, false) }

// StopAndCancel cancels the sends in flight, then stops like Stop.
func (r *Relay) StopAndCancel(ctx context.Context) error { return r.stop(ctx, true) }

func (r *Relay) stop(ctx context.Context, cancel bool) error {
	r.mu.Lock()
	if !r.started || r.stopping {
		r.mu.Unlock()
		if r.started {
			_ = r.host.StopAndCancel(ctx) // a second call escalates
			<-r.done
		}
		return nil
	}
	r.stopping = true
	r.mu.Unlock()
	errs := []error{stopAll(ctx, true, r.ready)}
	if cancel {
		errs = append(errs, r.host.StopAndCancel(ctx))
	} else {
		errs = append(errs, softStop(ctx, r.host, r.cfg.Clock, r.cfg.SoftStopTimeout, r.log))
	}
	r.ops.shutdown(ctx)
	r.close()
	st := r.relay.Stats()
	r.log.InfoContext(ctx, "worker: relay stopped", slog.Int64("sent", st.Sent), slog.Int64("failures", st.Failures))
	close(r.done)
	return errors.Join(append(errs, r.host.Err())...)
}

func (r *Relay) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.client != nil {
		_ = r.client.Close(ctx)
	}
	if r.own && r.pool != nil {
		r.pool.Close()
	}
}

// Done is closed when the relay stopped relaying: after Stop, or on its own after a failure it
// cannot retry (the outbox tables are missing), which Stop then returns.
func (r *Relay) Done() <-chan struct{} { return r.host.Stopped() }

// Stopped is closed once the Relay has stopped.
func (r *Relay) Stopped() <-chan struct{} { return r.done }

// Stats returns the relay's counters.
func (r *Relay) Stats() outbox.RelayStats { return r.relay.Stats() }

// HTTPAddr returns the address the HTTP server listens on ("" when there is none).
func (r *Relay) HTTPAddr() string { return r.ops.addr() }
