package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// Client is a running seqbus worker: it accepts the entity's sessions, restores each one's
// application order and hands the messages to the handler, with a sweeper for the sessions the
// broker will not offer, and optionally an HTTP server for metrics and health. New builds it,
// Start runs it, Stop drains it.
type Client struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics

	// sessions runs the sessions, with the SDK's retries off (see sbadapter, "Lock tenure");
	// mgmt serves probes and session listings, with a few SDK retries so that it reconnects;
	// scan (Service Bus session state only) locks sessions for the sweeper to read their state,
	// on a connection of its own: the SDK negotiates a claim for every session it accepts under
	// one lock per connection, and a sweep's accepts must not queue in front of the runner's.
	sessions, mgmt, scan *azservicebus.Client
	source, mgmtSource   *sbadapter.Source
	pool                 *pgxpool.Pool
	ownPool              bool
	pg                   *postgres.Store
	runner               *sequencer.Runner // OrderingSession
	sweeper              *sweeper
	unordered            *unordered // OrderingNone
	unorderedRecv        *azservicebus.Receiver
	stopSoft, stopHard   context.CancelFunc // OrderingNone
	unorderedDone        chan struct{}
	ops                  ops

	mu       sync.Mutex
	started  bool
	stopping bool
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	done     chan struct{}
}

// New checks cfg and builds a Client. It connects to nothing yet: Start does.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, done: make(chan struct{})}
	if c.reg == nil {
		c.reg = prometheus.NewRegistry()
	}
	ok := false
	defer func() {
		if !ok {
			c.closeConnections()
		}
	}()

	var err error
	if c.sessions, err = newSBClient(cfg, sbadapter.ClientOptions(nil)); err != nil {
		return nil, err
	}
	if c.mgmt, err = newSBClient(cfg, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
		MaxRetries: 2, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second,
	}}); err != nil {
		return nil, err
	}
	if c.source, err = sbadapter.NewSource(c.sessions, sbadapter.Config{Entity: cfg.Entity, Logger: c.log}); err != nil {
		return nil, err
	}
	if c.mgmtSource, err = sbadapter.NewSource(c.mgmt, sbadapter.Config{Entity: cfg.Entity, Logger: c.log}); err != nil {
		return nil, err
	}

	// The store, the handler and the sweeper's way of listing sessions.
	var (
		store  sequencer.StateStore
		h      = cfg.Handler
		lister sessionstate.Lister
	)
	switch {
	case cfg.Ordering == OrderingNone:
		// No state: messages are handled as they come.
	case cfg.StateStore == StateStorePostgres:
		c.pool, c.ownPool = cfg.Pool, cfg.Pool == nil
		if c.ownPool {
			if c.pool, err = pgxpool.New(context.Background(), cfg.DatabaseURL); err != nil {
				return nil, configError("DatabaseURL", err)
			}
		}
		if c.pg, err = postgres.New(c.pool, &postgres.Config{Entity: cfg.Entity.String()}); err != nil {
			return nil, err
		}
		store, lister = c.pg, c.pg
		if cfg.Transactional {
			tx := c.pg.Transactional()
			store = tx
			if cfg.Journal {
				h = tx.Journal()
			}
		}
	default:
		sb := sbstate.New(&sbstate.Config{MaxStateSize: cfg.StateMaxBytes})
		store = sb
		if c.scan, err = newSBClient(cfg, sbadapter.ClientOptions(nil)); err != nil {
			return nil, err
		}
		scanSource, err := sbadapter.NewSource(c.scan, sbadapter.Config{Entity: cfg.Entity, Logger: c.log})
		if err != nil {
			return nil, err
		}
		lister = sessionstate.NewScanLister(sessionstate.ScanConfig{
			IDs: c.mgmtSource.ListSessionsWithState, Source: scanSource, Store: sb,
			Concurrency: 8, // reading a session's state is a few round trips: overlap them
		})
	}

	c.m, err = newMetrics(c.reg, func() float64 { return float64(c.activeSessions()) }, c.brokerCalls)
	if err != nil {
		return nil, err
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	h = handler.Chain(h, append([]handler.Middleware{
		tracingMiddleware(tp, cfg.Entity.String()),
		c.m.handlerMiddleware,
		handler.WithRecover(c.log),
		handler.WithTimeout(cfg.HandlerTimeout),
	}, cfg.Middleware...)...)
	if cfg.Ordering == OrderingNone {
		if cfg.Entity.Queue != "" {
			c.unorderedRecv, err = c.mgmt.NewReceiverForQueue(cfg.Entity.Queue, nil)
		} else {
			c.unorderedRecv, err = c.mgmt.NewReceiverForSubscription(cfg.Entity.Topic, cfg.Entity.Subscription, nil)
		}
		if err != nil {
			return nil, configError("Entity", err)
		}
		engine := cfg.Engine.WithDefaults()
		c.unordered = &unordered{
			h: h, slots: cfg.MaxConcurrentSessions, retry: engine.Retry, poison: engine.Poison,
			obs: c.m, log: c.log, renewal: 10 * time.Second, recv: c.unorderedRecv,
		}
		c.ops = ops{reg: c.reg, interval: cfg.ReadyInterval, check: c.checkReady, readyGauge: c.m.ready, log: c.log}
		ok = true
		return c, nil
	}
	c.runner, err = sequencer.NewRunner(sequencer.RunnerConfig{
		Source:                c.source,
		Store:                 instrument(store, c.m),
		Handler:               h,
		Engine:                cfg.Engine,
		MaxConcurrentSessions: cfg.MaxConcurrentSessions,
		Logger:                c.log,
		Observer:              c.m,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	engine := c.runner.Engine().Config()
	c.sweeper = &sweeper{
		lister:     lister,
		wake:       c.runner.Wake,
		interval:   cfg.SweepInterval,
		gapTimeout: engine.GapTimeout,
		gapActs:    gapPolicyActs(engine),
		now:        time.Now,
		m:          c.m,
		log:        c.log,
		warned:     map[string]gapWarned{},
	}
	if c.pg != nil && engine.TombstoneTTL > 0 {
		ttl := engine.TombstoneTTL
		c.sweeper.before = func(ctx context.Context) {
			// The engine deletes an expired tombstone only when its session runs again; without
			// this purge the table would grow with every session ever ended.
			n, err := c.pg.PurgeTombstones(ctx, c.pg.Entity(), time.Now().Add(-ttl))
			switch {
			case err != nil && ctx.Err() == nil:
				c.log.WarnContext(ctx, "worker: purging expired tombstones", slog.Any("error", err))
			case n > 0:
				c.log.InfoContext(ctx, "worker: purged expired tombstones", slog.Int64("num_deleted", n))
			}
		}
	}
	c.ops = ops{reg: c.reg, interval: cfg.ReadyInterval, check: c.checkReady, readyGauge: c.m.ready,
		log: c.log}
	ok = true
	return c, nil
}

// probe checks that the entity exists and the credentials may read it, with one management call.
func (c *Client) probe(ctx context.Context) error {
	if c.unorderedRecv != nil {
		if _, err := c.unorderedRecv.PeekMessages(ctx, 1, nil); err != nil {
			return sbadapter.MapError(err)
		}
		return nil
	}
	return c.mgmtSource.Probe(ctx)
}

// checkReady checks the broker and, with Postgres, the database.
func (c *Client) checkReady(ctx context.Context) []string {
	var reasons []string
	if err := c.probe(ctx); err != nil {
		reasons = append(reasons, fmt.Sprintf("service bus: %v", err))
	}
	if c.pool != nil {
		if err := c.pool.Ping(ctx); err != nil {
			reasons = append(reasons, fmt.Sprintf("postgres: %v", err))
		}
	}
	return reasons
}

// newSBClient connects with the connection string or with Entra ID on the namespace.
func newSBClient(cfg Config, opts *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	if cfg.ConnectionString != "" {
		c, err := azservicebus.NewClientFromConnectionString(cfg.ConnectionString, opts)
		if err != nil {
			return nil, configError("ConnectionString", err)
		}
		return c, nil
	}
	cred := cfg.Credential
	if cred == nil {
		var err error
		if cred, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
			return nil, configError("Namespace", fmt.Errorf("Entra ID credential: %w", err))
		}
	}
	c, err := azservicebus.NewClient(cfg.Namespace, cred, opts)
	if err != nil {
		return nil, configError("Namespace", err)
	}
	return c, nil
}

// Start connects, checks and starts the work: the HTTP server (when Config.HTTPAddr is set), the
// database (migrated or checked), a probe of the entity (a wrong name or key fails here instead
// of retrying forever), the runner, the sweeper and the readiness checks. Canceling ctx later
// cancels the work in hand, as StopAndCancel does.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("worker: already started")
	}
	c.started = true
	fail := func(err error) error {
		c.stopping = true // a later Stop has nothing to stop
		c.ops.shutdown(ctx)
		c.closeConnections()
		close(c.done)
		return err
	}

	if err := c.ops.listen(c.cfg.HTTPAddr); err != nil {
		return fail(err)
	}
	if c.pool != nil {
		if err := c.prepareDatabase(ctx); err != nil {
			return fail(err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := c.probe(pctx)
	cancel()
	if err != nil {
		if sbadapter.Classify(err) == sbadapter.ClassFatal {
			field := "Entity"
			if errors.Is(err, sbadapter.ErrUnauthorized) {
				field = "ConnectionString"
				if c.cfg.Namespace != "" {
					field = "Namespace"
				}
			}
			return fail(configError(field, fmt.Errorf("cannot use %s: %w", c.cfg.Entity, err)))
		}
		c.log.WarnContext(ctx, "worker: probing the entity failed; starting anyway, the runner retries", slog.Any("error", err))
	}

	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	if c.unordered != nil {
		if err := c.startUnordered(ctx); err != nil {
			cancelBG()
			return fail(err)
		}
	} else {
		if err := c.runner.Start(ctx); err != nil {
			cancelBG()
			return fail(fmt.Errorf("worker: start runner: %w", err))
		}
		c.bg.Go(func() { c.sweeper.run(bg) })
	}
	c.bgCancel = cancelBG
	c.bg.Go(func() { c.ops.readyLoop(bg) })
	c.log.InfoContext(ctx, "worker: running", slog.String("entity", c.cfg.Entity.String()),
		slog.String("state_store", string(c.cfg.StateStore)), slog.String("http_addr", c.HTTPAddr()))
	return nil
}

// prepareDatabase pings the database and applies the migrations, or checks that they are.
func (c *Client) prepareDatabase(ctx context.Context) error {
	return prepareDatabase(ctx, c.pool, c.cfg.MigrateOnStart, c.log)
}

// prepareDatabase pings pool's database and applies the migrations (migrate), or checks that
// every migration the binary knows is applied.
func prepareDatabase(ctx context.Context, pool *pgxpool.Pool, migrate bool, log *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		return configError("DatabaseURL", fmt.Errorf("cannot reach the database: %w", err))
	}
	m := migrations.New(pool, &migrations.Config{Logger: log})
	if migrate {
		res, err := m.Up(ctx, migrations.UpOptions{})
		if err != nil {
			return configError("MigrateOnStart", err)
		}
		log.InfoContext(ctx, "worker: migrated", slog.Int("num_applied", len(res.Migrations)))
		return nil
	}
	st, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("worker: check the database schema: %w", err)
	}
	for _, s := range st {
		if s.Known && !s.Applied {
			return configError("MigrateOnStart", fmt.Errorf("the database lacks migration %03d_%s: apply the migrations first (`worker migrate up`) or migrate on start", s.Version, s.Name))
		}
	}
	return nil
}

// Stop stops gracefully: no new session is accepted, each session finishes the message in hand,
// saves and is released. When ctx ends first, the work left is canceled and Stop returns ctx's
// error. It then closes the connections; Stopped is closed when everything has stopped.
func (c *Client) Stop(ctx context.Context) error {
	if c.unordered != nil {
		return c.stop(ctx, c.stopUnordered)
	}
	return c.stop(ctx, c.runner.Stop)
}

// StopAndCancel cancels the work in hand (handlers see their ctx canceled; nothing more is
// settled), then stops like Stop.
func (c *Client) StopAndCancel(ctx context.Context) error {
	if c.unordered != nil {
		return c.stop(ctx, func(ctx context.Context) error { c.stopHard(); return c.stopUnordered(ctx) })
	}
	return c.stop(ctx, c.runner.StopAndCancel)
}

// startUnordered starts handling (OrderingNone).
func (c *Client) startUnordered(ctx context.Context) error {
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	soft, stopSoft := context.WithCancel(hard)
	c.stopSoft, c.stopHard = stopSoft, stopHard
	c.unorderedDone = make(chan struct{})
	go func() {
		defer close(c.unorderedDone)
		c.unordered.run(soft, hard)
	}()
	return nil
}

// stopUnordered lets the messages in hand finish (canceling them when ctx ends first).
func (c *Client) stopUnordered(ctx context.Context) error {
	c.stopSoft()
	var err error
	select {
	case <-c.unorderedDone:
	case <-ctx.Done():
		err = fmt.Errorf("worker: stop: %w", ctx.Err())
		c.stopHard()
		<-c.unorderedDone
	}
	c.stopHard()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = c.unorderedRecv.Close(cctx)
	return err
}

func (c *Client) stop(ctx context.Context, stopRunner func(context.Context) error) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	if c.stopping {
		c.mu.Unlock()
		err := stopRunner(ctx) // a second call (a second signal) escalates
		<-c.done
		return err
	}
	c.stopping = true
	c.mu.Unlock()

	if c.bgCancel != nil {
		c.bgCancel()
		c.bg.Wait()
	}
	err := stopRunner(ctx)
	c.ops.shutdown(ctx)
	c.closeConnections()
	st := c.Stats()
	c.log.InfoContext(ctx, "worker: stopped",
		slog.Uint64("sessions", st.Sessions),
		slog.Uint64("handled", st.Handled),
		slog.Uint64("deferred", st.Deferred),
		slog.Uint64("duplicates", st.Duplicates),
		slog.Uint64("invalid", st.Invalid),
		slog.Uint64("dead_lettered", st.DeadLettered),
		slog.Uint64("retries", st.Retries),
		slog.Uint64("parked", st.Parked))
	close(c.done)
	return err
}

// closeConnections closes the Service Bus clients and a pool the Client opened itself.
func (c *Client) closeConnections() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sb := range []*azservicebus.Client{c.sessions, c.mgmt, c.scan} {
		if sb != nil {
			_ = sb.Close(ctx)
		}
	}
	if c.ownPool && c.pool != nil {
		c.pool.Close()
	}
}

// Stopped is closed once the Client has stopped and closed its connections.
func (c *Client) Stopped() <-chan struct{} { return c.done }

// Stats returns the running totals of the runner.
func (c *Client) Stats() sequencer.Stats {
	if c.unordered != nil {
		return c.unordered.stats()
	}
	return c.runner.Stats()
}

// HTTPAddr returns the address the HTTP server listens on ("" when there is none).
func (c *Client) HTTPAddr() string { return c.ops.addr() }

// Registry returns the registry the metrics are in.
func (c *Client) Registry() *prometheus.Registry { return c.reg }

func (c *Client) activeSessions() int { return c.Stats().ActiveSessions }

func (c *Client) brokerCalls() map[string]uint64 { return c.Stats().BrokerCalls }
