package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// scaleMetrics are the scaling signal's gauges and what its evaluations cost.
type scaleMetrics struct {
	replicas    prometheus.Gauge
	ready       prometheus.Gauge
	calls       *prometheus.CounterVec
	evaluations prometheus.Counter
}

func newScaleMetrics(reg *prometheus.Registry) (*scaleMetrics, error) {
	m := &scaleMetrics{
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_replicas_wanted",
			Help: "Replicas the entity's work needs: ceil(seqbus_sessions_ready / SEQBUS_MAX_CONCURRENT_SESSIONS), at most SEQBUS_SCALE_MAX_REPLICAS (as of the last evaluation; 0 on a worker that does not hold the sweeper lease).",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_sessions_ready",
			Help: "Sessions with messages ready to handle, those being handled included; not those holding only deferred messages on a gap, parked, blocked or ended (as of the last evaluation; 0 on a worker that does not hold the sweeper lease).",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqbus_scale_broker_calls_total",
			Help: "Broker calls of the scaling signal's evaluations, by operation: runtime_properties (the entity's message counts), list_sessions (one per page of 100 ids), accept, get_state, peek, close; on SQS get_queue_attributes (the queue's message counts).",
		}, []string{"op"}),
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_scale_evaluations_total",
			Help: "Evaluations of the scaling signal (failed ones included).",
		}),
	}
	for _, c := range []prometheus.Collector{m.replicas, m.ready, m.calls, m.evaluations} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker: registering the scaling metrics: %w", err)
		}
	}
	return m, nil
}

// errPartial marks an evaluation that counted some sessions it could not look into as ready.
var errPartial = errors.New("partial evaluation")

// scaleSignal evaluates the scaling signal every interval and serves the last evaluation.
type scaleSignal struct {
	count       func(ctx context.Context) (int, error)
	perReplica  int
	maxReplicas int
	interval    time.Duration
	// creditsPerSecond bounds the evaluations' cost at the broker on average, in credits (0: no
	// bound); spent counts it.
	creditsPerSecond int
	spent            atomic.Int64
	clock            clock.Clock
	log              *slog.Logger
	m                *scaleMetrics
	// evaluates, when set, says whether this process evaluates now: a worker does while it holds
	// the sweeper lease, so that the entity is evaluated once, not once per replica.
	evaluates func() bool

	mu   sync.Mutex
	last Scale
	have bool
	why  string
}

// newScaleSignal builds the signal of cfg's entity on conn, its metrics in reg.
func newScaleSignal(cfg Config, conn *Connections, reg *prometheus.Registry, evaluates func() bool) (*scaleSignal, error) {
	m, err := newScaleMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &scaleSignal{
		perReplica: cfg.MaxConcurrentSessions, maxReplicas: cfg.ScaleMaxReplicas,
		interval: cfg.ScaleInterval, creditsPerSecond: cfg.ScaleCreditsPerSecond,
		clock: cfg.Clock, log: cfg.Logger, m: m, evaluates: evaluates,
		why: "starting: not evaluated yet",
	}
	calls := func(op string, n int) {
		m.calls.WithLabelValues(op).Add(float64(n))
		s.spent.Add(int64(n * credits(op)))
	}
	if conn.SQS != nil {
		s.count = sqsMessages(conn.SQS, cfg.SQSQueueURL, calls)
		return s, nil
	}
	rc := &readyCounter{
		log:    cfg.Logger,
		listed: conn.ManagementSource.ListSessions, source: conn.ManagementSource,
		concurrency: scanConcurrency, perSession: 10 * time.Second, calls: calls,
		maxPeeks: maxPeeks(cfg.ScaleCreditsPerSecond), sample: rand.Perm,
	}
	if conn.Admin != nil {
		rc.active = activeMessages(conn.Admin, cfg.Entity)
	}
	if conn.Postgres != nil {
		rc.states = listerStates(conn.Lister)
	} else {
		// The Service Bus store: the scan client locks sessions, away from the runner's.
		rc.stated, rc.changed, rc.now = conn.ManagementSource.ListSessionsWithState, conn.ManagementSource.ListSessionsWithStateAfter, cfg.Clock.Now
		rc.source, rc.store = conn.ScanSource, conn.Store
	}
	s.count = rc.count
	return s, nil
}

// service evaluates every interval, or less often when what the last evaluation cost asks for
// it (creditsPerSecond), until it is stopped.
func (s *scaleSignal) service() *base {
	return newBase("worker: scaling signal", s.log, func(soft, _ context.Context) error {
		for {
			start, before := s.clock.Now(), s.spent.Load()
			s.evaluate(soft)
			wait := paced(s.interval, s.spent.Load()-before, s.creditsPerSecond)
			if clock.Sleep(soft, s.clock, wait-s.clock.Now().Sub(start)) != nil {
				return nil
			}
		}
	})
}

// paced is how long after an evaluation began that cost spent credits the next may begin:
// interval, or longer so that the evaluations spend at most perSecond credits a second on
// average (0: no bound). An idle entity's evaluation costs one request, so scaling from zero
// keeps the interval; one that lists many sessions is followed later, not at a cost the
// namespace's throttle would feel.
func paced(interval time.Duration, spent int64, perSecond int) time.Duration {
	if perSecond <= 0 || spent <= 0 {
		return interval
	}
	return max(interval, time.Duration(spent)*time.Second/time.Duration(perSecond))
}

// peekHorizon is the time whose credits one evaluation's peeks may spend at most.
const peekHorizon = 10 * time.Second

// maxPeeks is how many sessions one evaluation peeks at most (0: no bound): what perSecond
// credits a second pay for in peekHorizon, at about 3 credits a peek (an accept, a state read or
// a peek, a close). The pacing then puts the next evaluation no sooner than peekHorizon after
// it began, and one evaluation's burst is bounded however many sessions are in doubt. Not the
// interval: a short one would cut the sample to a few sessions and the count's precision with it.
func maxPeeks(perSecond int) int {
	if perSecond <= 0 {
		return 0
	}
	return max(1, int(float64(perSecond)*peekHorizon.Seconds()/3))
}

// credits is what a Standard namespace charges for one call of the scaling signal: 10 for a
// management request (a listing, the entity's runtime properties), 1 for the calls on a
// session (the emulator's model; a peek is charged per message it returns, which this
// understates for sessions with many deferred messages).
func credits(op string) int {
	switch op {
	case "list_sessions", "runtime_properties":
		return 10
	}
	return 1
}

// evaluate evaluates once. It has no deadline of its own: an evaluation of many sessions may take
// longer than an interval (the next then begins at once), each broker call is bounded (the SDK's
// management timeout, perSession for a peek), and evaluated_at tells the age of what is served.
func (s *scaleSignal) evaluate(ctx context.Context) {
	if s.evaluates != nil && !s.evaluates() {
		s.m.replicas.Set(0)
		s.m.ready.Set(0)
		s.set(Scale{}, false, "not evaluated by this replica: the replica that holds the sweeper lease evaluates, and `worker scaler` does")
		return
	}
	at := s.clock.Now()
	n, err := s.count(ctx)
	s.m.evaluations.Inc()
	if ctx.Err() != nil {
		return
	}
	if err != nil && !errors.Is(err, errPartial) {
		s.log.WarnContext(ctx, "worker: scaling signal: evaluation failed; serving the last one", slog.Any("error", err))
		return
	}
	if err != nil {
		s.log.WarnContext(ctx, "worker: scaling signal", slog.Any("error", err))
	}
	sc := Scale{
		ReplicasWanted: replicasWanted(n, s.perReplica, s.maxReplicas), SessionsReady: n,
		SessionsPerReplica: s.perReplica, EvaluatedAt: at.UTC(),
	}
	s.m.replicas.Set(float64(sc.ReplicasWanted))
	s.m.ready.Set(float64(n))
	s.set(sc, true, "")
	s.log.DebugContext(ctx, "worker: scaling signal", slog.Int("sessions_ready", n), slog.Int("replicas_wanted", sc.ReplicasWanted),
		slog.Duration("took", s.clock.Now().Sub(at)))
}

func (s *scaleSignal) set(sc Scale, have bool, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.have, s.why = sc, have, why
}

// Last returns the last evaluation; false when there is none to serve (and why).
func (s *scaleSignal) Last() (Scale, bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.have, s.why
}

// serveHTTP answers GET /scale: the last evaluation, or 503 with the reason there is none.
func (s *scaleSignal) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	sc, ok, why := s.Last()
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not evaluated", "reason": why})
		return
	}
	writeJSON(w, http.StatusOK, sc)
}

// heldLease records whether the lease it wraps is held, for the scaling signal of a worker.
type heldLease struct {
	lease
	held *atomic.Bool
}

func (l heldLease) Hold(ctx context.Context) (bool, error) {
	ok, err := l.lease.Hold(ctx)
	l.held.Store(ok)
	return ok, err
}

func (l heldLease) Release(ctx context.Context) {
	l.held.Store(false)
	l.lease.Release(ctx)
}

// Scaler is `worker scaler`: the scaling signal of one entity served on its own (GET /scale,
// /metrics, /healthz, /readyz) with the worker's settings, consuming nothing, so that a platform
// can scale the workers from zero. NewScaler builds it, Start runs it, Stop stops it.
type Scaler struct {
	cfg    Config
	log    *slog.Logger
	conn   *Connections
	signal *scaleSignal
	eval   service
	ready  service
	ops    ops

	mu       sync.Mutex
	started  bool
	stopping bool
	done     chan struct{}
}

// NewScaler checks cfg as New does (every problem at once, each naming its variable; no handler
// is needed: the scaler handles nothing) and builds a Scaler. It connects to nothing yet.
func NewScaler(cfg Config) (*Scaler, error) {
	if cfg.Ordering != OrderingSession {
		return nil, configError("Ordering", fmt.Errorf("the scaling signal counts sessions: it needs %q, got %q", OrderingSession, cfg.Ordering))
	}
	if cfg.Handler == nil && !cfg.Journal {
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error {
			return errors.New("worker: the scaler handles no message")
		})
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Scaler{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	var err error
	if s.conn, err = Connect(context.Background(), cfg); err != nil {
		return nil, err
	}
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "seqbus_ready", Help: "1 when the last readiness check reached the broker (and the database with the postgres store), 0 otherwise."})
	if err := cfg.Registry.Register(ready); err != nil {
		s.conn.Close(context.Background())
		return nil, fmt.Errorf("worker: registering the scaler's metrics: %w", err)
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var already prometheus.AlreadyRegisteredError
		if err := cfg.Registry.Register(c); err != nil && !errors.As(err, &already) {
			s.conn.Close(context.Background())
			return nil, fmt.Errorf("worker: registering the scaler's metrics: %w", err)
		}
	}
	if s.signal, err = newScaleSignal(cfg, s.conn, cfg.Registry, nil); err != nil {
		s.conn.Close(context.Background())
		return nil, err
	}
	s.eval = s.signal.service()
	s.ops = ops{reg: cfg.Registry, interval: cfg.ReadyInterval, readyGauge: ready, log: s.log, scale: s.signal.serveHTTP,
		check: func(ctx context.Context) []string {
			var reasons []string
			if s.conn.SQS != nil {
				if err := probeSQS(ctx, s.conn.SQS, cfg.SQSQueueURL); err != nil {
					reasons = append(reasons, fmt.Sprintf("sqs: %v", err))
				}
			} else if err := s.conn.ManagementSource.Probe(ctx); err != nil && !sbadapter.IsServerBusy(err) {
				reasons = append(reasons, fmt.Sprintf("service bus: %v", err))
			}
			if s.conn.Pool != nil {
				if err := s.conn.Pool.Ping(ctx); err != nil {
					reasons = append(reasons, fmt.Sprintf("postgres: %v", err))
				}
			}
			return reasons
		}}
	return s, nil
}

// Start serves HTTP, checks the database schema (with Postgres) and the entity (a wrong name or
// key fails here), and starts the evaluations and the readiness checks.
func (s *Scaler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("worker: scaler already started")
	}
	s.started = true
	s.ready = s.ops.service(s.cfg.Clock)
	fail := func(err error) error {
		s.stopping = true
		_ = stopAll(ctx, true, s.ready, s.eval)
		s.ops.shutdown(ctx)
		s.conn.Close(ctx)
		close(s.done)
		return err
	}
	if err := s.ops.listen(s.cfg.httpAddr()); err != nil {
		return fail(err)
	}
	if s.conn.Pool != nil {
		if err := prepareDatabase(ctx, s.conn.Pool, s.cfg.Database, s.log); err != nil {
			return fail(err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var err error
	if s.conn.SQS != nil {
		err = probeSQS(pctx, s.conn.SQS, s.cfg.SQSQueueURL)
	} else {
		err = s.conn.ManagementSource.Probe(pctx)
	}
	cancel()
	if err != nil {
		if s.conn.SQS != nil && sqsFatal(err) {
			return fail(configError("SQSQueueURL", fmt.Errorf("cannot use %s: %w", s.cfg.SQSQueueURL, err)))
		}
		if s.conn.SQS == nil && sbadapter.Classify(err) == sbadapter.ClassFatal {
			return fail(configError(s.entityField(err), fmt.Errorf("cannot use %s: %w", s.cfg.Entity, err)))
		}
		s.log.WarnContext(ctx, "worker: scaler: probing the entity failed; starting anyway, each evaluation tries again", slog.Any("error", err))
	}
	for _, svc := range []service{s.ready, s.eval} {
		if err := svc.Start(ctx); err != nil {
			return fail(fmt.Errorf("worker: scaler: start: %w", err))
		}
	}
	s.log.InfoContext(ctx, "worker: scaler running", slog.String("provider", string(s.cfg.Provider)), slog.String("entity", s.cfg.EntityName()),
		slog.String("state_store", string(s.cfg.StateStore)), slog.String("http_addr", s.HTTPAddr()),
		slog.String("scale_interval", s.cfg.ScaleInterval.String()))
	return nil
}

// entityField names the setting a fatal probe error points at.
func (s *Scaler) entityField(err error) string {
	switch {
	case errors.Is(err, sbadapter.ErrUnauthorized) && s.cfg.Namespace != "":
		return "Namespace"
	case errors.Is(err, sbadapter.ErrUnauthorized):
		return "ConnectionString"
	case s.cfg.Entity.Queue != "":
		return "Entity.Queue"
	}
	return "Entity.Subscription"
}

// Stop stops the evaluations (one under way is canceled: it has nothing to finish) and the
// HTTP server, and closes the connections.
func (s *Scaler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.stopping {
		s.mu.Unlock()
		if s.started {
			<-s.done
		}
		return nil
	}
	s.stopping = true
	s.mu.Unlock()
	err := stopAll(ctx, true, s.ready, s.eval)
	s.ops.shutdown(ctx)
	s.conn.Close(ctx)
	s.log.InfoContext(ctx, "worker: scaler stopped")
	close(s.done)
	return err
}

// StopAndCancel is Stop: the scaler has no work in hand to let finish.
func (s *Scaler) StopAndCancel(ctx context.Context) error { return s.Stop(ctx) }

// Stopped is closed once the Scaler has stopped.
func (s *Scaler) Stopped() <-chan struct{} { return s.done }

// HTTPAddr returns the address the HTTP server listens on ("" when there is none).
func (s *Scaler) HTTPAddr() string { return s.ops.addr() }

// Last returns the last evaluation of the scaling signal; false when there is none yet.
func (s *Scaler) Last() (Scale, bool) {
	sc, ok, _ := s.signal.Last()
	return sc, ok
}
