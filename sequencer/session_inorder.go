package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	if r.view().savesForReplay(r.s.refusedEntries.Load(), r.s.inFlight()) {
		if err := r.save(); err != nil {
			return err
		}
	}
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
		return r.s.completeLater(m, false)
	}
	return nil
}

// passThrough hands the unsequenced message m to the handler (UnsequencedPassThrough) and
// completes it, outside the session's order (see "What happens to a message").
func (r *run) passThrough(m *msg) error {
	if err := r.beforeHandler(false); err != nil {
		return err
	}
	ok, err := r.handOver(m, func() error { return r.way.passOnce(r, m) })
	if !ok {
		return err
	}
	return r.s.completeLater(m, false)
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

// notHandedOver carries out what the failure err of handOver asks for: the poison policy, a
// released retry, or nothing (a store or broker failure, returned).
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
	if wait := r.st.handled(m.seq, m.bs, r.now()); wait > 0 {
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

// verifyTenure checks after a retry wait, which made no call, that the run still holds the
// session: the lock is renewed (with a store of its own) and the stored version re-read
// ("Lock tenure").
func (r *run) verifyTenure() error {
	if err := r.way.flush(r); err != nil { // the version compared is the one last saved
		return err
	}
	if !r.e.sessionBound {
		r.e.stats.calls[CallRenewLock].Add(1)
		if _, err := r.s.sess.RenewLock(r.ctx); err != nil {
			return r.s.callErr(CallRenewLock, err)
		}
	}
	r.e.stats.storeCalls.Add(1)
	_, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.s.sess})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: checking the state after a retry wait: %w", r.s.id, err)
	}
	if ver != r.saved.ver {
		return fmt.Errorf("sequencer: session %s: the stored state changed during a retry wait (version %d, this run's %d): %w",
			r.s.id, ver, r.saved.ver, ErrVersionConflict)
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
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.s.id, Err: herr})
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
		r.e.observe(Event{Kind: EventBlocked, SessionID: r.s.id, Sequence: m.seq, Err: herr})
		return r.s.abandon(m)
	case poisonSkip:
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.s.id, Sequence: m.seq, Err: herr})
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
	r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.s.id, Sequence: m.seq, Err: herr})
	r.st.park(m.seq, m.bs, herr.Error(), r.now())
	// Save first: a crash before the dead-lettering finds the parked mark and finishes it.
	if err := r.save(); err != nil {
		return err
	}
	r.e.stats.parked.Add(1)
	r.phase = parkedHere
	r.e.observe(Event{Kind: EventParked, SessionID: r.s.id, Sequence: m.seq, Err: herr})
	return r.deadLetterParked(m)
}
