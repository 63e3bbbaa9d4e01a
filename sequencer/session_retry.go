package sequencer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// A handler that keeps failing (retry is in session_inorder.go): the wait before the next attempt
// spent with the session released (EngineConfig.RetryReleaseAfter, State.Retrying), and the
// poison policy once the attempts are used up. Also the unsequenced messages passed through.

// releaseError is how retry says the next wait is to be spent released: attempts handler calls
// have failed, the last with err.
type releaseError struct {
	err      error
	attempts int
}

func (e *releaseError) Error() string { return e.err.Error() }
func (e *releaseError) Unwrap() error { return e.err }

// attemptsBefore returns the handler calls already made for m by earlier runs (the attempts of a
// released retry of its sequence): the retry loop counts on from there.
func (r *run) attemptsBefore(m *msg) int {
	if rt := r.st.Retrying; rt != nil && !m.unsequenced && rt.Sequence == m.seq {
		return int(rt.Attempts)
	}
	return 0
}

// releases reports whether the wait after the failed attempt (1-based, counted across runs) of m
// is spent with the session released: RetryReleaseAfter is set, the in-place attempts are used up,
// and m is in the session's order (an unsequenced message is retried in place: nothing waits
// behind it).
func (r *run) releases(m *msg, attempt int) bool {
	n := r.e.cfg.RetryReleaseAfter
	return n > 0 && !m.unsequenced && attempt >= n
}

// cooling reports whether the message for Next waits for a released retry: this run released it
// (retryingHere), or the stored attempt is not due yet. Nothing is handed over meanwhile.
func (r *run) cooling() bool {
	return r.phase == retryingHere || (r.st != nil && r.st.RetryWaiting(r.now()))
}

// releaseIfCooling ends the run (retryingHere) when now is set and the message for Next waits
// for a released retry that is not due.
func (r *run) releaseIfCooling(now bool) {
	if now && r.phase == receiving && r.cooling() {
		r.phase = retryingHere
	}
}

// releaseRetry plans the next attempt of m, whose handler failed rerr.attempts times, and
// releases the session until then: the message is set aside with the plan (save(Retrying,
// Deferred[seq]) → defer, or held in the store). A crash between the save and the defer leaves
// the message active with its index entry: redelivered, it is recognised by its broker sequence
// number and held (then set aside) until the attempt is due. A crash after leaves the plan,
// which a sweeper carries out at Retrying.At.
func (r *run) releaseRetry(m *msg, rerr *releaseError) error {
	now := r.now()
	wait := r.e.cfg.Retry.Backoff(rerr.attempts)
	at := now.Add(wait)
	r.st.Counters.Retries++
	r.e.stats.retries.Add(1)
	r.e.observe(Event{Kind: EventRetry, SessionID: r.s.id, Sequence: m.seq, Err: rerr.err})
	r.st.Retrying = &Retrying{Sequence: m.seq, BrokerSequence: m.bs, At: at, Attempts: uint64(rerr.attempts), Reason: rerr.err.Error()}
	// The message for Next is here: whatever gap was open before it arrived has closed.
	if gap := r.st.closeGap(now); gap > 0 {
		r.saved.gap = gap
	}
	if err := r.e.keep.setAside(r, []*msg{m}, false); err != nil {
		return err
	}
	r.phase = retryingHere
	r.e.stats.releasedRetries.Add(1)
	r.log().InfoContext(r.ctx, "sequencer: handler failed; the session is released until the next attempt",
		slog.Int64("sequence", m.seq), slog.Int("attempts", rerr.attempts), slog.Time("retry_at", at),
		slog.Duration("wait", wait.Round(time.Millisecond)), slog.Any("error", rerr.err))
	r.e.observe(Event{Kind: EventReleasedRetry, SessionID: r.s.id, Sequence: m.seq, Err: rerr.err, At: at})
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
	return r.s.completeLater(m, nil)
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
		if m.stored {
			// Held in the store: the skip and the dead-lettering are one write (a save alone
			// would remove the held message with the advance).
			if err := r.deadLetterHeld(m, ReasonHandlerFailed, herr.Error()); err != nil {
				return err
			}
			r.e.stats.skipped.Add(1)
			r.e.stats.deadLettered.Add(1)
			if !r.st.EndedAt.IsZero() {
				return r.end()
			}
			return nil
		}
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
	held, err := r.heldCopyOf(m)
	if err != nil {
		return err
	}
	// Save first: a crash before the dead-lettering finds the parked mark and finishes it. A
	// message held in the store is dead-lettered with the parked mark, in one write.
	target := m
	if held != nil {
		target = held
	} else if err := r.save(); err != nil {
		return err
	}
	r.e.stats.parked.Add(1)
	r.phase = parkedHere
	r.e.observe(Event{Kind: EventParked, SessionID: r.s.id, Sequence: m.seq, Err: herr})
	if err := r.deadLetterParked(target); err != nil || target == m {
		return err
	}
	// The copy at the broker of the message now in the store's dead letters.
	return r.s.completeLater(m, nil)
}

// heldCopyOf returns the copy of m the store holds: m itself when it was read from the store;
// for a copy delivered by the broker whose sequence the index lists as held with m's broker
// sequence number (a Hold committed, the completion at the broker did not land), the store's
// copy, if the store has it. nil when the store holds none: m is the only copy. Dead-lettering
// the store's copy with the parked mark, and completing the broker's, leaves one dead letter
// whatever crash follows; dead-lettering the broker's would leave the held copy for a later
// run to dead-letter again.
func (r *run) heldCopyOf(m *msg) (*msg, error) {
	if m.stored {
		return m, nil
	}
	h, ok := r.e.keep.(*holding)
	if !ok || m.deferred || r.st.Deferred[m.seq] != m.bs {
		return nil, nil
	}
	got, err := r.heldCopies(h.store, map[int64]int64{m.seq: m.bs})
	if err != nil || len(got) == 0 || got[0].seq != m.seq {
		return nil, err
	}
	return &got[0], nil
}
