package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// Outcomes of seqbus_messages_total. A message may count under several (held, then handled).
const (
	OutcomeHandled      = "handled"
	OutcomeHeld         = "held"
	OutcomeDeferred     = "deferred"
	OutcomeDuplicate    = "duplicate"
	OutcomeInvalid      = "invalid"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeRetried      = "retried"
	OutcomeBlocked      = "blocked"
)

// OutcomeReleasedRetry of seqbus_messages_total: a failed handler call whose next attempt waits
// with the session released (SEQBUS_RETRY_RELEASE_AFTER); it counts as retried too.
const OutcomeReleasedRetry = "released_retry"

// OutcomeHeldInStore of seqbus_messages_total: an early message copied into the state store and
// completed at the broker (SEQBUS_EARLY_MESSAGES=store), where defer counts it deferred.
const OutcomeHeldInStore = "held_in_store"

var outcomes = []string{OutcomeHandled, OutcomeHeld, OutcomeDeferred, OutcomeDuplicate, OutcomeInvalid,
	OutcomeDeadLettered, OutcomeRetried, OutcomeBlocked, OutcomeReleasedRetry, OutcomeHeldInStore}

// metrics holds the worker's Prometheus metrics. Their names and labels are part of the worker's
// interface (dashboards and alerts depend on them); no label ever carries a session id.
type metrics struct {
	messages *prometheus.CounterVec
	// outcome holds the counter of each outcome, looked up once.
	outcome         map[string]prometheus.Counter
	handlerDuration prometheus.Histogram
	handlerErrors   prometheus.Counter
	sessionsParked  prometheus.Gauge
	sessionsBlocked prometheus.Gauge
	retrying        prometheus.Gauge // seqbus_sessions_retrying
	gapWait         prometheus.Histogram
	gapOldest       prometheus.Gauge
	gapsOpened      prometheus.Counter
	stateSaves      prometheus.Counter
	stateLoads      prometheus.Counter
	stateConflicts  prometheus.Counter
	stateSaveTime   prometheus.Histogram
	lockLost        prometheus.Counter
	sweeperWakes    prometheus.Counter
	sweeperLease    prometheus.Gauge
	sweepCalls      *prometheus.CounterVec
	ready           prometheus.Gauge
	// heldMessages, heldBytes and heldDeadLetters are what the state store holds for the entity
	// (SEQBUS_EARLY_MESSAGES=store), set by the sweeping replica; heldFull counts the runs
	// released at a bound.
	heldMessages, heldBytes, heldDeadLetters prometheus.Gauge
	heldFull                                 prometheus.Counter
}

// newMetrics registers the worker's metrics, and the Go and process collectors, in reg.
// activeSessions, brokerCalls and settlementsRefused are read at each scrape.
func newMetrics(reg *prometheus.Registry, activeSessions func() float64, brokerCalls func() map[string]uint64, settlementsRefused func() float64) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqbus_messages_total",
			Help: "Messages by what the worker did with them: handled, held (in the reorder window), deferred, duplicate, invalid, dead_lettered, retried (a failed handler call that is tried again), blocked (given back to the broker by the poison policy block), released_retry (a failed handler call whose next attempt waits with the session released).",
		}, []string{"outcome"}),
		handlerDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seqbus_handler_duration_seconds",
			Help:    "Duration of handler calls, failed ones included.",
			Buckets: prometheus.DefBuckets,
		}),
		handlerErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_handler_errors_total",
			Help: "Handler calls that returned an error, panicked or timed out.",
		}),
		sessionsParked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_sessions_parked",
			Help: "Sessions parked by the poison policy park or the gap policy park, waiting for an operator (as of the last sweep; every session of the entity).",
		}),
		sessionsBlocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_sessions_blocked",
			Help: "Sessions blocked by the poison policy block, retrying a failing message until the broker dead-letters it (as of the last sweep; every session of the entity).",
		}),
		retrying: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_sessions_retrying",
			Help: "Sessions released until the next attempt of a failing message (SEQBUS_RETRY_RELEASE_AFTER), the later messages waiting behind it (as of the last sweep; every session of the entity).",
		}),
		gapWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seqbus_gap_wait_seconds",
			Help:    "Time spent waiting for a missing sequence while later ones waited, observed when the gap closed (the sequence arrived or was skipped).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12), // 10ms … about 12h
		}),
		gapsOpened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_gaps_opened_total",
			Help: "Sessions released idle while a sequence was missing and later ones waited (a gap opened).",
		}),
		gapOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_gap_oldest_seconds",
			Help: "How long the oldest open gap has been waiting for its missing sequence (as of the last sweep; 0 when none is open).",
		}),
		stateSaves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_state_saves_total",
			Help: "State saves (with the version check), deletes included.",
		}),
		stateLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_state_loads_total",
			Help: "State loads: one when a session run starts, one after each handler retry wait (with Service Bus session state each is a broker call).",
		}),
		stateConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_state_conflicts_total",
			Help: "State saves refused because another holder changed the state (version conflict).",
		}),
		stateSaveTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seqbus_state_save_duration_seconds",
			Help:    "Duration of state saves; in transactional mode (postgres with the journal or a transactional handler) the handler runs inside the save and counts too.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms … about 4s
		}),
		lockLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_lock_lost_total",
			Help: "Session runs stopped because the session lock was lost (a cut connection, a detached link, an expired lock).",
		}),
		sweeperWakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_sweeper_wakes_total",
			Help: "Sessions the sweeper handed to the runner by id: stranded on deferred messages, past their gap timeout, or due for a released retry.",
		}),
		sweeperLease: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_sweeper_lease",
			Help: "1 on the replica that holds the entity's sweeper lease (it sweeps and sets the session gauges), 0 on the others.",
		}),
		sweepCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqbus_sweep_broker_calls_total",
			Help: "Broker calls of the sweeper and its lease, by operation: list_sessions (one per page of 100 ids), accept, get_state, set_state, renew_lock, close; and of this replica's release reports (Service Bus session state): report_accept, report_set_state, report_close.",
		}, []string{"op"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_ready",
			Help: "1 when the last readiness check reached the broker (and the database with the postgres store), 0 otherwise.",
		}),
		heldMessages: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_held_messages",
			Help: "Early messages the state store holds for the entity, every session together (SEQBUS_EARLY_MESSAGES=store); set by the replica that sweeps, 0 on the others.",
		}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_held_bytes",
			Help: "Bytes (bodies and properties) of the early messages the state store holds for the entity (SEQBUS_EARLY_MESSAGES=store; bounded by SEQBUS_HELD_MAX_BYTES); set by the replica that sweeps.",
		}),
		heldDeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqbus_held_dead_letters",
			Help: "Held messages that turned poison, kept among the store's dead letters until worker dlq replays them; set by the replica that sweeps.",
		}),
		heldFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqbus_held_full_total",
			Help: "Runs that released their session because holding its early messages would pass SEQBUS_HELD_MAX_SESSION_MESSAGES, SEQBUS_HELD_MAX_SESSION_BYTES or SEQBUS_HELD_MAX_BYTES; the broker kept the messages.",
		}),
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "seqbus_sessions_active",
		Help: "Sessions this worker is handling now.",
	}, activeSessions)
	for _, c := range []prometheus.Collector{
		m.messages, m.handlerDuration, m.handlerErrors, active, m.sessionsParked, m.sessionsBlocked, m.retrying,
		m.gapWait, m.gapOldest, m.gapsOpened, m.stateSaves, m.stateLoads, m.stateConflicts, m.stateSaveTime, m.lockLost,
		m.sweeperWakes, m.sweeperLease, m.sweepCalls, m.ready, &brokerCallsCollector{calls: brokerCalls},
		m.heldMessages, m.heldBytes, m.heldDeadLetters, m.heldFull,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqbus_settlements_refused_total",
			Help: "Settlements Service Bus refused as busy (a throttled namespace); each such message is settled again later.",
		}, settlementsRefused),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqbus_deferred_fetch_failures_total",
			Help: "Fetches of deferred messages that failed (any answer but a not-found that a peek confirmed); each ended its run with the session's messages left at the broker.",
		}, func() float64 { return float64(sbadapter.DeferredFetchFailures()) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker: registering metrics: %w", err)
		}
	}
	// The Go and process collectors, unless the registry has them already.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return nil, fmt.Errorf("worker: registering metrics: %w", err)
		}
	}
	m.outcome = make(map[string]prometheus.Counter, len(outcomes))
	for _, o := range outcomes {
		m.outcome[o] = m.messages.WithLabelValues(o) // every outcome is exported from the start, at 0
	}
	return m, nil
}

// Observe implements sequencer.Observer: engine events become counters and the gap histogram.
func (m *metrics) Observe(e sequencer.Event) {
	switch e.Kind {
	case sequencer.EventHandled:
		m.outcome[OutcomeHandled].Inc()
	case sequencer.EventHeld:
		m.outcome[OutcomeHeld].Inc()
	case sequencer.EventDeferred:
		m.outcome[OutcomeDeferred].Inc()
	case sequencer.EventDuplicate:
		m.outcome[OutcomeDuplicate].Inc()
	case sequencer.EventInvalid:
		m.outcome[OutcomeInvalid].Inc()
		m.outcome[OutcomeDeadLettered].Inc()
	case sequencer.EventDeadLettered:
		m.outcome[OutcomeDeadLettered].Inc()
	case sequencer.EventRetry:
		m.outcome[OutcomeRetried].Inc()
	case sequencer.EventBlocked:
		m.outcome[OutcomeBlocked].Inc()
	case sequencer.EventReleasedRetry:
		m.outcome[OutcomeReleasedRetry].Inc()
	case sequencer.EventHeldInStore:
		m.outcome[OutcomeHeldInStore].Inc()
	case sequencer.EventHeldFull:
		m.heldFull.Inc()
	case sequencer.EventGapResolved:
		m.gapWait.Observe(e.Duration.Seconds())
	case sequencer.EventGapOpened:
		m.gapsOpened.Inc()
	case sequencer.EventLockLost:
		m.lockLost.Inc()
	}
}

// handlerMiddleware times each handler call and counts the failed ones.
func (m *metrics) handlerMiddleware(next sequencer.Handler) sequencer.Handler {
	return sequencer.HandlerFunc(func(ctx context.Context, msg *sequencer.Message) error {
		start := time.Now()
		err := next.Handle(ctx, msg)
		m.handlerDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			m.handlerErrors.Inc()
		}
		return err
	})
}

// brokerCallsCollector exports the engine's broker call counts as seqbus_broker_calls_total{op}.
type brokerCallsCollector struct {
	calls func() map[string]uint64
}

var brokerCallsDesc = prometheus.NewDesc("seqbus_broker_calls_total",
	"Calls to Service Bus by operation: receive, receive_deferred, complete, defer, dead_letter, abandon, renew_lock, close, accept, peek (session state reads count under seqbus_state_loads_total, writes under seqbus_state_saves_total).",
	[]string{"op"}, nil)

func (c *brokerCallsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- brokerCallsDesc }

func (c *brokerCallsCollector) Collect(ch chan<- prometheus.Metric) {
	for op, n := range c.calls() {
		ch <- prometheus.MustNewConstMetric(brokerCallsDesc, prometheus.CounterValue, float64(n), op)
	}
}
