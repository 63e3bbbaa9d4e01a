package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqbus/seqbus/outbox"
)

// RelayConfig configures a Relay, the transactional outbox's relay run as a service (`worker
// relay`): the messages applications enqueue in Postgres (package outbox) go to Service Bus in
// each session's order.
type RelayConfig struct {
	// ConnectionString, or Namespace with Credential, reach Service Bus (as in Config).
	ConnectionString string
	Namespace        string
	Credential       azcore.TokenCredential
	// DatabaseURL (or Pool, the caller's) is the database holding the outbox.
	DatabaseURL string
	Pool        *pgxpool.Pool
	// MigrateOnStart applies the migrations at Start; otherwise Start refuses a schema that
	// lacks one.
	MigrateOnStart bool
	// Outbox tunes the relay: entities, batch size, concurrency, backoff, the property names
	// the worker reads, retention of ended sessions. Its Pool, Client and Logger are the
	// Relay's own.
	Outbox outbox.RelayConfig
	// HTTPAddr serves /metrics, /healthz and /readyz ("" serves nothing).
	HTTPAddr string
	// ReadyInterval is how often the database is checked (default DefaultReadyInterval).
	ReadyInterval time.Duration
	// Registry receives the relay's metrics (default: a registry of its own).
	Registry *prometheus.Registry
	// Logger receives the relay's logs (default: discard).
	Logger *slog.Logger
}

// Relay runs an outbox relay with its metrics and health endpoints.
type Relay struct {
	cfg     RelayConfig
	log     *slog.Logger
	client  *azservicebus.Client
	pool    *pgxpool.Pool
	ownPool bool
	relay   *outbox.Relay
	ops     ops

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	bg      sync.WaitGroup
	runErr  error
	runDone chan struct{}
	done    chan struct{}
}

// NewRelay checks cfg and builds a Relay; it connects to nothing yet.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyInterval == 0 {
		cfg.ReadyInterval = DefaultReadyInterval
	}
	var errs []error
	switch {
	case cfg.ConnectionString == "" && cfg.Namespace == "":
		errs = append(errs, configError("ConnectionString", errors.New("set it or Namespace")))
	case cfg.ConnectionString != "" && cfg.Namespace != "":
		errs = append(errs, configError("Namespace", errors.New("set either ConnectionString or Namespace, not both")))
	}
	if (cfg.DatabaseURL == "") == (cfg.Pool == nil) {
		errs = append(errs, configError("DatabaseURL", errors.New("set exactly one of DatabaseURL and Pool")))
	}
	if cfg.ReadyInterval < 0 {
		errs = append(errs, configError("ReadyInterval", errors.New("must not be negative")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	r := &Relay{cfg: cfg, log: cfg.Logger, pool: cfg.Pool, ownPool: cfg.Pool == nil, done: make(chan struct{}), runDone: make(chan struct{})}
	var err error
	if r.client, err = newSBClient(Config{ConnectionString: cfg.ConnectionString, Namespace: cfg.Namespace, Credential: cfg.Credential}, nil); err != nil {
		return nil, err
	}
	if r.ownPool {
		if r.pool, err = pgxpool.New(context.Background(), cfg.DatabaseURL); err != nil {
			r.close()
			return nil, configError("DatabaseURL", err)
		}
	}
	ocfg := cfg.Outbox
	ocfg.Pool, ocfg.Client, ocfg.Logger = r.pool, r.client, r.log
	if r.relay, err = outbox.NewRelay(&ocfg); err != nil {
		r.close()
		return nil, configError("Outbox", err)
	}

	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
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

// Start checks the database (migrating it with MigrateOnStart), starts the HTTP server and the
// relay, and returns.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("worker: relay already started")
	}
	r.started = true
	fail := func(err error) error {
		r.ops.shutdown(ctx)
		r.close()
		close(r.done)
		return err
	}
	if err := r.ops.listen(r.cfg.HTTPAddr); err != nil {
		return fail(err)
	}
	if err := prepareDatabase(ctx, r.pool, r.cfg.MigrateOnStart, r.log); err != nil {
		return fail(err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.bg.Go(func() { r.ops.readyLoop(bg) })
	r.bg.Go(func() {
		defer close(r.runDone)
		if err := r.relay.Run(bg); err != nil {
			r.log.ErrorContext(bg, "worker: relay stopped", slog.Any("error", err))
			r.mu.Lock()
			r.runErr = err
			r.mu.Unlock()
		}
	})
	r.log.InfoContext(ctx, "worker: relay running", slog.String("http_addr", r.ops.addr()))
	return nil
}

// Stop stops the relay: the sends in flight finish (or ctx ends), then the connections close.
// It returns the relay's own failure, if it stopped on one.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started || r.cancel == nil {
		r.mu.Unlock()
		return nil
	}
	cancel := r.cancel
	r.cancel = nil
	r.mu.Unlock()
	cancel()
	waited := make(chan struct{})
	go func() { r.bg.Wait(); close(waited) }()
	var err error
	select {
	case <-waited:
	case <-ctx.Done():
		err = fmt.Errorf("worker: relay stop: %w", ctx.Err())
	}
	r.ops.shutdown(ctx)
	r.close()
	st := r.relay.Stats()
	r.log.InfoContext(ctx, "worker: relay stopped", slog.Int64("sent", st.Sent), slog.Int64("failures", st.Failures))
	close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(err, r.runErr)
}

func (r *Relay) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.client != nil {
		_ = r.client.Close(ctx)
	}
	if r.ownPool && r.pool != nil {
		r.pool.Close()
	}
}

// Done is closed when the relay stopped relaying: after Stop, or on its own after a failure it
// cannot retry (the outbox tables are missing), which Stop then returns.
func (r *Relay) Done() <-chan struct{} { return r.runDone }

// Stopped is closed once the Relay has stopped.
func (r *Relay) Stopped() <-chan struct{} { return r.done }

// Stats returns the relay's counters.
func (r *Relay) Stats() outbox.RelayStats { return r.relay.Stats() }

// HTTPAddr returns the address the HTTP server listens on ("" when there is none).
func (r *Relay) HTTPAddr() string { return r.ops.addr() }
