package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// This file hands an in-order message to the handler and makes it durable and settled
// (inOrder), hands over an unsequenced one (passThrough), retries a failing handler and, once
// the retries are exhausted, applies the poison policy.

// handling is how one in-order message is handed over and settled (plan).
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

// inOrder hands the in-order message m to the handler and settles it, as plan says: as an entry
// of a recorded run, handler → complete (the record stands for the save), or handler →
// save(Next+1) → complete, the save in the background for a message that goes ahead. A handler
// that keeps failing meets the poison policy.
func (r *run) inOrder(m *msg) error {
	h, err := r.plan(m)
	if err != nil {
		return err
	}
	// The stored state tells the next holder to wait when it is this run's record or says Ahead.
	marked := h.how == completeInRun || r.runs.record != nil || h.ahead && r.bg.aheadStored
	if err := r.beforeHandler(marked); err != nil {
		return err
	}
	if err := r.beforeCall(m, h); err != nil {
		return err
	}
	if ok, err := r.handOver(m, func() error { return r.handleOnce(m, h.how, h.ahead) }); !ok {
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

// plan takes the view's choices for m (settlementOf, extensionOf, tailsRun, goesAhead), after
// the save that bounds the replay (savesForReplay) and the landing of an extension that is done.
func (r *run) plan(m *msg) (handling, error) {
	if r.view().savesForReplay(r.s.refusedEntries.Load(), r.s.inFlight()) {
		if err := r.save(); err != nil {
			return handling{}, err
		}
	}
	early, err := r.landExtension(m)
	if err != nil {
		return handling{}, err
	}
	h := handling{early: early}
	h.how, h.entries = r.view().settlementOf(m, r.e.strategy.recordsRuns(), r.runs.record, r.runs.upcoming)
	if early {
		h.how, h.entries = completeInRun, nil
	}
	f := r.pipelining()
	if r.view().tailsRun(m, h.how, h.entries, r.runs.upcoming, f) {
		h.how, h.entries, h.ahead = saveThenComplete, nil, true
	} else {
		h.ahead = r.view().goesAhead(m, h.how, f)
	}
	return h, nil
}

// beforeCall saves what must be stored before m's handler call: a new run's record (and its
// extension over the next batch), or, with a store of its own, the run's claim: an earlier holder
// that lost its lock without noticing can save no more, and this run goes on from the state it
// loaded, which is the latest.
func (r *run) beforeCall(m *msg, h handling) error {
	switch {
	case h.entries != nil:
		if err := r.recordRun(h.entries); err != nil {
			return err
		}
		r.extendRun(m)
	case h.how == completeInRun:
		r.extendRun(m)
	case !r.saved.claimed && !r.e.sessionBound && r.e.strategy != transactional:
		return r.save()
	}
	return nil
}

// settleHandled settles m, handled: an entry of a run is completed (once the extension it belongs
// to has landed), a message that went ahead waits for the save that covers it, the anchor of a
// drain waits unsettled, a deferred or indexed message is completed now (its index entry goes
// once that landed), and any other is completed through the completer.
func (r *run) settleHandled(m *msg, h handling) error {
	switch anchor := r.view().needsAnchor(); {
	case h.how == completeInRun:
		if a := r.bg.save; h.early && a != nil {
			a.covers = append(a.covers, m)
			return nil
		}
		return r.s.completeEntry(m)
	case h.ahead && !anchor:
		return r.handledAhead(m)
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
		return r.s.completeLater(m, false)
	}
	return nil
}

// passThrough hands the unsequenced message m to the handler (UnsequencedPassThrough) and
// completes it, outside the session's order: whatever the ordered messages wait for (a gap, a
// parked session, an inherited record) does not hold it up, and the state is neither read nor
// advanced for it. The fence of inOrder still applies before the handler call; with an
// AtomicStore the handler runs in a transaction that saves the state unchanged (its version check
// is the fence). A handler that keeps failing dead-letters m (HandlerFailed) whatever the poison
// policy: an unordered message never parks or blocks the ordered ones.
func (r *run) passThrough(m *msg) error {
	if err := r.beforeHandler(false); err != nil {
		return err
	}
	ok, err := r.handOver(m, func() error {
		if r.e.strategy != transactional {
			return r.callHandler(r.ctx, m)
		}
		stored := r.saved.ver != 0
		same := r.st.clone()
		same.pruneSettled(r.s.settled)
		if err := r.saveWith(m, same); err != nil {
			return err
		}
		if !stored && r.st.pristine() {
			// The transaction stored a state only to run the handler: a session of unsequenced
			// messages alone leaves no row behind.
			return r.deleteState()
		}
		return nil
	})
	if !ok {
		return err
	}
	return r.s.completeLater(m, false)
}

// beforeHandler holds the next handler call until this run may make it: not after a failed
// background completion, not before the completions since the last save are answered with a
// store of its own (the fence), not while an earlier holder may still be calling (holdHandover),
// and not past the lease. marked says the stored state tells the next holder to wait (this run's
// record, or Ahead): with pipelined runs the mark and the lease then bound the call instead of
// the fence (see "Pipelined runs" in the package documentation).
func (r *run) beforeHandler(marked bool) error {
	if err := r.s.failure(); err != nil {
		return err // a background completion failed: hand nothing more to the handler
	}
	if !r.e.sessionBound && !(marked && r.e.pipelined) {
		// Fence (see SessionBoundStore): a save to this store says nothing about the session
		// lock, so the completions issued since the last save must have been answered (which
		// they are not once the lock is lost) before the handler is called again.
		if err := r.s.await(); err != nil {
			return err
		}
	}
	if err := r.holdHandover(); err != nil {
		return err
	}
	return r.s.holdLease()
}

// holdHandover makes a run of a pipelined engine that inherited a record wait, before its first
// handler call and before its first save, until EngineConfig.PipelineLease after it loaded the
// state: the run that left the record may not know yet that its lock is lost and may still be
// calling the handler for the entries it had in hand (settler.holdLease bounds for how long).
// The save matters as much as the call: a save that resolves the record removes it, and a run
// that loads the state after that save finds no record to wait for.
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
		return fmt.Errorf("sequencer: session %s: waiting for the earlier holder of a pipelined run: %w", r.id, context.Cause(r.ctx))
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
	r.e.observe(Event{Kind: EventHandled, SessionID: r.id, Sequence: m.seq}) // 0 for an unsequenced m
	return true, nil
}

// notHandedOver carries out what the failure err of handOver asks for: the poison policy, a
// released retry, or nothing (a store or broker failure, returned). It is apart from handOver so
// that the error targets it declares are not allocated for every message handed over.
func (r *run) notHandedOver(m *msg, err error) error {
	var perr *poisonError
	if errors.As(err, &perr) {
		return r.poison(m, perr.err)
	}
	var rerr *releaseError
	if errors.As(err, &rerr) {
		return r.releaseRetry(m, rerr) // session_retry.go
	}
	return err
}

// retry runs once (one handler call, with its save) until it succeeds or the retries are
// exhausted (*poisonError), re-reading the stored version after each backoff wait (verifyTenure).
// A retry of an ordered message counts in the state's counters. The attempts count on from an
// earlier run's released retry, and once the in-place ones are used up the wait is spent with the
// session released (*releaseError, session_retry.go).
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
			return fmt.Errorf("sequencer: session %s: handler stopped: %w", r.id, context.Cause(r.ctx))
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
		r.e.observe(Event{Kind: EventRetry, SessionID: r.id, Sequence: m.seq, Err: herr.err})
		if d := cfg.Retry.Backoff(attempt); d > 0 {
			if clock.Sleep(r.ctx, r.e.clock, d) != nil {
				return fmt.Errorf("sequencer: session %s: retry wait: %w", r.id, context.Cause(r.ctx))
			}
			if err := r.verifyTenure(); err != nil {
				return err
			}
		}
	}
}

// handleOnce calls the handler once and, on success, advances the state and (unless m is an
// entry of the recorded run or goes ahead of its save) saves it; with an AtomicStore both
// happen in one transaction. Handler errors come back as *handlerError.
func (r *run) handleOnce(m *msg, how settlement, ahead bool) error {
	if r.e.strategy == transactional {
		next := r.st.clone()
		next.pruneSettled(r.s.settled)
		if wait := next.handled(m.seq, m.bs, r.now()); wait > 0 {
			r.gap.pending = wait
		}
		if err := r.saveWith(m, next); err != nil {
			return err
		}
		if r.saved.ended {
			r.freeSlot() // the last message: its handler's transaction has committed
		}
		return nil
	}
	if err := r.callHandler(r.ctx, m); err != nil {
		return err
	}
	if wait := r.st.handled(m.seq, m.bs, r.now()); wait > 0 {
		r.gap.pending = wait
	}
	if !r.st.EndedAt.IsZero() {
		// The last message: what is left (its save, the completions, the close) is the tail,
		// and a store failure in it does not call the handler again.
		r.freeSlot()
	}
	if how == completeInRun || ahead {
		r.saved.dirty = true
		return nil
	}
	return r.save()
}

// verifyTenure checks, after a retry wait in which the engine made no call that would have shown
// a lost session lock, that the run still holds the session before it hands the message over
// again: the lock is renewed (a store that is not session-bound cannot tell), and the stored
// version is re-read; if another holder wrote the state meanwhile (the lock was lost and taken
// again behind the engine's back, see the package documentation), the engine stops.
func (r *run) verifyTenure() error {
	if err := r.flushAhead(); err != nil { // the version compared is the one last saved
		return err
	}
	if !r.e.sessionBound {
		r.e.stats.calls[CallRenewLock].Add(1)
		if _, err := r.sess.RenewLock(r.ctx); err != nil {
			return r.s.callErr(CallRenewLock, err)
		}
	}
	r.e.stats.storeCalls.Add(1)
	_, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.sess})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: checking the state after a retry wait: %w", r.id, err)
	}
	if ver != r.saved.ver {
		return fmt.Errorf("sequencer: session %s: the stored state changed during a retry wait (version %d, this run's %d): %w",
			r.id, ver, r.saved.ver, ErrVersionConflict)
	}
	return nil
}

// poison carries out what the poison policy decided (view.poisonOf) for m, whose handler kept
// failing with herr.
func (r *run) poison(m *msg, herr error) error {
	act := r.view().poisonOf(m)
	if act == poisonDeadLetter {
		r.log().WarnContext(r.ctx, "sequencer: handler failed on an unsequenced message, retries exhausted; dead-lettering it",
			slog.Int64("broker_sequence", m.bs), slog.Any("error", herr))
		landed, err := r.s.deadLetter(m, ReasonHandlerFailed, herr.Error())
		if err != nil || !landed {
			// Refused as busy: m is delivered again, and its handler fails again.
			return err
		}
		r.e.stats.deadLettered.Add(1)
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Err: herr})
		return nil
	}
	r.log().WarnContext(r.ctx, "sequencer: handler failed, retries exhausted", slog.Int64("sequence", m.seq),
		slog.String("policy", string(r.e.cfg.Poison)), slog.Any("error", herr))
	switch act {
	case poisonBlock:
		// Record the block (operators list blocked sessions), then give the message back: the
		// broker delivers it again until it succeeds or its max delivery count dead-letters it.
		r.st.block(m.seq, m.bs, herr.Error(), r.now())
		if err := r.save(); err != nil {
			return err
		}
		r.phase = blocked
		r.e.observe(Event{Kind: EventBlocked, SessionID: r.id, Sequence: m.seq, Err: herr})
		return r.s.abandon(m)
	case poisonSkip:
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Sequence: m.seq, Err: herr})
		// Save the skip together with a marker, then dead-letter: a crash in between leaves the
		// marker, and the redelivered message is dead-lettered instead of completed.
		r.st.skipPoison(m.seq, m.bs, r.now())
		if err := r.save(); err != nil {
			return err
		}
		r.e.stats.skipped.Add(1)
		// Not an indexed one: the next run's startup takes an index entry below Next whose
		// message is not deferred for settled, and would drop the skip's marker with it.
		if !r.indexed(m) && r.view().needsAnchor() {
			// Like a handled message, the skipped one wakes the session if the drain is cut short.
			r.s.anchor(m, herr.Error(), false)
		} else if err := r.s.deadLetterSkipped(m, herr.Error()); err != nil {
			return err
		}
		if !r.st.EndedAt.IsZero() {
			return r.end()
		}
		return nil
	}
	// poisonPark
	r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Sequence: m.seq, Err: herr})
	r.st.park(m.seq, m.bs, herr.Error(), r.now())
	// Save first: a crash before the dead-lettering finds the parked mark and finishes it.
	if err := r.save(); err != nil {
		return err
	}
	r.e.stats.parked.Add(1)
	r.phase = parkedHere
	r.e.observe(Event{Kind: EventParked, SessionID: r.id, Sequence: m.seq, Err: herr})
	return r.deadLetterParked(m)
}
