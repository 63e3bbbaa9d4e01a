package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// Client is a running seqbus worker: it accepts the entity's sessions, restores each one's
// application order and hands the messages to the handler, with a sweeper for the sessions the
// broker will not offer, and optionally an HTTP server for metrics and health. New builds it,
// Start runs it, Stop drains it.
type Client struct {
	cfg  Config
	log  *slog.Logger
	reg  *prometheus.Registry
	m    *metrics
	conn *Connections

	// main handles the messages: the runner (OrderingSession) or the unordered consumer;
	// background are the loops beside it (sweeper, tombstone purge, readiness).
	main          service
	background    []service
	runner        *sequencer.Runner
	unordered     *unordered
	unorderedRecv *azservicebus.Receiver
	ops           ops

	mu       sync.Mutex
	started  bool
	stopping bool
	done     chan struct{}
	stopErr  error
}

// New checks cfg (every problem at once, each a *ConfigError naming the field and its
// variable) and builds a Client. It connects to nothing yet: Start does.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok && c.conn != nil {
			c.conn.Close(context.Background())
		}
	}()
	var err error
	if c.conn, err = Connect(context.Background(), cfg); err != nil {
		return nil, err
	}

	store, h := c.conn.Store, cfg.Handler
	if cfg.Transactional {
		tx := c.conn.Postgres.Transactional()
		store = tx
		if cfg.Journal {
			h = tx.Journal()
		}
	}
	c.m, err = newMetrics(c.reg, func() float64 { return float64(c.activeSessions()) }, c.brokerCalls,
		func() float64 { return float64(c.Stats().SettlementsRefused) })
	if err != nil {
		return nil, err
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	h = handler.Chain(h, append([]handler.Middleware{
		tracingMiddleware(tp, cfg.EntityName()),
		c.m.handlerMiddleware,
		handler.WithRecover(c.log), // the worker's one panic recovery, for either ordering
		handler.WithTimeout(cfg.HandlerTimeout),
	}, cfg.Middleware...)...)
	c.ops = ops{reg: c.reg, interval: cfg.ReadyInterval, check: c.checkReady, readyGauge: c.m.ready, log: c.log}
	c.background = []service{c.ops.service(cfg.Clock)}

	if cfg.Ordering == OrderingNone {
		if cfg.Entity.Queue != "" {
			c.unorderedRecv, err = c.conn.Management.NewReceiverForQueue(cfg.Entity.Queue, nil)
		} else {
			c.unorderedRecv, err = c.conn.Management.NewReceiverForSubscription(cfg.Entity.Topic, cfg.Entity.Subscription, nil)
		}
		if err != nil {
			return nil, configError("Entity", err)
		}
		c.unordered = &unordered{
			h: h, slots: cfg.MaxConcurrentSessions, attempts: cfg.MaxHandlerAttempts,
			retry:  backoff.Policy{Base: cfg.RetryBase, Max: cfg.RetryMax},
			poison: cfg.PoisonPolicy, obs: c.m, log: c.log, clock: cfg.Clock, renewal: 10 * time.Second, recv: c.unorderedRecv,
		}
		c.main = newBase("worker: unordered consumer", c.log, c.unordered.run)
		ok = true
		return c, nil
	}
	calls := func(op string, n int) { c.m.sweepCalls.WithLabelValues(op).Add(float64(n)) }
	// With Service Bus session state, the runner's saves are reported to the sweeper, which then
	// need not read the sessions they leave needing nothing.
	var rep *reporter
	var saved func(id string, st *sequencer.State, err error)
	if c.conn.Postgres == nil {
		rep = &reporter{
			source: countingSource{SessionSource: c.conn.ScanSource, calls: func(op string, n int) { calls("report_"+op, n) }},
			id:     reportSessionID(), window: 2 * cfg.SweepInterval, maxState: int(cfg.StateMaxBytes),
			clock: cfg.Clock, log: c.log, saves: map[string]reporterSave{},
		}
		saved = rep.saved
	}
	c.runner, err = sequencer.NewRunner(sequencer.RunnerConfig{
		Source:                c.conn.SessionSource(),
		Store:                 instrument(store, c.m, saved),
		Handler:               h,
		Engine:                cfg.engine(),
		MaxConcurrentSessions: cfg.MaxConcurrentSessions,
		Logger:                c.log,
		Observer:              c.m,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	c.main = c.runner
	engine := c.runner.Engine().Config()
	sw := &sweeper{
		wake:       c.runner.Wake,
		interval:   cfg.SweepInterval,
		gapTimeout: engine.GapTimeout,
		gapActs:    gapPolicyActs(engine),
		clock:      cfg.Clock,
		m:          c.m,
		log:        c.log,
		warned:     map[string]gapWarned{},
	}
	if c.conn.Postgres != nil {
		sw.attention = listerAttention{lister: c.conn.Lister}
		sw.held = c.conn.Postgres
		sw.lease = &advisoryLease{pool: c.conn.Pool, entity: cfg.EntityName()}
	} else {
		src := countingSource{SessionSource: c.conn.ScanSource, calls: calls}
		l := &sessionLease{source: src, maxState: int(cfg.StateMaxBytes)}
		w := sessionstate.NewWatch(sessionstate.WatchConfig{
			ChangedIDs: c.conn.ManagementSource.ListSessionsWithStateAfter,
			Source:     src, Store: c.conn.Store, Concurrency: scanConcurrency,
			// What a release report calls dirty (sessionstate.NeedsSweeper), stranded tombstones
			// included.
			Filter:       sessionstate.Attention,
			TombstoneTTL: cfg.TombstoneTTL, // 0: the engine keeps no tombstone
			ReadReport:   readReport, ClearReport: clearReport,
		})
		sw.attention, sw.lease = &watchAttention{watch: w, lease: l, calls: calls, log: c.log}, l
	}
	if c.conn.Postgres != nil && cfg.TombstoneTTL > 0 {
		sw.before = purge(c.conn.Postgres, cfg.TombstoneTTL, cfg.Clock, c.log)
	}
	// The scaling signal: evaluated here while this replica holds the sweeper lease.
	var held atomic.Bool
	sw.lease = heldLease{lease: sw.lease, held: &held}
	c.background = append(c.background, sw.service())
	if rep != nil {
		c.background = append(c.background, rep.service(cfg.SweepInterval))
	}
	scale, err := newScaleSignal(cfg, c.conn, c.reg, held.Load)
	if err != nil {
		return nil, err
	}
	c.background = append(c.background, scale.service())
	c.ops.scale = scale.serveHTTP
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
	if c.conn.SQS != nil {
		return probeSQS(ctx, c.conn.SQS, c.cfg.SQSQueueURL)
	}
	return c.conn.ManagementSource.Probe(ctx)
}

// readyRetry spaces the tries of one readiness probe.
var readyRetry = backoff.Policy{Base: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2}

// probeReady probes the broker for readiness, trying again within ctx (one check) while the
// broker cannot be reached, so that a connection the SDK recovers on the next call does not
// fail the check. Its tries are single calls: a broker that refuses one as too busy has
// answered, and that answer is the result at once, not an SDK retry that the check's deadline
// cuts short. A fatal answer (credentials refused, entity gone) is the result at once too.
func (c *Client) probeReady(ctx context.Context) error {
	if c.conn.SQS != nil {
		return c.probe(ctx) // the SDK retries what it can
	}
	for attempt := 1; ; attempt++ {
		var err error
		if c.unorderedRecv != nil {
			err = c.probe(ctx)
		} else {
			err = c.conn.Source.Probe(ctx) // the client with the SDK's retries off
		}
		if err == nil || sbadapter.IsServerBusy(err) || sbadapter.Classify(err) == sbadapter.ClassFatal {
			return err
		}
		if clock.Sleep(ctx, c.cfg.Clock, readyRetry.Delay(attempt)) != nil {
			return err
		}
	}
}

// checkReady checks the broker and, with Postgres, the database. A broker that refuses the probe
// as too busy (throttled) answered: it is reachable, and the worker's own calls wait and retry,
// so that is no reason to take the replica out of service. Anything else that fails the probe
// (connection refused, name not resolved, credentials refused, entity gone) is.
func (c *Client) checkReady(ctx context.Context) []string {
	var reasons []string
	if err := c.probeReady(ctx); err != nil {
		switch {
		case c.conn.SQS != nil:
			reasons = append(reasons, fmt.Sprintf("sqs: %v", err))
		case sbadapter.IsServerBusy(err):
			c.log.DebugContext(ctx, "worker: readiness probe throttled; the broker answered", slog.Any("error", err))
		default:
			reasons = append(reasons, fmt.Sprintf("service bus: %v", err))
		}
	}
	if c.conn.Pool != nil {
		if err := c.conn.Pool.Ping(ctx); err != nil {
			reasons = append(reasons, fmt.Sprintf("postgres: %v", err))
		}
	}
	return reasons
}

// Start connects, checks and starts the work: the HTTP server (unless Config.HTTPAddr is
// HTTPOff), the database (migrated or checked), a probe of the entity (a wrong name or key fails
// here instead of retrying forever), the runner (or the unordered consumer), the sweeper, the
// tombstone purge and the readiness checks. Canceling ctx later cancels the work in hand, as
// StopAndCancel does.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("worker: already started")
	}
	c.started = true
	fail := func(err error) error {
		c.stopping = true // a later Stop has nothing to stop
		_ = stopAll(ctx, true, c.background...)
		c.ops.shutdown(ctx)
		c.conn.Close(ctx)
		c.stopErr = err
		close(c.done)
		return err
	}

	if err := c.ops.listen(c.cfg.httpAddr()); err != nil {
		return fail(err)
	}
	if c.conn.Pool != nil {
		if err := prepareDatabase(ctx, c.conn.Pool, c.cfg.Database, c.log); err != nil {
			return fail(err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := c.probe(pctx)
	cancel()
	switch {
	case err != nil && c.conn.SQS != nil && sqsFatal(err):
		return fail(configError("SQSQueueURL", fmt.Errorf("cannot use %s: %w", c.cfg.SQSQueueURL, err)))
	case err != nil && c.conn.SQS != nil:
		c.log.WarnContext(ctx, "worker: probing the queue failed; starting anyway, the runner retries", slog.Any("error", err))
	case err != nil:
		if sbadapter.Classify(err) == sbadapter.ClassFatal {
			field := "Entity.Subscription"
			if c.cfg.Entity.Queue != "" {
				field = "Entity.Queue"
			}
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
	if err := c.checkPartitioning(ctx); err != nil {
		return fail(err)
	}

	if err := c.main.Start(ctx); err != nil {
		return fail(fmt.Errorf("worker: start: %w", err))
	}
	for _, s := range c.background {
		if err := s.Start(ctx); err != nil {
			_ = c.main.StopAndCancel(ctx)
			return fail(fmt.Errorf("worker: start: %w", err))
		}
	}
	c.log.InfoContext(ctx, "worker: running", slog.String("provider", string(c.cfg.Provider)), slog.String("entity", c.cfg.EntityName()),
		slog.String("state_store", string(c.cfg.StateStore)), slog.String("http_addr", c.HTTPAddr()))
	return nil
}

// prepareDatabase pings pool's database and applies the migrations (db.MigrateOnStart), or
// checks that every migration the binary knows is applied.
func prepareDatabase(ctx context.Context, pool *pgxpool.Pool, db Database, log *slog.Logger) error {
	if err := (&Connections{Pool: pool}).Ping(ctx); err != nil {
		return err
	}
	m := migrations.New(pool, &migrations.Config{Logger: log})
	if db.MigrateOnStart {
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
// saves and is released. The work still in hand after Config.SoftStopTimeout is canceled, and
// Stop then reports ErrSoftStopTimeout; when ctx ends first, Stop cancels the work left and
// returns ctx's error. A StopAndCancel meanwhile (a second signal) cancels at once and is no
// failure. Stop then closes the connections; Stopped is closed when everything has stopped.
func (c *Client) Stop(ctx context.Context) error { return c.stop(ctx, false) }

// StopAndCancel cancels the work in hand (handlers see their ctx canceled; nothing more is
// settled), then stops like Stop.
func (c *Client) StopAndCancel(ctx context.Context) error { return c.stop(ctx, true) }

func (c *Client) stop(ctx context.Context, cancel bool) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	if c.stopping {
		c.mu.Unlock()
		_ = c.main.StopAndCancel(ctx) // a second call (a second signal) escalates
		select {
		case <-c.done:
		case <-ctx.Done():
			return fmt.Errorf("worker: stop: %w", ctx.Err())
		}
		return nil
	}
	c.stopping = true
	c.mu.Unlock()

	errs := []error{stopAll(ctx, true, c.background...)}
	if cancel {
		errs = append(errs, c.main.StopAndCancel(ctx))
	} else {
		errs = append(errs, softStop(ctx, c.main, c.cfg.Clock, c.cfg.SoftStopTimeout, c.log))
	}
	c.ops.shutdown(ctx)
	c.conn.Close(ctx)
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
	err := errors.Join(errs...)
	c.mu.Lock()
	c.stopErr = err
	c.mu.Unlock()
	close(c.done)
	return err
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

// LimiterStats returns what the limiter of the sessions' broker calls did so far (sbadapter.Limiter):
// how the worker paced itself against a throttled namespace.
// With ProviderSQS there is no such limiter: it returns zero.
func (c *Client) LimiterStats() sbadapter.LimiterStats {
	if c.conn.Source == nil {
		return sbadapter.LimiterStats{}
	}
	return c.conn.Source.Limiter().Stats()
}

// HTTPAddr returns the address the HTTP server listens on ("" when there is none).
func (c *Client) HTTPAddr() string { return c.ops.addr() }

// Registry returns the registry the metrics are in.
func (c *Client) Registry() *prometheus.Registry { return c.reg }

func (c *Client) activeSessions() int { return c.Stats().ActiveSessions }

func (c *Client) brokerCalls() map[string]uint64 { return c.Stats().BrokerCalls }
