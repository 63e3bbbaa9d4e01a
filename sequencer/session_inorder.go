package sequencer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// handling is how one in-order message is handed over and settled (strategy.plan).
type handling struct {
	how settlement
	// entries, when set, are a new run's record, saved before the handler call.
	entries map[int64]int64
	// early: an entry of the extension in flight, completed once the extension has landed.
	early bool
	// ahead: handed over before the save that covers it (one save each, pipelined, or the tail
	// of a run).
	ahead bool
}

// inOrder hands the in-order message m to the handler and settles it as the run's strategy plans
// it. A handler that keeps failing meets the poison policy.
func (r *run) inOrder(m *msg) error {
	h, err := r.way.plan(r, m)
	if err != nil {
		return err
	}
	if err := r.beforeHandler(r.way.marks(h)); err != nil {
		return err
	}
	if err := r.way.beforeCall(r, m, h); err != nil {
		return err
	}
	if ok, err := r.handOver(m, func() error { return r.way.handleOnce(r, m, h) }); !ok {
		return err
	}
	if err := r.settleHandled(m, h); err != nil {
		return err
	}
	if !r.st.EndedAt.IsZero() {
		return r.end()
	}
	return nil
}

// claim saves the state before the run's first handler call with a store of its own: an earlier
// holder that lost its lock without noticing can save no more, and this run goes on from the
// state it loaded, which is the latest.
func (r *run) claim() error {
	if r.saved.claimed || r.e.sessionBound {
		return nil
	}
	return r.save()
}

// settleHandled settles m, handled: an entry of a run as the strategy says, a message that went
// ahead waits for the save that covers it, the anchor of a drain waits unsettled, a deferred or
// indexed message is completed now (its index entry goes once that landed), and any other is
// completed through the completer.
func (r *run) settleHandled(m *msg, h handling) error {
	switch anchor := r.view().needsAnchor(); {
	case h.how == completeInRun:
		return r.way.settleEntry(r, m, h)
	case h.ahead && !anchor:
		return r.way.handledAhead(r, m)
	case h.ahead:
		// m turned out to be the anchor of a drain: its save comes now, it waits unsettled.
		if err := r.save(); err != nil {
			return err
		}
		r.s.anchor(m, "", r.indexed(m))
	case m.deferred || r.indexed(m) && !anchor:
		// The index entry stays until m is completed, so that a crash in between leaves
		// something the next run (or a sweeper) finds.
		landed, err := r.s.complete(m)
		if err != nil {
			return err
		}
		r.noteSettled(landed, m)
	case anchor:
		// An active message is what wakes the session if the drain is cut short: completed, it
		// would leave only deferred messages at the broker.
		r.s.anchor(m, "", r.indexed(m))
	default:
		return r.s.completeLater(m, nil)
	}
	return nil
}

// beforeHandler holds the next handler call until this run may make it: not after a failed
// background completion, not before the fence (a store of its own; see "Lock tenure"), not while
// an earlier holder may still be calling, and not past the lease. marked: the stored state tells
// the next holder to wait, so with Pipelined the mark and the lease bound the call instead of the
// fence.
func (r *run) beforeHandler(marked bool) error {
	if err := r.s.failure(); err != nil {
		return err // a background completion failed: hand nothing more to the handler
	}
	if !r.e.sessionBound && !(marked && r.e.pipelined) {
		if err := r.s.await(); err != nil {
			return err
		}
	}
	if err := r.holdHandover(); err != nil {
		return err
	}
	return r.s.holdLease()
}

// holdHandover makes a run that inherited a pipelined record (or Ahead) wait, before its first
// handler call and its first save, until PipelineLease after the load: the earlier holder may
// still be calling the handler. A save that resolves the record removes the mark the next holder
// would wait for, so it waits too.
func (r *run) holdHandover() error {
	if r.inherited.handoverAt.IsZero() {
		return nil
	}
	wait := r.inherited.handoverAt.Sub(r.now())
	r.inherited.handoverAt = time.Time{}
	if wait <= 0 {
		return nil
	}
	if err := clock.Sleep(r.ctx, r.e.clock, wait); err != nil {
		return fmt.Errorf("sequencer: session %s: waiting for the earlier holder of a pipelined run: %w", r.s.id, context.Cause(r.ctx))
	}
	return nil
}

// handOver runs once (one handler call, with its save) through retry and counts m handled once
// it succeeded. A handler that kept failing meets the poison policy (poison): ok is false, and
// err is nil when the poison policy has settled m.
func (r *run) handOver(m *msg, once func() error) (ok bool, err error) {
	if err = r.retry(m, once); err != nil {
		return false, r.notHandedOver(m, err)
	}
	r.e.stats.handled.Add(1)
	r.e.observe(Event{Kind: EventHandled, SessionID: r.s.id, Sequence: m.seq}) // 0 for an unsequenced m
	return true, nil
}

// retry runs once until it succeeds or the retries are exhausted (*poisonError), checking the
// tenure after each backoff wait. The attempts count on from an earlier run's released retry;
// once the in-place ones are used up the wait is spent released (*releaseError).
func (r *run) retry(m *msg, once func() error) error {
	cfg := r.e.cfg
	for attempt := r.attemptsBefore(m) + 1; ; attempt++ {
		err := once()
		if err == nil {
			return nil
		}
		var herr *handlerError
		if !errors.As(err, &herr) {
			return err // a store failure
		}
		if r.ctx.Err() != nil {
			return fmt.Errorf("sequencer: session %s: handler stopped: %w", r.s.id, context.Cause(r.ctx))
		}
		if attempt >= cfg.Retry.Attempts {
			return &poisonError{err: herr.err}
		}
		if r.releases(m, attempt) {
			return &releaseError{err: herr.err, attempts: attempt}
		}
		if !m.unsequenced {
			r.st.Counters.Retries++
			r.saved.dirty = true
		}
		r.e.stats.retries.Add(1)
		r.e.observe(Event{Kind: EventRetry, SessionID: r.s.id, Sequence: m.seq, Err: herr.err})
		if d := cfg.Retry.Backoff(attempt); d > 0 {
			if clock.Sleep(r.ctx, r.e.clock, d) != nil {
				return fmt.Errorf("sequencer: session %s: retry wait: %w", r.s.id, context.Cause(r.ctx))
			}
			if err := r.verifyTenure(); err != nil {
				return err
			}
		}
	}
}

// handleAndSave calls the handler for m once and, on success, advances the state and saves it,
// unless m is an entry of the recorded run or goes ahead of its save.
func (r *run) handleAndSave(m *msg, h handling) error {
	if err := r.callHandler(r.ctx, m); err != nil {
		return err
	}
	if wait := advance(r.st, m, r.now()); wait > 0 {
		r.saved.gap = wait
	}
	if !r.st.EndedAt.IsZero() {
		// The last message: what is left (its save, the completions, the close) is the tail,
		// and a store failure in it does not call the handler again.
		r.freeSlot()
	}
	if h.how == completeInRun || h.ahead {
		r.saved.dirty = true
		return nil
	}
	return r.save()
}

// strategy is how a handled in-order message is made durable and settled (see "Settlement
// strategies" in the package documentation). The engine chooses one when it is built
// (strategyOf); each run gets a value of its own, which holds what only that strategy uses.
// inOrder calls it at each step of the way of an in-order message.
type strategy interface {
	// plan says how m is handed over and settled.
	plan(r *run, m *msg) (handling, error)
	// marks reports whether the stored state tells the next holder to wait while m, planned as
	// h, is handed over (a record of this run's, or Ahead).
	marks(h handling) bool
	// beforeCall saves what must be stored before m's handler call.
	beforeCall(r *run, m *msg, h handling) error
	// handleOnce calls the handler for m once and, when it succeeds, advances the state and
	// makes it durable as h says. Handler errors come back as *handlerError.
	handleOnce(r *run, m *msg, h handling) error
	// passOnce calls the handler for the unsequenced m once.
	passOnce(r *run, m *msg) error
	// settleEntry settles m, a handled entry of the run's record.
	settleEntry(r *run, m *msg, h handling) error
	// handledAhead takes m, handled ahead of the save that covers it.
	handledAhead(r *run, m *msg) error
	// batchEnd runs after each receive batch.
	batchEnd(r *run) error
	// flush lands the save in flight in the background, if any: one save at a time.
	flush(r *run) error
	// stored follows a save of the run's own: the run's record ends, Ahead is no longer stored,
	// and what was handled ahead of it is completed.
	stored(r *run) error
	// pending reports whether a save is in flight or handled messages wait for one.
	pending() bool
	// wait waits for the save in flight, so that nothing of the run outlives it.
	wait()
}

// strategyOf returns the constructor of the strategy's per-run values: an AtomicStore is
// transactional whatever the settings, SaveEachMessage saves each message, and pipelined runs
// them in the background.
func strategyOf(saveEach, pipelined bool, atomic AtomicStore) func() strategy {
	switch {
	case atomic != nil:
		return func() strategy { return transactional{store: atomic} }
	case saveEach && pipelined:
		return func() strategy { return &saveAhead{} }
	case saveEach:
		return func() strategy { return perMessage{} }
	case pipelined:
		return func() strategy { return &pipelinedRuns{} }
	}
	return func() strategy { return &recordedRuns{} }
}

// ownSaves is handler → save(Next+1) → complete, each message with a save of its own, nothing in
// the background: the steps every strategy takes unless it says otherwise.
type ownSaves struct{}

func (ownSaves) plan(*run, *msg) (handling, error)            { return handling{how: saveThenComplete}, nil }
func (ownSaves) marks(handling) bool                          { return false }
func (ownSaves) beforeCall(r *run, _ *msg, _ handling) error  { return r.claim() }
func (ownSaves) handleOnce(r *run, m *msg, h handling) error  { return r.handleAndSave(m, h) }
func (ownSaves) passOnce(r *run, m *msg) error                { return r.callHandler(r.ctx, m) }
func (ownSaves) batchEnd(*run) error                          { return nil }
func (ownSaves) flush(*run) error                             { return nil }
func (ownSaves) stored(*run) error                            { return nil }
func (ownSaves) pending() bool                                { return false }
func (ownSaves) wait()                                        {}
func (ownSaves) settleEntry(r *run, m *msg, _ handling) error { return r.notPlanned(m, "an entry") }
func (ownSaves) handledAhead(r *run, m *msg) error            { return r.notPlanned(m, "ahead") }

// notPlanned is the error of a step the run's strategy never plans: a broken invariant.
func (r *run) notPlanned(m *msg, what string) error {
	return fmt.Errorf("sequencer: session %s: sequence %d settled as %s, which %T does not plan", r.s.id, m.seq, what, r.way)
}

// perMessage: handler → save → complete ("In order, one save each").
type perMessage struct{ ownSaves }

// transactional runs the handler and the save in one transaction of an AtomicStore ("Lock
// tenure"): the version check fences, so there is no claim.
type transactional struct {
	ownSaves
	store AtomicStore
}

func (transactional) beforeCall(*run, *msg, handling) error { return nil }

func (t transactional) handleOnce(r *run, m *msg, _ handling) error {
	next := r.st.clone()
	next.pruneSettled(r.s.settled)
	if wait := advance(next, m, r.now()); wait > 0 {
		r.saved.gap = wait
	}
	if err := r.saveWith(t.store, m, next); err != nil {
		return err
	}
	if r.saved.ended {
		r.freeSlot() // the last message: its handler's transaction has committed
	}
	return nil
}

// passOnce runs the handler in a transaction that saves the state unchanged: its version check
// is the fence.
func (t transactional) passOnce(r *run, m *msg) error {
	stored := r.saved.ver != 0
	same := r.st.clone()
	same.pruneSettled(r.s.settled)
	if err := r.saveWith(t.store, m, same); err != nil {
		return err
	}
	if !stored && r.st.pristine() {
		// A session of unsequenced messages alone leaves no row behind.
		return r.deleteState()
	}
	return nil
}

// recordedRuns records the in-order messages in hand in one save, then each goes handler →
// complete ("Recorded runs").
type recordedRuns struct {
	ownSaves
	// record is this run's own recorded run (sequence → broker sequence number) while its
	// entries are handled; the next save ends it.
	record map[int64]int64
	// refused counts the entries whose completion the broker refused as busy since the last
	// save: each stays at the broker, as after a crash, and is handed over again unless a save
	// records it handled.
	refused atomic.Int64
}

// boundReplay saves before m when the refused entries and the completions in flight reach the
// replay window (view.savesForReplay).
func (rr *recordedRuns) boundReplay(r *run) error {
	if !r.view().savesForReplay(rr.refused.Load(), r.s.inFlight()) {
		return nil
	}
	return r.save()
}

func (rr *recordedRuns) plan(r *run, m *msg) (handling, error) {
	if err := rr.boundReplay(r); err != nil {
		return handling{}, err
	}
	how, entries := r.view().settlementOf(m, rr.record, r.in.upcoming)
	return handling{how: how, entries: entries}, nil
}

func (rr *recordedRuns) marks(h handling) bool { return h.how == completeInRun || rr.record != nil }

func (rr *recordedRuns) beforeCall(r *run, _ *msg, h handling) error {
	switch {
	case h.entries != nil:
		return rr.recordRun(r, h.entries)
	case h.how == completeInRun:
		return nil
	}
	return r.claim()
}

// settleEntry completes m before the next handler call.
func (rr *recordedRuns) settleEntry(r *run, m *msg, _ handling) error {
	return r.s.completeEntry(m, syncCompleter{&r.s}, &rr.refused)
}

// stored ends the record; every entry handled so far is in the save, so a refusal no longer
// makes it a replay (one that lands later still counts: one save too many at worst).
func (rr *recordedRuns) stored(*run) error {
	rr.record = nil
	rr.refused.Store(0)
	return nil
}

// recordRun saves the record of a new run (State.InFlight = entries, Next still at the first).
func (rr *recordedRuns) recordRun(r *run, entries map[int64]int64) error {
	r.st.InFlight = entries
	err := r.save()
	r.st.InFlight = nil
	if err != nil {
		return err
	}
	rr.record = entries
	r.e.stats.runs.Add(1)
	return nil
}

// pipelinedRuns are recorded runs whose entries are completed in the background, extended over
// the next batch in hand, with the tail of a run handed over ahead of its save ("Pipelined runs",
// "Extended runs", "The tail of a run").
type pipelinedRuns struct {
	recordedRuns
	bg background
}

func (p *pipelinedRuns) plan(r *run, m *msg) (handling, error) {
	if err := p.boundReplay(r); err != nil {
		return handling{}, err
	}
	early, err := p.landExtension(r, m)
	if err != nil {
		return handling{}, err
	}
	h := handling{early: early}
	h.how, h.entries = r.view().settlementOf(m, p.record, r.in.upcoming)
	if early {
		h.how, h.entries = completeInRun, nil
	}
	f := pipelining{
		recordStored: p.record != nil && p.bg.save == nil && r.phase == receiving,
		pending:      len(p.bg.unsaved) + r.s.inFlight(),
	}
	if r.view().tailsRun(m, h.how, h.entries, r.in.upcoming, f) {
		h.how, h.entries, h.ahead = saveThenComplete, nil, true
	}
	return h, nil
}

func (p *pipelinedRuns) marks(h handling) bool {
	return p.recordedRuns.marks(h) || h.ahead && p.bg.aheadStored
}

func (p *pipelinedRuns) beforeCall(r *run, m *msg, h handling) error {
	if h.entries == nil && h.how != completeInRun {
		return r.claim()
	}
	if h.entries != nil {
		if err := p.recordRun(r, h.entries); err != nil {
			return err
		}
	}
	p.extendRun(r, m)
	return nil
}

func (p *pipelinedRuns) settleEntry(r *run, m *msg, h handling) error {
	if a := p.bg.save; h.early && a != nil {
		a.covers = append(a.covers, m)
		return nil
	}
	return r.s.completeEntry(m, r.s.done, &p.refused)
}

func (p *pipelinedRuns) handledAhead(_ *run, m *msg) error {
	p.bg.unsaved = append(p.bg.unsaved, m)
	return nil
}

func (p *pipelinedRuns) flush(r *run) error { return p.bg.flush(r, &p.recordedRuns) }

func (p *pipelinedRuns) stored(r *run) error {
	if err := p.recordedRuns.stored(r); err != nil {
		return err
	}
	return p.bg.stored(r)
}

func (p *pipelinedRuns) pending() bool { return p.bg.pending() }
func (p *pipelinedRuns) wait()         { p.bg.wait() }

// extendRun extends the recorded run over the next batch when that batch has already been
// received (askNextBatch) while m, an entry of the run, is about to be handed over: the record of
// the run from m on over everything in hand is saved in the background, and the entries past the
// current record wait only for that save to land (landExtension). See "Extended runs".
func (p *pipelinedRuns) extendRun(r *run, m *msg) {
	if p.bg.save != nil || p.record == nil {
		return
	}
	more := r.peekNextBatch()
	if more == nil {
		return
	}
	entries := r.view().lookahead(m, append(slices.Clip(r.in.upcoming), more...))
	if subset(entries, p.record) {
		return
	}
	st := r.snapshot()
	st.InFlight = entries
	p.bg.start(r, &aheadSave{st: st, record: entries})
}

// subset reports whether every entry of a is in b.
func subset(a, b map[int64]int64) bool {
	for seq, bs := range a {
		if was, ok := b[seq]; !ok || was != bs {
			return false
		}
	}
	return true
}

// landExtension lands the extension of the run in flight, if any, when it is done, and otherwise
// says whether m may be handed over before it lands (view.extensionOf): early, its completion
// then waits for the extension (aheadSave.covers); otherwise it waits for the extension to land.
func (p *pipelinedRuns) landExtension(r *run, m *msg) (early bool, err error) {
	a := p.bg.save
	if a == nil || a.record == nil {
		return false, nil
	}
	if err := p.bg.land(r, false, &p.recordedRuns); err != nil || p.bg.save == nil {
		return false, err
	}
	switch r.view().extensionOf(m, p.record, a.record, len(a.covers)+r.s.inFlight()) {
	case extensionNone:
		return false, nil
	case extensionEarly:
		return true, nil
	}
	return false, p.bg.land(r, true, &p.recordedRuns)
}

// saveAhead is one save each with the saves in the background ("One save each, pipelined").
type saveAhead struct {
	ownSaves
	bg background
}

func (a *saveAhead) plan(r *run, m *msg) (handling, error) {
	return handling{how: saveThenComplete, ahead: r.view().goesAhead(m)}, nil
}

func (a *saveAhead) marks(h handling) bool { return h.ahead && a.bg.aheadStored }

func (a *saveAhead) handledAhead(r *run, m *msg) error {
	a.bg.unsaved = append(a.bg.unsaved, m)
	return a.pump(r)
}

// batchEnd keeps what was handled from waiting for the next batch: when that batch is in hand
// already its messages keep the saves going, otherwise the run saves and completes everything
// handled before it waits for the broker.
func (a *saveAhead) batchEnd(r *run) error {
	if len(a.bg.unsaved) == 0 && a.bg.save == nil {
		return nil
	}
	if r.peekNextBatch() != nil {
		return a.pump(r)
	}
	if err := a.bg.flush(r, nil); err != nil {
		return err
	}
	if len(a.bg.unsaved) == 0 {
		return nil
	}
	a.bg.startAhead(r)
	return a.bg.flush(r, nil)
}

// pump lands the save in flight if it is done, or waits for it when the handler has gone as far
// ahead as MaxPendingSettlements allows or when the stored state does not say Ahead yet (the
// next holder must find it before a handler call goes ahead), then starts the save of what was
// handled since.
func (a *saveAhead) pump(r *run) error {
	if s := a.bg.save; s != nil {
		wait := !a.bg.aheadStored || len(s.covers)+len(a.bg.unsaved) > r.e.cfg.MaxPendingSettlements
		if err := a.bg.land(r, wait, nil); err != nil {
			return err
		}
	}
	if a.bg.save != nil || len(a.bg.unsaved) == 0 || r.view().gathersAhead(a.bg.aheadStored, len(r.in.upcoming), len(a.bg.unsaved)) {
		return nil
	}
	a.bg.startAhead(r)
	if !a.bg.aheadStored {
		return a.bg.land(r, true, nil)
	}
	return nil
}

func (a *saveAhead) flush(r *run) error  { return a.bg.flush(r, nil) }
func (a *saveAhead) stored(r *run) error { return a.bg.stored(r) }
func (a *saveAhead) pending() bool       { return a.bg.pending() }
func (a *saveAhead) wait()               { a.bg.wait() }
