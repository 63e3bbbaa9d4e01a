package sequencer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
)

var outcomeNames = [...]string{"idle", "ended", "parked", "blocked", "stopped", "lock_lost", "canceled", "failed"}

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
	// Clock defaults to SystemClock.
	Clock Clock
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Observer is optional.
	Observer Observer
}

// Engine runs the sequencing state machine over one locked session at a time; one Engine may run
// many sessions concurrently (each RunSession call is independent).
type Engine struct {
	cfg     EngineConfig
	store   StateStore
	atomic  AtomicStore
	handler Handler
	clock   Clock
	log     *slog.Logger
	obs     Observer
	stats   statsCounters
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
		clock:   cmp.Or[Clock](deps.Clock, SystemClock{}),
		log:     deps.Logger,
		obs:     deps.Observer,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if a, ok := deps.Store.(AtomicStore); ok {
		e.atomic = a
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
		e:         e,
		ctx:       rctx,
		cancel:    cancel,
		stop:      cmp.Or[context.Context](opts.Stop, context.Background()),
		resume:    opts.Resume,
		sess:      sess,
		id:        sess.ID(),
		held:      map[int64]*Message{},
		fetched:   map[int64]*Message{},
		missing:   map[int64]bool{},
		completed: map[int64]int64{},
	}
	if n := e.cfg.MaxPendingSettlements; n > 1 {
		r.pipe = newPipeline(n)
	}
	var wg sync.WaitGroup
	wg.Go(r.renewLoop)
	out, err := r.run()
	// A successful run has awaited its completions already (release, finish); after a failure
	// the ones still in flight finish (or fail) before the session is closed.
	if perr := r.awaitSettlements(); perr != nil && err == nil {
		out, err = r.failed(perr)
	} else if perr != nil && !errors.Is(err, perr) {
		err = errors.Join(err, perr) // the background failure is often the cause of err
	}
	if out == OutcomeFailed && r.lost.Load() {
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
		e.log.WarnContext(ctx, "sequencer: closing session", slog.String("session_id", r.id), slog.Any("error", cerr))
	}
	e.observe(Event{Kind: EventSessionReleased, SessionID: r.id})
	if err != nil && out != OutcomeCanceled {
		e.log.WarnContext(ctx, "sequencer: session released after an error", slog.String("session_id", r.id),
			slog.String("outcome", out.String()), slog.Any("error", err))
	}
	return out, err
}

func (e *Engine) observe(ev Event) {
	if e.obs != nil {
		e.obs.Observe(ev)
	}
}

// run is the state of one RunSession call. Only the renewal goroutine and the background
// completions (pipe) touch lost/cancel/stats concurrently; everything else belongs to the
// RunSession goroutine.
type run struct {
	e      *Engine
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   context.Context
	resume *ResumeOptions
	sess   Session
	id     string
	lost   atomic.Bool
	// pipe runs the completions of handled messages in the background (nil: no pipelining).
	pipe *pipeline
	// inherited: st.InFlight was left by an earlier run and is not resolved yet, so st.Next is
	// only a lower bound. Saves keep such a record; saves of this run's own record clear it.
	inherited bool
	// upcoming is the rest of the receive batch in hand, looked at when a run is recorded.
	upcoming []*Message
	// While inherited: presentFrom is the lowest entry delivered again (0: none yet),
	// lastDelivered the highest broker sequence number delivered by Receive.
	presentFrom, lastDelivered int64

	st  *State
	ver int64
	// dirty: st has changes (counters, Last, GapSince) not yet saved.
	dirty bool
	// held is the reorder window: early messages kept unsettled in memory.
	held      map[int64]*Message
	heldBytes int
	// fetched holds deferred messages received by sequence number and not yet processed.
	fetched map[int64]*Message
	// missing marks deferred entries the broker did not return.
	missing map[int64]bool
	// completed maps the application sequence of settled messages still in st.Deferred to their
	// broker sequence; the next save removes those entries.
	completed map[int64]int64
	// anchors are handled active messages whose completion waits until no handled-but-due
	// deferred work depends on them to wake the session.
	anchors []anchor
	// pendingGap is a resolved gap wait to report once saved.
	pendingGap time.Duration

	parkedNow, blocked bool
	// endedHere: the last message was handled in this run.
	endedHere bool
}

func (r *run) now() time.Time { return r.e.clock.Now() }

func (r *run) log() *slog.Logger { return r.e.log.With(slog.String("session_id", r.id)) }

func (r *run) run() (Outcome, error) {
	if err := r.load(); err != nil {
		return r.failed(err)
	}
	if err := r.startup(); err != nil {
		return r.failed(err)
	}
	if err := r.advance(); err != nil {
		return r.failed(err)
	}
	for {
		if r.ctx.Err() != nil {
			return r.failed(context.Cause(r.ctx))
		}
		if out, done := r.terminal(); done {
			return r.release(out)
		}
		if r.stop.Err() != nil {
			return r.release(OutcomeStopped)
		}
		msgs, err := r.receive()
		if err != nil {
			return r.failed(err)
		}
		if r.ctx.Err() != nil {
			return r.failed(context.Cause(r.ctx))
		}
		if len(msgs) == 0 {
			if r.stop.Err() != nil {
				return r.release(OutcomeStopped)
			}
			if r.inherited {
				// Nothing more is at the broker: the entries of the inherited run not seen are gone.
				if err := r.resolveInFlight(nil); err != nil {
					return r.failed(err)
				}
				if err := r.advance(); err != nil {
					return r.failed(err)
				}
				continue
			}
			if r.gapExpired() {
				if err := r.skipGap(); err != nil {
					return r.failed(err)
				}
				if err := r.advance(); err != nil {
					return r.failed(err)
				}
				continue
			}
			if r.gapWaiting() && r.st.GapSince.IsZero() {
				r.st.GapSince, r.dirty = r.now(), true
			}
			if r.st.Parked != nil {
				return r.release(OutcomeParked)
			}
			return r.release(OutcomeIdle)
		}
		for i, m := range msgs {
			if r.blocked || r.stop.Err() != nil {
				break // the rest returns to the broker unsettled on Close
			}
			r.upcoming = msgs[i+1:]
			if err := r.resolveInFlight(m); err != nil {
				return r.failed(err)
			}
			if err := r.process(m, false); err != nil {
				return r.failed(err)
			}
			if err := r.advance(); err != nil {
				return r.failed(err)
			}
		}
		r.upcoming = nil
		if err := r.trimWindow(r.windowLimit()); err != nil {
			return r.failed(err)
		}
		if r.gapExpired() { // a busy session waiting on a gap
			if err := r.skipGap(); err != nil {
				return r.failed(err)
			}
			if err := r.advance(); err != nil {
				return r.failed(err)
			}
		}
	}
}

func (r *run) terminal() (Outcome, bool) {
	switch {
	case r.blocked:
		return OutcomeBlocked, true
	case r.parkedNow:
		return OutcomeParked, true
	case !r.st.EndedAt.IsZero() && len(r.held) == 0 && r.endedHere:
		return OutcomeEnded, true
	}
	return 0, false
}

func (r *run) failed(err error) (Outcome, error) {
	switch {
	case r.lost.Load() || errors.Is(err, ErrLockLost) || errors.Is(context.Cause(r.ctx), ErrLockLost):
		return OutcomeLockLost, err
	case r.ctx.Err() != nil:
		return OutcomeCanceled, err
	}
	return OutcomeFailed, err
}

func (r *run) windowLimit() int {
	if r.st.Parked != nil {
		return 0
	}
	return r.e.cfg.windowMessages()
}

// anchor is a handled (or skipped) active message whose settlement waits for the drain.
type anchor struct {
	m *Message
	// deadLetter, when set, is the description of a HandlerFailed dead-lettering (PoisonSkip);
	// otherwise the anchor is completed.
	deadLetter string
}

// ---- state store ----

func (r *run) load() error {
	r.e.stats.storeCalls.Add(1)
	st, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.sess})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: loading state: %w", r.id, err)
	}
	if st == nil {
		st = NewState()
	}
	if st.Deferred == nil {
		st.Deferred = map[int64]int64{}
	}
	r.st, r.ver = st, ver
	r.inherited = len(st.InFlight) > 0
	return nil
}

// save stores r.st, dropping deferred entries of messages already settled. Next is exact in
// memory, so the run's own in-flight record is dropped; an inherited one is kept until resolved.
func (r *run) save() error {
	if !r.inherited {
		r.st.InFlight = nil
	}
	return r.store()
}

// store writes r.st as it is.
func (r *run) store() error {
	pruneSettled(r.st, r.completed)
	clear(r.completed)
	r.st.UpdatedAt = r.now()
	r.e.stats.storeCalls.Add(1)
	ver, err := r.e.store.Save(r.ctx, SaveParams{Session: r.sess, State: r.st, ExpectedVersion: r.ver})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: saving state (next %d): %w", r.id, r.st.Next, err)
	}
	r.ver, r.dirty = ver, false
	r.flushGap()
	return nil
}

// pruneSettled removes the index entries of settled messages.
func pruneSettled(st *State, settled map[int64]int64) {
	for k, bs := range settled {
		if st.Deferred[k] == bs {
			delete(st.Deferred, k)
		}
		if st.SkippedPoison[k] == bs {
			delete(st.SkippedPoison, k)
		}
	}
}

func (r *run) flushGap() {
	if r.pendingGap > 0 {
		r.e.stats.gapWait.Add(int64(r.pendingGap))
		r.e.observe(Event{Kind: EventGapResolved, SessionID: r.id, Sequence: r.st.Next, Duration: r.pendingGap})
		r.pendingGap = 0
	}
}

func (r *run) deleteState() error {
	r.e.stats.storeCalls.Add(1)
	if err := r.e.store.Delete(r.ctx, DeleteParams{Session: r.sess, ExpectedVersion: r.ver}); err != nil {
		return fmt.Errorf("sequencer: session %s: deleting state: %w", r.id, err)
	}
	r.ver, r.dirty = 0, false
	return nil
}

// ---- broker calls ----

func (r *run) sessErr(kind CallKind, err error) error {
	if errors.Is(err, ErrLockLost) {
		r.markLost()
	}
	return fmt.Errorf("sequencer: session %s: %s: %w", r.id, kind, err)
}

func (r *run) markLost() {
	if r.lost.CompareAndSwap(false, true) {
		r.cancel(ErrLockLost)
		r.e.observe(Event{Kind: EventLockLost, SessionID: r.id})
	}
}

// settle waits for the background completions, then runs one settlement.
func (r *run) settle(kind CallKind, m *Message, fn func(context.Context, *Message) error) error {
	if err := r.awaitSettlements(); err != nil {
		return err
	}
	return r.settleNow(kind, m, fn)
}

// settleNow runs one settlement; background completions call it concurrently with the run.
func (r *run) settleNow(kind CallKind, m *Message, fn func(context.Context, *Message) error) error {
	if r.lost.Load() {
		return r.sessErr(kind, ErrLockLost)
	}
	r.e.stats.calls[kind].Add(1)
	if err := fn(r.ctx, m); err != nil {
		return r.sessErr(kind, err)
	}
	return nil
}

func (r *run) complete(m *Message) error { return r.settle(CallComplete, m, r.sess.Complete) }

func (r *run) deadLetter(m *Message, reason, desc string) error {
	return r.settle(CallDeadLetter, m, func(ctx context.Context, m *Message) error {
		return r.sess.DeadLetter(ctx, m, DeadLetterParams{Reason: reason, Description: desc})
	})
}

func (r *run) receive() ([]*Message, error) {
	rctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	idle := r.e.clock.AfterFunc(r.e.cfg.IdleTimeout, cancel)
	defer idle.Stop()
	stopWatch := context.AfterFunc(r.stop, cancel)
	defer stopWatch()
	r.e.stats.calls[CallReceive].Add(1)
	msgs, err := r.sess.Receive(rctx, r.e.cfg.ReceiveBatch)
	if err != nil {
		if rctx.Err() != nil && r.ctx.Err() == nil && !errors.Is(err, ErrLockLost) {
			return msgs, nil // the idle timer or a stop ended the receive
		}
		return nil, r.sessErr(CallReceive, err)
	}
	return msgs, nil
}

func (r *run) receiveDeferred(bss []int64) ([]*Message, error) {
	if r.lost.Load() {
		return nil, r.sessErr(CallReceiveDeferred, ErrLockLost)
	}
	r.e.stats.calls[CallReceiveDeferred].Add(1)
	msgs, err := r.sess.ReceiveDeferred(r.ctx, bss)
	if err != nil {
		return nil, r.sessErr(CallReceiveDeferred, err)
	}
	return msgs, nil
}

func (r *run) renewLoop() {
	cfg := r.e.cfg
	for {
		d := cfg.LockRenewInterval
		if d == 0 {
			if until := r.sess.LockedUntil(); until.IsZero() {
				d = 10 * time.Second // the session does not know its expiry
			} else {
				d = max(until.Sub(r.now())/2, 100*time.Millisecond)
			}
		}
		t := r.e.clock.NewTimer(d)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		r.e.stats.calls[CallRenewLock].Add(1)
		if _, err := r.sess.RenewLock(r.ctx); err != nil {
			if errors.Is(err, ErrLockLost) {
				r.markLost()
				return
			}
			if r.ctx.Err() != nil {
				return
			}
			r.log().WarnContext(r.ctx, "sequencer: renewing session lock", slog.Any("error", err))
		}
	}
}

// ---- classification ----

// process decides what to do with one message, active or (fromDeferred) received by sequence
// number. The decision is derived from the stored state and the message alone.
func (r *run) process(m *Message, fromDeferred bool) error {
	seq, last, desc := r.e.parse(m)
	m.Sequence, m.IsLast = seq, last
	st := r.st
	prop := r.e.cfg.SequenceProperty
	switch {
	case desc != "":
		return r.invalid(m, desc)
	case seq < st.Next:
		if bs, ok := st.SkippedPoison[seq]; ok && bs == m.BrokerSequence {
			// Skipped as poison, but the dead-lettering did not happen before a crash.
			return r.deadLetterSkipped(m, "handler failed; dead-lettered after a restart")
		}
		return r.duplicate(m)
	case st.Last != 0 && seq > st.Last:
		return r.invalid(m, fmt.Sprintf("application property %q = %d is after the last sequence %d", prop, seq, st.Last))
	case last && st.Last != 0 && st.Last != seq:
		return r.invalid(m, fmt.Sprintf("application property %q = %d is marked last but %d already was", prop, seq, st.Last))
	case seq-st.Next > r.e.cfg.MaxGap:
		return r.invalid(m, fmt.Sprintf("application property %q = %d is %d ahead of the next expected sequence %d (max gap %d)",
			prop, seq, seq-st.Next, st.Next, r.e.cfg.MaxGap))
	}
	if h, ok := r.held[seq]; ok && h.BrokerSequence != m.BrokerSequence {
		return r.duplicate(m)
	}
	if f, ok := r.fetched[seq]; ok && f.BrokerSequence != m.BrokerSequence {
		return r.duplicate(m)
	}
	if p := st.Parked; p != nil && seq == p.Sequence && m.BrokerSequence == p.BrokerSequence {
		// Parked, but the dead-lettering did not happen before a crash: finish it.
		return r.deadLetterParked(m)
	}
	if bs, ok := st.Deferred[seq]; ok && bs != m.BrokerSequence {
		// Another copy is deferred. Only if the broker no longer has it does this copy count.
		if !(seq == st.Next && r.missing[seq]) {
			return r.duplicate(m)
		}
	}
	if last && st.Last == 0 {
		st.Last, r.dirty = seq, true
		if err := r.dropHeldBeyondLast(); err != nil {
			return err
		}
	}
	if seq == st.Next && st.Parked == nil && !r.awaitsRecord(m) {
		return r.handle(m, fromDeferred)
	}
	r.hold(m)
	return nil
}

func (r *run) duplicate(m *Message) error {
	r.st.Counters.Duplicates++
	r.dirty = true
	r.e.stats.duplicates.Add(1)
	r.e.observe(Event{Kind: EventDuplicate, SessionID: r.id, Sequence: m.Sequence})
	if bs, ok := r.st.Deferred[m.Sequence]; !ok || bs != m.BrokerSequence {
		// Nothing in the stored index waits for this completion.
		return r.completeLater(m)
	}
	if err := r.complete(m); err != nil {
		return err
	}
	r.noteSettled(m)
	return nil
}

func (r *run) invalid(m *Message, desc string) error {
	r.st.Counters.Invalid++
	r.st.Counters.DeadLettered++
	r.dirty = true
	r.e.stats.invalid.Add(1)
	r.e.stats.deadLettered.Add(1)
	r.e.observe(Event{Kind: EventInvalid, SessionID: r.id, Sequence: m.Sequence})
	if err := r.deadLetter(m, ReasonInvalidSequence, desc); err != nil {
		return err
	}
	r.noteSettled(m)
	return nil
}

// noteSettled records that m, if it has an entry in the deferred index, is gone from the broker.
func (r *run) noteSettled(m *Message) {
	if bs, ok := r.st.Deferred[m.Sequence]; ok && bs == m.BrokerSequence && m.Sequence != 0 {
		r.completed[m.Sequence] = bs
	}
}

func (r *run) dropHeldBeyondLast() error {
	for _, k := range slices.Sorted(maps.Keys(r.held)) {
		if k > r.st.Last {
			m := r.unhold(k)
			if err := r.process(m, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- reorder window and deferral ----

func (r *run) hold(m *Message) {
	r.held[m.Sequence] = m
	r.heldBytes += len(m.Body)
	r.e.stats.held.Add(1)
	r.e.observe(Event{Kind: EventHeld, SessionID: r.id, Sequence: m.Sequence})
	if r.st.GapSince.IsZero() {
		r.st.GapSince, r.dirty = r.now(), true
	}
}

func (r *run) unhold(seq int64) *Message {
	m := r.held[seq]
	delete(r.held, seq)
	r.heldBytes -= len(m.Body)
	return m
}

// trimWindow defers the held messages furthest ahead until at most limit messages and
// WindowBytes remain: one state save records them all, then each is deferred.
func (r *run) trimWindow(limit int) error {
	// While an inherited run record is unresolved, the real Next may be among the held messages
	// and every entry may be gone: one held message stays active, so that the broker offers the
	// session again if this run ends before the record is resolved (it acts as an anchor).
	floor := 0
	if r.inherited {
		floor = 1
	}
	limit = max(limit, floor)
	if len(r.held) <= limit && (r.heldBytes <= r.e.cfg.WindowBytes || len(r.held) <= floor) {
		return nil
	}
	keys := slices.Sorted(maps.Keys(r.held))
	var evict []*Message
	for i := len(keys) - 1; i >= 0 && (len(r.held) > limit || (r.heldBytes > r.e.cfg.WindowBytes && len(r.held) > floor)); i-- {
		if m := r.held[keys[i]]; r.recorded(m) || (m.Sequence == r.st.Next && r.st.Parked == nil) {
			// The message for Next is held only when a stop cut the drain short: it stays active,
			// so that the broker offers the session again (deferred, it would strand the session
			// until a sweeper came by).
			continue
		}
		evict = append(evict, r.unhold(keys[i]))
	}
	if len(evict) == 0 {
		return nil
	}
	for _, m := range evict {
		if r.st.Deferred[m.Sequence] != m.BrokerSequence {
			r.st.Deferred[m.Sequence] = m.BrokerSequence
			r.st.Counters.Deferred++
		}
		delete(r.missing, m.Sequence)
	}
	// Record first, defer second: a crash in between leaves an entry whose message is still
	// active; it is redelivered and recognised by its broker sequence number.
	if err := r.save(); err != nil {
		return err
	}
	for _, m := range slices.Backward(evict) {
		if err := r.settle(CallDefer, m, r.sess.Defer); err != nil {
			return err
		}
		r.e.stats.deferred.Add(1)
		r.e.observe(Event{Kind: EventDeferred, SessionID: r.id, Sequence: m.Sequence})
	}
	return nil
}

// ---- in-order handling ----

type poisonError struct{ err error }

func (p *poisonError) Error() string { return p.err.Error() }
func (p *poisonError) Unwrap() error { return p.err }

type handlerError struct{ err error }

func (h *handlerError) Error() string { return h.err.Error() }
func (h *handlerError) Unwrap() error { return h.err }

// handle runs the handler for the in-order message m, then saves, then settles:
// handler → save → complete. The stored state, not the settlement, says m was handled. An entry
// of a recorded run goes handler → complete instead (handleInRun): there the run's record and
// the broker's copy of m say whether m was handled.
func (r *run) handle(m *Message, fromDeferred bool) error {
	if err := r.pipelineErr(); err != nil {
		return err // a background completion failed: hand nothing more to the handler
	}
	if ok, err := r.inRun(m, fromDeferred); err != nil {
		return err
	} else if ok {
		return r.handleInRun(m)
	}
	err := r.handleWithRetry(m, true)
	var perr *poisonError
	if errors.As(err, &perr) {
		return r.poison(m, perr.err)
	}
	if err != nil {
		return err
	}
	r.e.stats.handled.Add(1)
	r.e.observe(Event{Kind: EventHandled, SessionID: r.id, Sequence: m.Sequence})
	if bs, ok := r.st.Deferred[m.Sequence]; (ok && bs == m.BrokerSequence) || fromDeferred {
		// A deferred message: the index entry stays until it is completed, so that a crash
		// in between leaves something the next run (or a sweeper) finds.
		if err := r.complete(m); err != nil {
			return err
		}
		r.noteSettled(m)
	} else if r.needsAnchor() {
		r.anchors = append(r.anchors, anchor{m: m})
	} else if err := r.completeLater(m); err != nil {
		return err
	}
	if !r.st.EndedAt.IsZero() {
		return r.finish()
	}
	return nil
}

// advanceState applies the handling of m to st.
func (r *run) advanceState(st *State, m *Message) {
	now := r.now()
	st.Next = m.Sequence + 1
	st.Counters.Handled++
	if bs, ok := st.Deferred[m.Sequence]; ok && bs != m.BrokerSequence {
		delete(st.Deferred, m.Sequence) // the deferred copy is gone (missing); this one replaced it
	}
	if st.Last == m.Sequence {
		st.EndedAt = now
	}
	if !st.GapSince.IsZero() {
		r.pendingGap = max(now.Sub(st.GapSince), 1)
		st.GapSince = time.Time{}
	}
}

func (r *run) handleWithRetry(m *Message, save bool) error {
	cfg := r.e.cfg
	for attempt := 1; ; attempt++ {
		err := r.handleOnce(m, save)
		var herr *handlerError
		if !errors.As(err, &herr) {
			return err // nil, or a store failure
		}
		if r.ctx.Err() != nil {
			return fmt.Errorf("sequencer: session %s: handler stopped: %w", r.id, context.Cause(r.ctx))
		}
		if attempt >= cfg.Retry.Attempts {
			return &poisonError{err: herr.err}
		}
		r.st.Counters.Retries++
		r.dirty = true
		r.e.stats.retries.Add(1)
		r.e.observe(Event{Kind: EventRetry, SessionID: r.id, Sequence: m.Sequence, Err: herr.err})
		if d := cfg.Retry.Backoff(attempt); d > 0 {
			t := r.e.clock.NewTimer(d)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return fmt.Errorf("sequencer: session %s: retry wait: %w", r.id, context.Cause(r.ctx))
			case <-t.C():
			}
			if err := r.verifyTenure(); err != nil {
				return err
			}
		}
	}
}

// verifyTenure re-reads the stored version after a retry wait, in which the engine made no call
// that would have shown a lost session lock: if another holder wrote the state meanwhile (the
// lock was lost and then taken again behind the engine's back, see the package documentation),
// the engine stops before it hands the message over again.
func (r *run) verifyTenure() error {
	r.e.stats.storeCalls.Add(1)
	_, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.sess})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: checking the state after a retry wait: %w", r.id, err)
	}
	if ver != r.ver {
		return fmt.Errorf("sequencer: session %s: the stored state changed during a retry wait (version %d, this run's %d): %w",
			r.id, ver, r.ver, ErrVersionConflict)
	}
	return nil
}

// handleOnce calls the handler once and, on success, advances the state and saves it (unless
// save is false: m is an entry of the recorded run). Handler errors come back as *handlerError.
func (r *run) handleOnce(m *Message, save bool) error {
	if r.e.atomic == nil {
		if err := r.callHandler(r.ctx, m); err != nil {
			return err
		}
		r.advanceState(r.st, m)
		if !save {
			r.dirty = true
			return nil
		}
		return r.save()
	}
	next := r.st.clone()
	if !r.inherited {
		next.InFlight = nil
	}
	pruneSettled(next, r.completed)
	r.advanceState(next, m)
	next.UpdatedAt = r.now()
	r.e.stats.storeCalls.Add(1)
	ver, err := r.e.atomic.SaveWith(r.ctx, SaveParams{Session: r.sess, State: next, ExpectedVersion: r.ver},
		func(ctx context.Context) error { return r.callHandler(ctx, m) })
	if err != nil {
		r.pendingGap = 0
		var herr *handlerError
		if errors.As(err, &herr) {
			return herr
		}
		return fmt.Errorf("sequencer: session %s: saving state with handler (next %d): %w", r.id, next.Next, err)
	}
	clear(r.completed)
	r.st, r.ver, r.dirty = next, ver, false
	r.flushGap()
	return nil
}

func (r *run) callHandler(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log().ErrorContext(ctx, "sequencer: handler panicked", slog.Int64("sequence", m.Sequence),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = &handlerError{err: fmt.Errorf("handler panic: %v", p)}
		}
	}()
	if err := r.e.handler.Handle(ctx, m); err != nil {
		return &handlerError{err: err}
	}
	return nil
}

// needsAnchor reports whether a handled active message must stay unsettled because the message
// for Next is deferred: until it is handled, the active message is what makes the broker offer
// the session again after a crash.
func (r *run) needsAnchor() bool {
	_, due := r.st.Deferred[r.st.Next]
	return due && !r.missing[r.st.Next] && r.st.Parked == nil
}

func (r *run) poison(m *Message, herr error) error {
	r.log().WarnContext(r.ctx, "sequencer: handler failed, retries exhausted", slog.Int64("sequence", m.Sequence),
		slog.String("policy", string(r.e.cfg.Poison)), slog.Any("error", herr))
	r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Sequence: m.Sequence, Err: herr})
	switch r.e.cfg.Poison {
	case PoisonBlock:
		r.blocked = true
		return r.settle(CallAbandon, m, r.sess.Abandon)
	case PoisonSkip:
		// Save the skip together with a marker, then dead-letter: a crash in between leaves the
		// marker, and the redelivered message is dead-lettered instead of completed.
		st := r.st
		st.Next = m.Sequence + 1
		st.Counters.Skipped++
		st.Counters.DeadLettered++
		if st.SkippedPoison == nil {
			st.SkippedPoison = map[int64]int64{}
		}
		st.SkippedPoison[m.Sequence] = m.BrokerSequence
		if st.Last == m.Sequence {
			st.EndedAt = r.now()
		}
		if err := r.save(); err != nil {
			return err
		}
		r.e.stats.skipped.Add(1)
		if st.Deferred[m.Sequence] != m.BrokerSequence && r.needsAnchor() {
			// Like a handled message, the skipped one wakes the session if the drain is cut short.
			r.anchors = append(r.anchors, anchor{m: m, deadLetter: herr.Error()})
		} else if err := r.deadLetterSkipped(m, herr.Error()); err != nil {
			return err
		}
		if !st.EndedAt.IsZero() {
			return r.finish()
		}
		return nil
	default: // PoisonPark
		r.st.Parked = &Parked{Sequence: m.Sequence, BrokerSequence: m.BrokerSequence, Reason: herr.Error(), At: r.now()}
		r.st.Counters.DeadLettered++
		// Save first: a crash before the dead-lettering finds the parked mark and finishes it.
		if err := r.save(); err != nil {
			return err
		}
		r.e.stats.parked.Add(1)
		r.parkedNow = true
		r.e.observe(Event{Kind: EventParked, SessionID: r.id, Sequence: m.Sequence, Err: herr})
		return r.deadLetterParked(m)
	}
}

func (r *run) deadLetterSkipped(m *Message, desc string) error {
	if err := r.deadLetter(m, ReasonHandlerFailed, desc); err != nil {
		return err
	}
	r.e.stats.deadLettered.Add(1)
	r.noteSettled(m)
	r.completed[m.Sequence] = m.BrokerSequence
	return nil
}

func (r *run) deadLetterParked(m *Message) error {
	p := r.st.Parked
	if err := r.deadLetter(m, ReasonHandlerFailed, p.Reason); err != nil {
		return err
	}
	r.e.stats.deadLettered.Add(1)
	if r.st.Deferred[m.Sequence] == m.BrokerSequence {
		delete(r.st.Deferred, m.Sequence)
		r.dirty = true
	}
	return nil
}

// ---- drain ----

// advance handles everything that is now in order: from the window first, then deferred
// messages fetched by broker sequence number, one call per consecutive run.
func (r *run) advance() error {
	// A stop ends the drain after the message in hand; the anchors then stay unsettled and wake
	// the session later.
	for r.st.Parked == nil && r.st.EndedAt.IsZero() && !r.blocked && r.stop.Err() == nil {
		next := r.st.Next
		if h, ok := r.held[next]; ok && !r.awaitsRecord(h) {
			if err := r.process(r.unhold(next), false); err != nil {
				return err
			}
			continue
		}
		if m, ok := r.fetched[next]; ok {
			delete(r.fetched, next)
			if err := r.process(m, true); err != nil {
				return err
			}
			continue
		}
		if _, ok := r.st.Deferred[next]; !ok || r.missing[next] {
			break
		}
		if err := r.fetchRun(next); err != nil {
			return err
		}
	}
	if r.st.GapSince.IsZero() && r.gapWaiting() {
		r.st.GapSince, r.dirty = r.now(), true
	}
	return r.settleDrain()
}

// fetchRun receives the deferred messages for the consecutive run of sequences starting at from.
func (r *run) fetchRun(from int64) error {
	var bss []int64
	bySeqNo := map[int64]int64{}
	for k := from; len(bss) < r.e.cfg.DeferredBatch; k++ {
		bs, ok := r.st.Deferred[k]
		if !ok || r.missing[k] || r.held[k] != nil || r.fetched[k] != nil {
			break
		}
		bss = append(bss, bs)
		bySeqNo[bs] = k
	}
	msgs, err := r.receiveDeferred(bss)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if k, ok := bySeqNo[m.BrokerSequence]; ok {
			r.fetched[k] = m
			delete(bySeqNo, m.BrokerSequence)
		}
	}
	for _, k := range bySeqNo {
		r.missing[k] = true
	}
	return nil
}

// settleDrain makes the drain durable (removes settled entries from the stored index), then
// completes the anchors that no longer need to wait.
func (r *run) settleDrain() error {
	if len(r.completed) > 0 {
		if err := r.save(); err != nil {
			return err
		}
	}
	if len(r.anchors) == 0 || r.needsAnchor() {
		return nil
	}
	if r.dirty {
		if err := r.save(); err != nil {
			return err
		}
	}
	for len(r.anchors) > 0 {
		a := r.anchors[0]
		if a.deadLetter != "" {
			if err := r.deadLetterSkipped(a.m, a.deadLetter); err != nil {
				return err
			}
		} else if err := r.complete(a.m); err != nil {
			return err
		}
		r.anchors = r.anchors[1:]
	}
	return nil
}

// ---- session start ----

func (r *run) startup() error {
	st := r.st
	now := r.now()
	if st.TombstoneExpired(now, r.e.cfg.tombstoneTTL()) && len(st.Deferred) == 0 && len(st.SkippedPoison) == 0 {
		if err := r.deleteState(); err != nil {
			return err
		}
		r.st = NewState()
		return nil
	}
	if err := r.finishParking(); err != nil {
		return err
	}
	if r.resume != nil && st.Parked != nil {
		r.log().InfoContext(r.ctx, "sequencer: resuming parked session", slog.Int64("sequence", st.Parked.Sequence),
			slog.Bool("skip", r.resume.Skip))
		st.Unpark(r.resume.Skip, now)
		if r.resume.Skip {
			r.e.stats.skipped.Add(1)
		}
		if err := r.save(); err != nil {
			return err
		}
		if !st.EndedAt.IsZero() {
			return r.finish()
		}
	}
	if err := r.settleStale(); err != nil {
		return err
	}
	if r.gapExpired() {
		return r.skipGap()
	}
	return nil
}

// finishParking dead-letters a parked message that is still deferred at the broker (a crash
// came between the parked save and the dead-lettering).
func (r *run) finishParking() error {
	p := r.st.Parked
	if p == nil || r.st.Deferred[p.Sequence] != p.BrokerSequence {
		return nil
	}
	msgs, err := r.receiveDeferred([]int64{p.BrokerSequence})
	if err != nil {
		return err
	}
	for _, m := range msgs {
		m.Sequence = p.Sequence
		if err := r.deadLetterParked(m); err != nil {
			return err
		}
	}
	delete(r.st.Deferred, p.Sequence)
	return r.save()
}

// settleStale completes deferred messages that were handled (their sequence is below Next) but
// whose completion was lost, and dead-letters deferred messages beyond a known last sequence.
func (r *run) settleStale() error {
	st := r.st
	var stale []int64
	for k, bs := range st.Deferred {
		if done, ok := r.completed[k]; ok && done == bs {
			continue
		}
		if k < st.Next || (st.Last != 0 && k > st.Last) {
			stale = append(stale, k)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	slices.Sort(stale)
	for chunk := range slices.Chunk(stale, r.e.cfg.DeferredBatch) {
		bss := make([]int64, len(chunk))
		for i, k := range chunk {
			bss[i] = st.Deferred[k]
		}
		msgs, err := r.receiveDeferred(bss)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := r.process(m, true); err != nil {
				return err
			}
		}
		for _, k := range chunk {
			r.completed[k] = st.Deferred[k]
		}
	}
	return r.save()
}

// ---- end and gaps ----

// finish runs once the last message is handled: it settles what is left, then deletes the state
// or turns it into a tombstone.
func (r *run) finish() error {
	r.endedHere = true
	// Every completion must be done before the state becomes a tombstone or is deleted: a message
	// redelivered after the delete would start a new sequence.
	if err := r.awaitSettlements(); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(r.held)) {
		if err := r.process(r.unhold(k), false); err != nil {
			return err
		}
	}
	if err := r.settleStale(); err != nil {
		return err
	}
	if err := r.settleDrain(); err != nil {
		return err
	}
	pruneSettled(r.st, r.completed)
	if r.e.cfg.tombstoneTTL() == 0 && len(r.st.Deferred) == 0 && len(r.st.SkippedPoison) == 0 {
		if err := r.deleteState(); err != nil {
			return err
		}
	} else if err := r.save(); err != nil {
		return err
	}
	r.e.observe(Event{Kind: EventSessionEnded, SessionID: r.id, Sequence: r.st.Last})
	return nil
}

// gapWaiting reports whether later messages wait while Next is missing.
func (r *run) gapWaiting() bool {
	if r.st.Parked != nil || !r.st.EndedAt.IsZero() || r.inherited {
		return false
	}
	if len(r.held) > 0 {
		return true
	}
	for k := range r.st.Deferred {
		if k > r.st.Next {
			return true
		}
	}
	return false
}

func (r *run) gapExpired() bool {
	gt := r.e.cfg.GapTimeout
	return gt > 0 && !r.st.GapSince.IsZero() && r.gapWaiting() && r.now().Sub(r.st.GapSince) >= gt
}

// skipGap advances Next to the lowest sequence that is waiting (held or deferred).
func (r *run) skipGap() error {
	st := r.st
	lowest := int64(0)
	for k := range r.held {
		if k > st.Next && (lowest == 0 || k < lowest) {
			lowest = k
		}
	}
	for k := range st.Deferred {
		if k > st.Next && (lowest == 0 || k < lowest) {
			lowest = k
		}
	}
	if lowest == 0 {
		return nil
	}
	r.log().WarnContext(r.ctx, "sequencer: gap timeout, skipping missing sequences",
		slog.Int64("from", st.Next), slog.Int64("to", lowest-1))
	skipped := uint64(lowest - st.Next)
	st.Counters.Skipped += skipped
	r.e.stats.skipped.Add(skipped)
	r.pendingGap = max(r.now().Sub(st.GapSince), 1)
	r.e.observe(Event{Kind: EventSkipped, SessionID: r.id, Sequence: st.Next})
	st.GapSince = time.Time{}
	st.Next = lowest
	return r.save()
}

// release ends a run that may settle: the window is deferred, the state saved if it changed and
// the anchors completed when nothing depends on them.
func (r *run) release(out Outcome) (Outcome, error) {
	if err := r.awaitSettlements(); err != nil {
		return r.failed(err)
	}
	if err := r.trimWindow(0); err != nil {
		return r.failed(err)
	}
	if r.dirty || len(r.completed) > 0 {
		if r.st.EndedAt.IsZero() || r.ver != 0 || len(r.st.Deferred) > 0 {
			if err := r.save(); err != nil {
				return r.failed(err)
			}
		}
	}
	if err := r.settleDrain(); err != nil {
		return r.failed(err)
	}
	return out, nil
}

func (s *State) clone() *State {
	c := *s
	c.Deferred = maps.Clone(s.Deferred)
	if c.Deferred == nil {
		c.Deferred = map[int64]int64{}
	}
	if s.SkippedPoison != nil {
		c.SkippedPoison = maps.Clone(s.SkippedPoison)
	}
	if s.InFlight != nil {
		c.InFlight = maps.Clone(s.InFlight)
	}
	if s.Parked != nil {
		p := *s.Parked
		c.Parked = &p
	}
	return &c
}
