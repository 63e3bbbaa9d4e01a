package soak

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Worker is a worker binary an idle measurement runs, under a name for the report.
type Worker struct {
	Name, Bin string
	// Lease says the worker sweeps under the sweeper lease and keeps its Watch's snapshot in the
	// lease session: the lease session is then seeded with the snapshot of a sweeper that has
	// read every ended session (a worker without the lease would read the lease session as one
	// more session, with a state it cannot decode).
	Lease bool
	// Env are settings (KEY=VALUE) the worker gets on top of the measurement's.
	Env []string
}

// IdleOptions configure an idle measurement: for each number of ended sessions, each worker
// on a fresh emulator seeded with that many, measured idle.
type IdleOptions struct {
	// Workers are measured in turn on each number of ended sessions (required).
	Workers []Worker
	// Ended are the numbers of ended sessions (1,000, 10,000 and 100,000); 0, no session ever
	// handled, is always measured first: the baseline of the budget.
	Ended []int
	// Messages each ended session had (3).
	Messages int
	// Replicas worker processes (1).
	Replicas int
	// Store and DatabaseURL as in Options.
	Store       string
	DatabaseURL string
	// SweepInterval is SEQBUS_SWEEP_INTERVAL (5s); Warmup how long after the replicas start
	// the measurement may begin (one interval and 2s: the first sweep takes the lease); Intervals
	// how many intervals are measured (5).
	SweepInterval, Warmup time.Duration
	Intervals             int
	// CatchUp bounds the wait, after the warm-up, for the worker to have done what it does once
	// at start (the scaling signal reads every session with state once; the sweeper without a
	// snapshot rescans): it ends at the first interval within the budget of the worker's own
	// baseline (Budget), or after CatchUp (10m), and the measurement follows.
	CatchUp time.Duration
	// Timeout bounds each measurement (seeding and catch-up included; 30m).
	Timeout time.Duration
	Logger  *slog.Logger
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o IdleOptions) WithDefaults() IdleOptions {
	if o.Ended == nil {
		o.Ended = []int{1_000, 10_000, 100_000}
	}
	o.Messages = cmp.Or(o.Messages, 3)
	o.Replicas = cmp.Or(o.Replicas, 1)
	o.Store = cmp.Or(o.Store, StoreServiceBus)
	o.SweepInterval = cmp.Or(o.SweepInterval, 5*time.Second)
	o.Warmup = cmp.Or(o.Warmup, o.SweepInterval+2*time.Second)
	o.Intervals = cmp.Or(o.Intervals, 5)
	o.CatchUp = cmp.Or(o.CatchUp, 10*time.Minute)
	o.Timeout = cmp.Or(o.Timeout, 30*time.Minute)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the options an idle measurement cannot run with.
func (o IdleOptions) Validate() error {
	var errs []error
	if len(o.Workers) == 0 {
		errs = append(errs, errors.New("soak: idle: a worker binary is required"))
	}
	for _, w := range o.Workers {
		if w.Bin == "" || w.Name == "" {
			errs = append(errs, errors.New("soak: idle: each worker needs a name and a binary"))
		}
	}
	for _, n := range o.Ended {
		if n < 0 {
			errs = append(errs, fmt.Errorf("soak: idle: ended sessions must not be negative (%d)", n))
		}
	}
	if o.Messages < 1 || o.Replicas < 1 || o.Intervals < 1 {
		errs = append(errs, errors.New("soak: idle: messages, replicas and intervals must be at least 1"))
	}
	if o.SweepInterval <= 0 || o.Warmup <= 0 || o.CatchUp <= 0 || o.Timeout <= 0 {
		errs = append(errs, errors.New("soak: idle: the sweep interval, the warm-up, the catch-up and the timeout must be positive"))
	}
	errs = append(errs, Options{WorkerBin: "w", Store: o.Store, DatabaseURL: o.DatabaseURL}.WithDefaults().Validate())
	return errors.Join(errs...)
}

// IdleReport is what one worker cost idle with Ended ended sessions.
type IdleReport struct {
	Store, Worker string
	Ended         int
	// Seed is how long seeding the ended sessions took; CatchUp how long after the warm-up the
	// worker took to come within the budget (CaughtUp), or the bound it was given (not CaughtUp).
	Seed, CatchUp time.Duration
	CaughtUp      bool
	// Per interval, as the emulator saw them: link attaches, $management requests (state
	// reads and writes, lock renewals, session listings, …) and credits (a message operation 1,
	// a management operation 10). Max* are the largest single interval.
	Attaches, Management, Credits          float64
	MaxAttaches, MaxManagement, MaxCredits float64
	// WorkerCalls are the worker's own counts per interval (seqbus_broker_calls_total,
	// seqbus_state_saves_total, seqbus_state_loads_total, seqbus_sweep_broker_calls_total and
	// seqbus_scale_broker_calls_total; a worker from before the sweeper lease does not
	// count its sweeper's).
	WorkerCalls float64
	// SweepCalls and ScaleCalls are the sweeper's and the scaling signal's shares of WorkerCalls.
	SweepCalls, ScaleCalls float64
}

// RunIdle measures each worker idle on each number of ended sessions, after the baseline of none.
func RunIdle(ctx context.Context, o IdleOptions) ([]IdleReport, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ended := append([]int{0}, slices.DeleteFunc(slices.Clone(o.Ended), func(n int) bool { return n == 0 })...)
	var out []IdleReport
	base := map[string]*IdleReport{}
	for _, n := range ended {
		for _, w := range o.Workers {
			r, err := runIdleOne(ctx, o, w, n, base[w.Name])
			if err != nil {
				return out, fmt.Errorf("soak: idle: %s with %d ended sessions: %w", w.Name, n, err)
			}
			o.Logger.InfoContext(ctx, "soak: idle measured", slog.String("worker", w.Name), slog.Int("ended", n),
				slog.Float64("attaches_per_interval", r.Attaches), slog.Float64("management_per_interval", r.Management))
			out = append(out, r)
			if n == 0 {
				base[w.Name] = &r
			}
		}
	}
	return out, nil
}

// runIdleOne measures worker w on n ended sessions; base is its baseline (nil: this is it).
func runIdleOne(ctx context.Context, o IdleOptions, w Worker, n int, base *IdleReport) (IdleReport, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rep := IdleReport{Store: o.Store, Worker: w.Name, Ended: n}
	counter := &linkCounter{next: o.Logger.With(slog.String("component", "emulator")).WithGroup("emulator").Handler(),
		attaches: &atomic.Int64{}, management: &atomic.Int64{}}
	srv, env, err := startEmulator(ctx, slog.New(counter), o.SweepInterval)
	if err != nil {
		return rep, err
	}
	defer srv.Close()
	o.Logger.InfoContext(ctx, "soak: idle: seeding", slog.String("worker", w.Name), slog.Int("ended", n))
	start := time.Now()
	if o.Store == StorePostgres {
		pgEnv, url, drop, err := postgresEnv(ctx, o.DatabaseURL)
		if err != nil {
			return rep, err
		}
		defer drop()
		env = append(env, pgEnv...)
		if err := seedPostgres(ctx, url, n, o.Messages); err != nil {
			return rep, err
		}
	} else {
		e, err := srv.Broker().Lookup(queue)
		if err != nil {
			return rep, fmt.Errorf("the queue: %w", err)
		}
		if err := seedServiceBus(ctx, e, n, o.Messages, w.Lease); err != nil {
			return rep, err
		}
	}
	rep.Seed = time.Since(start)

	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.stop()
		}
	}()
	for i := range o.Replicas {
		r, err := startReplica(ctx, w.Bin, fmt.Sprintf("%s-%d", w.Name, i), append(slices.Clone(env), w.Env...), newTally(0))
		if err != nil {
			return rep, err
		}
		replicas = append(replicas, r)
	}
	if err := sleep(ctx, o.Warmup); err != nil {
		return rep, err
	}
	sample := func() (idleSample, error) {
		c, err := scrapeAll(ctx, replicas)
		return idleSample{attaches: float64(counter.attaches.Load()), mgmt: float64(counter.management.Load()),
			credits: float64(srv.PressureStats().Credits), worker: c.engine + c.state + c.sweep + c.scale,
			sweep: c.sweep, scale: c.scale}, err
	}
	first, err := sample()
	if err != nil {
		return rep, err
	}
	if base != nil {
		rep.CaughtUp = true
		start := time.Now()
		for {
			if err := sleep(ctx, o.SweepInterval); err != nil {
				return rep, err
			}
			s, err := sample()
			if err != nil {
				return rep, err
			}
			within := s.attaches-first.attaches <= base.Attaches+Budget && s.mgmt-first.mgmt <= base.Management+Budget
			first = s
			if within {
				break
			}
			if time.Since(start) >= o.CatchUp {
				rep.CaughtUp = false
				break
			}
		}
		rep.CatchUp = time.Since(start)
		o.Logger.InfoContext(ctx, "soak: idle: measuring", slog.String("worker", w.Name), slog.Int("ended", n),
			slog.Bool("caught_up", rep.CaughtUp), slog.Duration("catch_up", rep.CatchUp))
	}
	prev := first
	for range o.Intervals {
		if err := sleep(ctx, o.SweepInterval); err != nil {
			return rep, err
		}
		s, err := sample()
		if err != nil {
			return rep, err
		}
		rep.MaxAttaches = max(rep.MaxAttaches, s.attaches-prev.attaches)
		rep.MaxManagement = max(rep.MaxManagement, s.mgmt-prev.mgmt)
		rep.MaxCredits = max(rep.MaxCredits, s.credits-prev.credits)
		prev = s
	}
	k := float64(o.Intervals)
	rep.Attaches = (prev.attaches - first.attaches) / k
	rep.Management = (prev.mgmt - first.mgmt) / k
	rep.Credits = (prev.credits - first.credits) / k
	rep.WorkerCalls = (prev.worker - first.worker) / k
	rep.SweepCalls = (prev.sweep - first.sweep) / k
	rep.ScaleCalls = (prev.scale - first.scale) / k
	for _, r := range replicas {
		if err := r.exitErr(); err != nil {
			return rep, fmt.Errorf("%s exited: %w", r.name, err)
		}
	}
	return rep, nil
}

type idleSample struct{ attaches, mgmt, credits, worker, sweep, scale float64 }

// linkCounter is the emulator's log handler: it counts the link attaches and $management
// requests the emulator logs (at debug level) and passes on what next takes.
type linkCounter struct {
	next                 slog.Handler
	attaches, management *atomic.Int64
}

func (h *linkCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *linkCounter) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "engine: attach":
		h.attaches.Add(1)
	case "engine: management":
		h.management.Add(1)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *linkCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &linkCounter{next: h.next.WithAttrs(as), attaches: h.attaches, management: h.management}
}

func (h *linkCounter) WithGroup(name string) slog.Handler {
	return &linkCounter{next: h.next.WithGroup(name), attaches: h.attaches, management: h.management}
}

// Budget is the idle budget: per sweep interval, at most the cost with no session
// ever handled + 20 (+ 1 % of the sessions changed in the interval: none while idle).
const Budget = 20

// WithinBudget reports whether r's link attaches and management requests per interval are
// within Budget of base's (the same worker with no session ever handled).
func WithinBudget(r, base IdleReport) bool {
	return r.Attaches <= base.Attaches+Budget && r.Management <= base.Management+Budget
}

// WriteIdleTable writes the idle reports, each row against its worker's baseline (0 ended).
func WriteIdleTable(w io.Writer, reports []IdleReport) error {
	base := map[string]IdleReport{}
	for _, r := range reports {
		if r.Ended == 0 {
			base[r.Store+"\x00"+r.Worker] = r
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tworker\tended sessions\tseeded in\tcatch-up\tattaches/interval (max)\tmanagement/interval (max)\tcredits/interval (max)\tworker-counted calls/interval: all, sweeper, scaling signal\twithin budget\t")
	for _, r := range reports {
		verdict := "baseline"
		if b, ok := base[r.Store+"\x00"+r.Worker]; ok && r.Ended != 0 {
			verdict = "no"
			if WithinBudget(r, b) {
				verdict = "yes"
			}
		}
		catchUp := "-"
		if r.Ended != 0 {
			catchUp = fmt.Sprintf("%.0fs", r.CatchUp.Seconds())
			if !r.CaughtUp {
				catchUp = fmt.Sprintf("not in %.0fs", r.CatchUp.Seconds())
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0fs\t%s\t%.1f (%.0f)\t%.1f (%.0f)\t%.1f (%.0f)\t%.1f, %.1f, %.1f\t%s\t\n", r.Store, r.Worker, strconv.Itoa(r.Ended),
			r.Seed.Seconds(), catchUp, r.Attaches, r.MaxAttaches, r.Management, r.MaxManagement, r.Credits, r.MaxCredits, r.WorkerCalls, r.SweepCalls, r.ScaleCalls, verdict)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("soak: write the idle table: %w", err)
	}
	return nil
}
