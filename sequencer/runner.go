package sequencer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Source  SessionSource
	Store   StateStore
	Handler Handler
	// Engine is the sequencing policy. With EarlyMessages unset, a Source that cannot defer
	// (CapableSource) gets EarlyStore, any other EarlyDefer.
	Engine EngineConfig
	// MaxConcurrentSessions bounds the sessions processed at once (default 8). A session frees
	// its slot once its last handler call returned (RunOptions.Released): its tail (settling,
	// the last save, the close) finishes while the next session is accepted, so up to twice as
	// many sessions may be locked for those few round trips.
	MaxConcurrentSessions int
	// AcceptTimeout bounds one AcceptNext wait (default 10s). A Wake interrupts a worker that
	// waits in AcceptNext, so that the woken session is served at once while a worker is free.
	AcceptTimeout time.Duration
	// ErrorBackoff is the pause after a failed accept (default 1s).
	ErrorBackoff time.Duration
	Clock        clock.Clock
	Logger       *slog.Logger
	Observer     Observer
}

// Runner processes many sessions at once, strictly one message at a time within a session.
type Runner struct {
	cfg    RunnerConfig
	engine *Engine
	log    *slog.Logger

	mu      sync.Mutex
	started bool
	wakes   []string
	waking  map[string]bool
	// waiting holds the cancel functions of the AcceptNext waits in progress: a Wake ends one.
	waiting map[*context.CancelCauseFunc]struct{}
	// retryWakes are the timers that wake a session this runner released until its next attempt
	// (EventReleasedRetry), by session id; a stop stops them.
	retryWakes map[string]clock.Timer

	softCtx    context.Context
	softCancel context.CancelFunc
	hardCtx    context.Context
	hardCancel context.CancelFunc
	wg         sync.WaitGroup
	done       chan struct{}
	active     atomic.Int64
	// slots holds a token for each session processed now (MaxConcurrentSessions). Twice as many
	// workers take turns at them: a worker whose session freed its slot (RunOptions.Released)
	// finishes the session's tail while another accepts the next one.
	slots chan struct{}
	// errorBackoff is the wait after a failure: ErrorBackoff, fixed.
	errorBackoff backoff.Policy
}

// NewRunner checks the configuration and returns a Runner that has not started.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Source == nil {
		return nil, errors.New("sequencer: RunnerConfig.Source is required")
	}
	cfg.MaxConcurrentSessions = cmp.Or(cfg.MaxConcurrentSessions, 8)
	cfg.AcceptTimeout = cmp.Or(cfg.AcceptTimeout, 10*time.Second)
	cfg.ErrorBackoff = cmp.Or(cfg.ErrorBackoff, time.Second)
	cfg.Clock = cmp.Or(cfg.Clock, clock.Real())
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConcurrentSessions < 1 || cfg.AcceptTimeout < 0 || cfg.ErrorBackoff < 0 {
		return nil, fmt.Errorf("sequencer: RunnerConfig: MaxConcurrentSessions %d must be positive, timeouts not negative",
			cfg.MaxConcurrentSessions)
	}
	if cs, ok := cfg.Source.(CapableSource); ok {
		caps := cs.Capabilities()
		if n := caps.CompletionsAtClose; n > 0 && cfg.Engine.ReplayWindow() < n {
			return nil, fmt.Errorf("sequencer: RunnerConfig: %T keeps up to %d completions of a session until the session closes, so a crash may hand %d messages over again, "+
				"more than the engine's replay window of %d: run it Pipelined with MaxPendingSettlements of at least %d", cfg.Source, n, n, cfg.Engine.ReplayWindow(), n-1)
		}
		if !caps.Deferral {
			switch cfg.Engine.EarlyMessages {
			case "":
				cfg.Engine.EarlyMessages = EarlyStore
			case EarlyDefer:
				return nil, fmt.Errorf("sequencer: RunnerConfig: EarlyMessages %s needs a provider that defers; %T cannot: use %s", EarlyDefer, cfg.Source, EarlyStore)
			}
		}
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, waking: map[string]bool{},
		waiting: map[*context.CancelCauseFunc]struct{}{}, retryWakes: map[string]clock.Timer{}, done: make(chan struct{}),
		errorBackoff: backoff.Policy{Base: cfg.ErrorBackoff, Max: cfg.ErrorBackoff}}
	e, err := NewEngine(cfg.Engine, EngineDeps{
		Store: cfg.Store, Handler: cfg.Handler, Clock: cfg.Clock, Logger: cfg.Logger,
		Observer: ObserverFunc(func(ev Event) {
			if ev.Kind == EventReleasedRetry {
				r.wakeAt(ev.SessionID, ev.At)
			}
			if cfg.Observer != nil {
				cfg.Observer.Observe(ev)
			}
		}),
	})
	if err != nil {
		return nil, err
	}
	r.engine = e
	return r, nil
}

// wakeAt wakes session id at the time its released retry is due: the runner that released it
// knows the time at once, where a sweeper learns it at its next sweep. The sweeper wakes the
// session as well, which covers a process gone by then; the second wake finds the session busy,
// or not due, and costs an accept.
func (r *Runner) wakeAt(id string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.softCtx != nil && r.softCtx.Err() != nil {
		return // stopping: the sweeper of a replica still running wakes it
	}
	if t, ok := r.retryWakes[id]; ok {
		t.Stop()
	}
	var t clock.Timer
	t = r.cfg.Clock.AfterFunc(max(at.Sub(r.cfg.Clock.Now()), 0), func() {
		r.mu.Lock()
		if r.retryWakes[id] == t {
			delete(r.retryWakes, id)
		}
		r.mu.Unlock()
		r.Wake(id)
	})
	r.retryWakes[id] = t
}

// stopRetryWakes stops the planned wakes (a stop).
func (r *Runner) stopRetryWakes() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, t := range r.retryWakes {
		t.Stop()
		delete(r.retryWakes, id)
	}
}

// Engine returns the runner's engine.
func (r *Runner) Engine() *Engine { return r.engine }

// Start starts the workers and returns. Canceling ctx cancels all work like StopAndCancel.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("sequencer: runner already started")
	}
	r.started = true
	r.hardCtx, r.hardCancel = context.WithCancel(ctx)
	r.softCtx, r.softCancel = context.WithCancel(r.hardCtx)
	r.slots = make(chan struct{}, r.cfg.MaxConcurrentSessions)
	for i := range 2 * r.cfg.MaxConcurrentSessions {
		r.wg.Go(func() { r.worker(i) })
	}
	go func() {
		r.wg.Wait()
		close(r.done)
	}()
	r.log.InfoContext(ctx, "sequencer: runner started", slog.Int("max_sessions", r.cfg.MaxConcurrentSessions))
	return nil
}

// Stopped is closed once every worker has returned after a stop.
func (r *Runner) Stopped() <-chan struct{} { return r.done }

// Stop stops gracefully: no new session is accepted, each session finishes the message in hand,
// saves, defers its early messages and is released. If ctx ends first (or Stop is called a second
// time) the remaining work is canceled; Stop then waits for the workers and returns ctx's error.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return nil
	}
	if r.softCtx.Err() != nil {
		r.hardCancel() // a second stop cancels
	}
	r.softCancel()
	r.mu.Unlock()
	r.stopRetryWakes()
	select {
	case <-r.done:
		r.hardCancel()
		return nil
	case <-ctx.Done():
	}
	r.log.WarnContext(ctx, "sequencer: graceful stop deadline passed, canceling sessions")
	r.hardCancel()
	<-r.done
	return fmt.Errorf("sequencer: runner stop: %w", ctx.Err())
}

// StopAndCancel cancels the work in hand (handlers see their ctx canceled; nothing more is
// settled) and waits for the workers until ctx ends.
func (r *Runner) StopAndCancel(ctx context.Context) error {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return nil
	}
	r.softCancel()
	r.hardCancel()
	r.mu.Unlock()
	r.stopRetryWakes()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sequencer: runner stop and cancel: %w", ctx.Err())
	}
}

// Wake queues a session to be accepted by id, for a sweeper that found a session the broker
// will not offer (State.DueDeferred). Queued ids are served before accept-next.
func (r *Runner) Wake(sessionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waking[sessionID] {
		return
	}
	r.waking[sessionID] = true
	r.wakes = append(r.wakes, sessionID)
	// A worker waiting for accept-next is free: end its wait so that it serves the wake now
	// rather than at the end of its AcceptTimeout.
	for cancel := range r.waiting {
		delete(r.waiting, cancel)
		(*cancel)(errWoken)
		break
	}
}

// errWoken ends an AcceptNext wait for a queued wake.
var errWoken = errors.New("sequencer: a session was woken")

// RunSessionByID accepts the named session and runs it now, on the caller's goroutine (it does
// not count against MaxConcurrentSessions). Operators resume parked sessions with it.
func (r *Runner) RunSessionByID(ctx context.Context, sessionID string, opts *RunOptions) (Outcome, error) {
	r.engine.stats.calls[CallAccept].Add(1)
	sent := r.cfg.Clock.Now()
	sess, err := r.cfg.Source.Accept(ctx, sessionID)
	if err != nil {
		return OutcomeFailed, fmt.Errorf("sequencer: accepting session %s: %w", sessionID, err)
	}
	r.active.Add(1)
	defer r.active.Add(-1)
	o := RunOptions{AcceptSent: sent}
	if opts != nil {
		o = *opts
		o.AcceptSent = sent
	}
	return r.engine.RunSession(ctx, sess, &o)
}

// Resume clears the parked mark of a session and runs it: with opts.Skip the dead-lettered
// message is skipped, otherwise the engine waits for its replay.
func (r *Runner) Resume(ctx context.Context, sessionID string, opts ResumeOptions) (Outcome, error) {
	return r.RunSessionByID(ctx, sessionID, &RunOptions{Resume: &opts})
}

// Stats returns the running totals, with ActiveSessions.
func (r *Runner) Stats() Stats {
	s := r.engine.Stats()
	s.ActiveSessions = int(r.active.Load())
	return s
}

func (r *Runner) nextWake() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.wakes) == 0 {
		return "", false
	}
	id := r.wakes[0]
	r.wakes = r.wakes[1:]
	delete(r.waking, id)
	return id, true
}

func (r *Runner) worker(n int) {
	log := r.log.With(slog.Int("worker", n))
	for r.softCtx.Err() == nil {
		select {
		case r.slots <- struct{}{}:
		case <-r.softCtx.Done():
			return
		}
		sent := r.cfg.Clock.Now()
		sess, woken, pause, err := r.accept()
		if err != nil {
			if pause && r.softCtx.Err() == nil {
				if !errors.Is(err, ErrNoSession) && !errors.Is(err, ErrSessionLocked) {
					log.WarnContext(r.softCtx, "sequencer: accepting a session", slog.Any("error", err))
				}
				r.pause()
			}
			<-r.slots
			continue
		}
		r.active.Add(1)
		freed := false
		free := func() { // on this goroutine: RunSession calls Released on its caller's
			if !freed {
				freed = true
				r.active.Add(-1)
				<-r.slots
			}
		}
		out, _ := r.engine.RunSession(r.hardCtx, sess, &RunOptions{Stop: r.softCtx, Woken: woken, AcceptSent: sent, Released: free}) // the engine logs errors
		log.DebugContext(r.softCtx, "sequencer: session released", slog.String("session_id", sess.ID()),
			slog.String("outcome", out.String()))
		if out == OutcomeFailed && !freed {
			// A store or broker failure: do not spin through sessions while it lasts.
			r.pause()
		}
		free()
	}
}

// pause waits ErrorBackoff after a failure, or until a stop.
func (r *Runner) pause() {
	_ = clock.Sleep(r.softCtx, r.cfg.Clock, r.errorBackoff.Delay(1))
}

// accept serves a queued wake (woken) or waits for the next session. pause says the worker
// should wait before trying again (an error, or a source that returned without waiting).
func (r *Runner) accept() (sess Session, woken, pause bool, err error) {
	r.engine.stats.calls[CallAccept].Add(1)
	if id, ok := r.nextWake(); ok {
		sess, err = r.cfg.Source.Accept(r.softCtx, id)
		return sess, true, err != nil && !errors.Is(err, ErrSessionLocked), err
	}
	ctx, cancel := context.WithCancelCause(r.softCtx)
	defer cancel(nil)
	r.mu.Lock()
	if len(r.wakes) > 0 {
		r.mu.Unlock()
		return nil, false, false, ErrNoSession // a wake came in meanwhile: serve it first
	}
	r.waiting[&cancel] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, &cancel)
		r.mu.Unlock()
	}()
	t := r.cfg.Clock.AfterFunc(r.cfg.AcceptTimeout, func() { cancel(nil) })
	defer t.Stop()
	sess, err = r.cfg.Source.AcceptNext(ctx)
	if err == nil {
		return sess, false, false, nil // even if woken meanwhile: the wake stays queued for the next accept
	}
	if ctx.Err() != nil {
		return nil, false, false, fmt.Errorf("%w: %w", ErrNoSession, err) // waited the full timeout, or woken
	}
	return nil, false, true, err
}
