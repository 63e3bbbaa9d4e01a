package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// Options configure a matrix run. Zero fields take the defaults in brackets.
type Options struct {
	// Provider is the broker the cells run on [ProviderServiceBus]. ProviderSQS runs them on
	// the in-process SQS FIFO and needs DatabaseURL; it has pressures none and latency.
	Provider Provider
	// The dimensions; every combination is one cell.
	Replicas       []int      // [1 2 4 8]
	Pressures      []Pressure // [none throttle latency]
	ExceptionRates []float64  // [0 0.01 0.1]
	Arrivals       []Arrival  // [in-order shuffled]; reversed on request
	// Early lists where the replicas keep early messages beyond the reorder window
	// (SEQBUS_EARLY_MESSAGES), each mode a cell of its own, side by side [empty: the worker's
	// default, defer, and the cells do not name it]; store needs DatabaseURL and runs on a
	// partitioned queue.
	Early []worker.EarlyMessages
	// ReorderWindow is each replica's SEQBUS_REORDER_WINDOW [nil: the worker's default]. A
	// window smaller than a session lets early messages reach the Early mode.
	ReorderWindow *int

	Sessions int // sessions per cell [60]
	Messages int // messages per session [50]
	// SessionsPerReplica is each replica's MaxConcurrentSessions [4].
	SessionsPerReplica int
	// SessionConnections is each replica's SessionConnections, and the plain consumer's
	// connections per replica, each with SessionsPerReplica ÷ SessionConnections sessions at
	// once [1].
	SessionConnections int
	// ThrottleCredits is the credits per second of the throttle pressure
	// [emulator.StandardCreditsPerSecond, 1000].
	ThrottleCredits int
	// Latency is the delay of every answer with the latency pressure [5ms].
	Latency time.Duration
	// AwaitCompletions runs the replicas with SEQBUS_PIPELINE_RUNS=false, each completion of a
	// run awaited before the next handler call [false: the worker's default, pipelined runs].
	AwaitCompletions bool
	// DatabaseURL keeps the replicas' state in Postgres at that URL (SEQBUS_STATE_STORE=postgres,
	// the migrations applied at start) [empty: the Service Bus session state].
	DatabaseURL string
	// OfferedShare, when positive, adds to each throttle cell a phase offered that share of the
	// cell's credit-limited rate (measured in the same cell, before it): fresh replicas and
	// sessions, messages published one at a time at a fixed rate [0: none].
	OfferedShare float64
	// OfferedTrickle publishes the offered phase's messages one at a time, round robin over as
	// many sessions as the replicas hold at once, instead of one batch per session [false].
	OfferedTrickle bool
	// HandlerRetry is the engine's retry policy for failed handler calls [10 attempts, 2ms base,
	// 20ms cap: small, so that cells with exceptions finish; the default policy waits 1s, 2s, …].
	HandlerRetry sequencer.RetryPolicy
	// CellTimeout bounds one cell [3m].
	CellTimeout time.Duration
	// ConnectionString runs every cell against that namespace instead of an in-process
	// emulator; Entity is its session-enabled queue or subscription, which should hold nothing
	// else (sessions of other runs are handled and not counted). Only PressureNone applies.
	ConnectionString string
	Entity           sbadapter.Entity
	// RunID prefixes the session ids [bench-<unix time>].
	RunID string
	// Seed seeds the shuffles [1].
	Seed uint64
	// Logger receives the components' logs [discard].
	Logger *slog.Logger
}

// Defaults of Options.
var (
	DefaultReplicas       = []int{1, 2, 4, 8}
	DefaultPressures      = []Pressure{PressureNone, PressureThrottle, PressureLatency}
	DefaultExceptionRates = []float64{0, 0.01, 0.1}
	DefaultArrivals       = []Arrival{ArrivalInOrder, ArrivalShuffled}
	DefaultHandlerRetry   = sequencer.RetryPolicy{Attempts: 10, Base: 2 * time.Millisecond, Cap: 20 * time.Millisecond}
)

// Quick is the --quick preset: a small matrix that finishes in under a minute on a 2-core machine.
func Quick() Options {
	return Options{
		Replicas:       []int{1, 4},
		Pressures:      DefaultPressures,
		ExceptionRates: []float64{0, 0.1},
		Arrivals:       DefaultArrivals,
		Sessions:       8,
		Messages:       20,
		CellTimeout:    30 * time.Second,
	}
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if len(o.Replicas) == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.Provider == "" {
		o.Provider = ProviderServiceBus
	}
	if len(o.Pressures) == 0 {
		o.Pressures = DefaultPressures
		switch {
		case o.ConnectionString != "":
			o.Pressures = []Pressure{PressureNone}
		case o.Provider == ProviderSQS:
			o.Pressures = []Pressure{PressureNone, PressureLatency}
		}
	}
	if o.Provider == ProviderSQS && len(o.Early) == 0 {
		o.Early = []worker.EarlyMessages{worker.EarlyMessagesStore}
	}
	if len(o.ExceptionRates) == 0 {
		o.ExceptionRates = DefaultExceptionRates
	}
	if len(o.Arrivals) == 0 {
		o.Arrivals = DefaultArrivals
	}
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&o.Sessions, 60)
	set(&o.Messages, 50)
	set(&o.SessionsPerReplica, 4)
	set(&o.SessionConnections, 1)
	set(&o.ThrottleCredits, 1000)
	if o.Latency == 0 {
		o.Latency = 5 * time.Millisecond
	}
	if o.HandlerRetry == (sequencer.RetryPolicy{}) {
		o.HandlerRetry = DefaultHandlerRetry
	}
	if o.CellTimeout == 0 {
		o.CellTimeout = 3 * time.Minute
	}
	if o.RunID == "" {
		o.RunID = fmt.Sprintf("bench-%d", time.Now().Unix())
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem of o (after WithDefaults).
func (o Options) Validate() error {
	var errs []error
	switch o.Provider {
	case ProviderServiceBus:
	case ProviderSQS:
		if o.DatabaseURL == "" {
			errs = append(errs, fmt.Errorf("provider %s: the replicas keep their state and early messages in Postgres and need a database url", o.Provider))
		}
		if o.ConnectionString != "" {
			errs = append(errs, fmt.Errorf("provider %s runs on the in-process SQS FIFO: a connection string is Service Bus only", o.Provider))
		}
		if slices.Contains(o.Pressures, PressureThrottle) {
			errs = append(errs, fmt.Errorf("provider %s: the local SQS has pressures %s and %s only", o.Provider, PressureNone, PressureLatency))
		}
		if slices.ContainsFunc(o.Early, func(e worker.EarlyMessages) bool { return e != worker.EarlyMessagesStore }) {
			errs = append(errs, fmt.Errorf("provider %s holds early messages in the store (early %s) only", o.Provider, worker.EarlyMessagesStore))
		}
		if o.SessionConnections > 1 || o.OfferedShare != 0 {
			errs = append(errs, fmt.Errorf("provider %s: session connections and the offered phase are Service Bus only", o.Provider))
		}
	default:
		errs = append(errs, fmt.Errorf("provider: %q is neither %s nor %s", o.Provider, ProviderServiceBus, ProviderSQS))
	}
	for _, r := range o.Replicas {
		if r < 1 {
			errs = append(errs, fmt.Errorf("replicas: %d is not a positive count", r))
		}
	}
	for _, p := range o.Pressures {
		switch {
		case p != PressureNone && p != PressureThrottle && p != PressureLatency:
			errs = append(errs, fmt.Errorf("pressure: %q is none of %s, %s, %s", p, PressureNone, PressureThrottle, PressureLatency))
		case p != PressureNone && o.ConnectionString != "":
			errs = append(errs, fmt.Errorf("pressure: %s needs the in-process emulator; a namespace given by connection string brings its own", p))
		}
	}
	for _, r := range o.ExceptionRates {
		if !(r >= 0 && r < 1) {
			errs = append(errs, fmt.Errorf("exception rate: %v is outside [0, 1)", r))
		}
	}
	for _, a := range o.Arrivals {
		if a != ArrivalInOrder && a != ArrivalShuffled && a != ArrivalReversed {
			errs = append(errs, fmt.Errorf("arrival: %q is none of %s, %s, %s", a, ArrivalInOrder, ArrivalShuffled, ArrivalReversed))
		}
	}
	for _, e := range o.Early {
		switch {
		case e != worker.EarlyMessagesDefer && e != worker.EarlyMessagesStore:
			errs = append(errs, fmt.Errorf("early messages: %q is neither %s nor %s", e, worker.EarlyMessagesDefer, worker.EarlyMessagesStore))
		case e == worker.EarlyMessagesStore && o.DatabaseURL == "":
			errs = append(errs, fmt.Errorf("early messages: %s holds them in Postgres and needs a database url", e))
		}
	}
	if o.ReorderWindow != nil && *o.ReorderWindow < 0 {
		errs = append(errs, fmt.Errorf("reorder window: %d is negative (0 turns it off)", *o.ReorderWindow))
	}
	if o.Sessions < 1 || o.Messages < 1 || o.SessionsPerReplica < 1 {
		errs = append(errs, fmt.Errorf("sessions %d, messages %d and sessions per replica %d must be positive", o.Sessions, o.Messages, o.SessionsPerReplica))
	}
	if o.SessionConnections < 1 || o.SessionsPerReplica%o.SessionConnections != 0 {
		errs = append(errs, fmt.Errorf("session connections %d must be positive and divide sessions per replica %d", o.SessionConnections, o.SessionsPerReplica))
	}
	if o.ThrottleCredits < 1 || o.Latency < 0 || o.CellTimeout < 0 {
		errs = append(errs, errors.New("throttle credits must be positive, latency and cell timeout not negative"))
	}
	if o.HandlerRetry.Attempts < 1 || o.HandlerRetry.Base < 0 {
		errs = append(errs, fmt.Errorf("handler retry: %d attempts, base %s: need one attempt and a base ≥ 0", o.HandlerRetry.Attempts, o.HandlerRetry.Base))
	}
	if o.OfferedShare != 0 {
		switch {
		case !(o.OfferedShare > 0 && o.OfferedShare <= 1):
			errs = append(errs, fmt.Errorf("offered share: %v is outside (0, 1]", o.OfferedShare))
		case !slices.Contains(o.Pressures, PressureThrottle):
			errs = append(errs, fmt.Errorf("offered share: applies to the %s pressure, which is not selected", PressureThrottle))
		}
	}
	if o.ConnectionString != "" {
		if err := o.Entity.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("entity: %w", err))
		}
	}
	if o.DatabaseURL != "" {
		if _, err := pgxpool.ParseConfig(o.DatabaseURL); err != nil {
			errs = append(errs, fmt.Errorf("database url: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Cells lists the matrix in the order it runs: pressure, then arrival, exception rate, replicas
// and the mode of early messages (so that the modes of one input run side by side). A cell
// names its mode only when Early was given.
func (o Options) Cells() []Cell {
	early := o.Early
	if len(early) == 0 {
		early = []worker.EarlyMessages{""}
	}
	var cells []Cell
	for _, p := range o.Pressures {
		for _, a := range o.Arrivals {
			for _, e := range o.ExceptionRates {
				for _, r := range o.Replicas {
					for _, m := range early {
						cells = append(cells, Cell{Replicas: r, Pressure: p, ExceptionRate: e, Arrival: a, Early: m})
					}
				}
			}
		}
	}
	return cells
}

// Run runs every cell of o, one at a time, calling progress before each (with its index) and
// after the last (with len(cells)). A cell that fails is reported in its Result and the run goes
// on; Run's error is about the options or ctx.
func Run(ctx context.Context, o Options, progress func(done int, next Cell)) ([]Result, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cells := o.Cells()
	results := make([]Result, 0, len(cells))
	for i, c := range cells {
		if progress != nil {
			progress(i, c)
		}
		if err := ctx.Err(); err != nil {
			return results, err
		}
		var r Result
		// The labels tell a CPU profile's cells apart (cmd/bench -cpuprofile); the goroutines a
		// cell starts, the emulator's among them, inherit them.
		pprof.Do(ctx, pprof.Labels("cell", c.String()), func(ctx context.Context) {
			if o.Provider == ProviderSQS {
				r = runSQSCell(ctx, o, i, c)
			} else {
				r = runCell(ctx, o, i, c)
			}
		})
		o.Logger.InfoContext(ctx, "bench: cell done", slog.String("cell", c.String()), slog.Float64("msg_per_s", r.Rate), slog.Any("error", r.Err))
		results = append(results, r)
	}
	if progress != nil {
		progress(len(cells), Cell{})
	}
	return results, ctx.Err()
}
