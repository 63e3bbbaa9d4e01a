package sequencer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// Outcome says how RunSession left a session.
type Outcome int

const (
	// OutcomeIdle: nothing arrived within the idle timeout; the session was released with its
	// state kept (possibly waiting on a gap).
	OutcomeIdle Outcome = iota
	// OutcomeEnded: the last message was handled; the state was deleted or made a tombstone.
	OutcomeEnded
	// OutcomeParked: the session is parked by the poison policy and waits for an operator.
	OutcomeParked
	// OutcomeBlocked: a poison message was abandoned under PoisonBlock.
	OutcomeBlocked
	// OutcomeStopped: a graceful stop released the session.
	OutcomeStopped
	// OutcomeLockLost: the session lock was lost; nothing more was settled.
	OutcomeLockLost
	// OutcomeCanceled: ctx was canceled; the session was released without further settlement.
	OutcomeCanceled
	// OutcomeFailed: a store or broker call failed; the session was released unsettled.
	OutcomeFailed
	// OutcomeRetrying: the handler of the message for Next keeps failing and the wait before its
	// next attempt is spent with the session released (EngineConfig.RetryReleaseAfter); the
	// state says when the attempt is due (State.Retrying).
	OutcomeRetrying
	// OutcomeHeldFull: holding the early messages in hand would pass a bound of
	// EngineConfig.Held, or the store cannot keep one of them (ErrNotHoldable); the session was
	// released with them unsettled, and the broker keeps them.
	OutcomeHeldFull
)

var outcomeNames = [...]string{"idle", "ended", "parked", "blocked", "stopped", "lock_lost", "canceled", "failed", "retrying", "held_full"}

// String returns the snake_case name of the outcome, for logs and metrics labels.
func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// EngineDeps are the collaborators of an Engine.
type EngineDeps struct {
	Store   StateStore
	Handler Handler
	// Clock defaults to clock.Real().
	Clock clock.Clock
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Observer is optional.
	Observer Observer
}

// Engine runs the sequencing state machine over one locked session at a time; one Engine may run
// many sessions concurrently (each RunSession call is independent).
type Engine struct {
	cfg   EngineConfig
	store StateStore
	// sessionBound: the store's writes go through the session (SessionBoundStore); otherwise
	// the engine fences.
	sessionBound bool
	handler      Handler
	clock        clock.Clock
	log          *slog.Logger
	obs          Observer
	stats        statsCounters
	// strategy gives each run its value of the engine's settlement strategy.
	strategy func() strategy
	// keep is where early messages wait outside the window (EngineConfig.EarlyMessages).
	keep keeper
	// pipelined: Pipelined with MaxPendingSettlements > 1: a run goes on before
	// the broker has answered, within the lease.
	pipelined bool
	// workers run the background calls of every run (completions, saves, receives).
	workers *workers
}

// NewEngine checks cfg (after WithDefaults) and returns an Engine.
func NewEngine(cfg EngineConfig, deps EngineDeps) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Handler == nil {
		return nil, errors.New("sequencer: NewEngine needs a Store and a Handler")
	}
	e := &Engine{
		cfg:     cfg,
		store:   deps.Store,
		handler: deps.Handler,
		clock:   cmp.Or(deps.Clock, clock.Real()),
		log:     deps.Logger,
		obs:     deps.Observer,
		workers: newWorkers(),

		pipelined: cfg.Pipelining == Pipelined && cfg.MaxPendingSettlements > 1,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	held, _ := deps.Store.(HeldStore)
	if cfg.EarlyMessages == EarlyStore && held == nil {
		return nil, fmt.Errorf("sequencer: EarlyMessages %s needs a state store that holds messages (a HeldStore, such as the Postgres store); %T is not one", EarlyStore, deps.Store)
	}
	e.keep = keeperOf(cfg.EarlyMessages, held)
	atomic, _ := deps.Store.(AtomicStore)
	e.strategy = strategyOf(cfg.SaveEachMessage, e.pipelined, atomic)
	if sb, ok := deps.Store.(SessionBoundStore); ok {
		e.sessionBound = sb.WritesThroughSession()
	}
	return e, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() EngineConfig { return e.cfg }

// Stats returns the engine's running totals.
func (e *Engine) Stats() Stats { return e.stats.snapshot() }

// RunOptions are the per-call options of RunSession.
type RunOptions struct {
	// Stop, once done, asks for a graceful stop: the message in hand is finished and saved, early
	// messages are deferred and the session is released. Canceling RunSession's ctx instead
	// abandons the work in hand without settling anything more.
	Stop context.Context
	// Resume, when set, clears the session's parked mark before anything else.
	Resume *ResumeOptions
	// Woken says the session was accepted by id for a wake (a sweeper, a planned retry), not
	// offered by the broker: a session whose released retry is not due yet is then released at
	// once, without waiting in a receive (the broker offers it again should messages arrive).
	Woken bool
	// AcceptSent is when the call that locked the session (SessionSource.AcceptNext or Accept)
	// was sent, on the engine's clock; the Runner sets it. Its answer says the broker held the
	// lock for this run at a moment after it, as any answered call does, so a pipelined run's
	// lease (EngineConfig.PipelineLease) counts from it until a later call is answered. Zero: from
	// the run's first answered call (with a store of its own, a run's first entries then wait for
	// their completions until one is answered).
	AcceptSent time.Time
	// Released, when set, is called once, on the goroutine that called RunSession, when the run
	// has made its last handler call and what remains is settling, the last save and the close:
	// right after the handler call for the session's last message (before its save), or once the
	// run has nothing more to take, whatever the outcome. It is not called when the run failed
	// before, or when the broker had refused one of its settlements as busy by then: RunSession
	// returns without calling it. The Runner frees the session's slot then: the next session is
	// accepted while this one's tail finishes.
	Released func()
}

// ResumeOptions say how a parked session resumes.
type ResumeOptions struct {
	// Skip advances past the dead-lettered message. Without Skip the engine waits for the
	// message's sequence again: the operator replays the dead-lettered message.
	Skip bool
}

// RunSession processes the locked session until it ends, idles, parks, stops or fails, then
// releases it (Session.Close). It never returns without releasing the session.
func (e *Engine) RunSession(ctx context.Context, sess Session, opts *RunOptions) (Outcome, error) {
	e.stats.sessions.Add(1)
	if opts == nil {
		opts = &RunOptions{}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{
		e:   e,
		ctx: rctx,
		opts: runOptions{
			stop:      cmp.Or[context.Context](opts.Stop, context.Background()),
			resume:    opts.Resume,
			woken:     opts.Woken,
			onRelease: opts.Released,
		},
		w:   newWindow(),
		way: e.strategy(),
	}
	r.s.init(rctx, cancel, e, sess)
	if !opts.AcceptSent.IsZero() {
		r.s.noteAnswered(opts.AcceptSent)
	}
	var wg sync.WaitGroup
	wg.Go(r.renewLoop)
	out, err := r.run()
	r.dropNextBatch()
	r.way.wait()
	// A successful run has awaited its completions already (release, end); after a failure
	// the ones still in flight finish (or fail) before the session is closed.
	if perr := r.s.await(); perr != nil && err == nil {
		out, err = r.failed(perr)
	} else if perr != nil && !errors.Is(err, perr) {
		err = errors.Join(err, perr) // the background failure is often the cause of err
	}
	if out == OutcomeFailed && r.s.lost.Load() {
		out = OutcomeLockLost
	}
	cancel(nil)
	wg.Wait()
	// Close is not a settlement: it hands unsettled messages back to the broker. Use a context
	// that survives the cancellation of ctx.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ccancel()
	e.stats.calls[CallClose].Add(1)
	if cerr := sess.Close(cctx); cerr != nil && out != OutcomeLockLost && out != OutcomeCanceled && out != OutcomeFailed {
		e.log.WarnContext(ctx, "sequencer: closing session", slog.String("session_id", r.s.id), slog.Any("error", cerr))
	}
	e.observe(Event{Kind: EventSessionReleased, SessionID: r.s.id})
	if err != nil && out != OutcomeCanceled {
		e.log.WarnContext(ctx, "sequencer: session released after an error", slog.String("session_id", r.s.id),
			slog.String("outcome", out.String()), slog.Any("error", err))
	}
	return out, err
}

func (e *Engine) observe(ev Event) {
	if e.obs != nil {
		e.obs.Observe(ev)
	}
}
