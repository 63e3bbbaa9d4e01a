package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"
)

// phase is where a run stands. The stored State says what the session is (parked, ended,
// waiting on a gap); the phase says what this run does next.
type phase int

const (
	// receiving: State.Next is exact. Messages are received, decided and acted on.
	receiving phase = iota
	// resolving: the state holds a run record (State.InFlight) that an earlier run left and
	// that is not resolved yet, so State.Next is only a lower bound. Nothing is handed over;
	// each message delivered tells more (resolve), and so does an empty receive.
	resolving
	// parkedHere: this run parked the session (PoisonPark). The rest of the batch is decided
	// (and held), what is held is deferred, and the session is released.
	parkedHere
	// blocked: PoisonBlock abandoned the message in hand; the session is released at once.
	blocked
	// ended: this run handled (or skipped) the last message and settled what was left; the
	// session is released.
	ended
	// heldFull: the store refused to hold more (a bound of EngineConfig.Held) and the window
	// passed WindowBytes with what it kept instead; the run takes no more messages and releases
	// the session, leaving them to the broker.
	heldFull
	// retryingHere: the handler of the message for Next keeps failing and its next attempt waits
	// with the session released (State.Retrying), or such a wait is not over; the rest of the
	// batch is decided (and held), what is held is deferred, and the session is released.
	retryingHere
)

// outcome returns the outcome of a run in a final phase.
func (p phase) outcome() (Outcome, bool) {
	switch p {
	case blocked:
		return OutcomeBlocked, true
	case parkedHere:
		return OutcomeParked, true
	case ended:
		return OutcomeEnded, true
	case retryingHere:
		return OutcomeRetrying, true
	case heldFull:
		return OutcomeHeldFull, true
	}
	return 0, false
}

// run is the state of one RunSession call. Only the renewal goroutine and the background
// completions (the settler's) run concurrently with the RunSession goroutine.
type run struct {
	e    *Engine
	ctx  context.Context
	opts runOptions
	// s holds the session, makes the run's settlements and owns what they share.
	s     settler
	phase phase
	st    *State
	saved saved
	w     window
	in    batches
	// inherited is what the run resolves of an earlier run's record.
	inherited inheritance
	// way is the run's part of the engine's strategy.
	way strategy
	// held is what the session holds in the store (EarlyStore), when known.
	held heldCount
}

// heldCount is what a session holds in the store as a run last learnt it.
type heldCount struct {
	stats HeldStats
	known bool
}

// runOptions are the RunOptions a run keeps.
type runOptions struct {
	stop   context.Context
	resume *ResumeOptions
	// woken: accepted by id for a wake (RunOptions.Woken).
	woken bool
	// onRelease is RunOptions.Released, nil once called.
	onRelease func()
}

// saved is what the run knows of the stored state.
type saved struct {
	ver int64
	// dirty: the run's state has changes (counters, Last, GapSince) not yet saved.
	dirty bool
	// claimed: this run has saved the state at least once, so the version has moved since any
	// earlier holder's last save (see SessionBoundStore).
	claimed bool
	// ended: the last save stored the tombstone (EndedAt set); with dirty false and nothing
	// held or deferred, the stored state is the run's and end need not write it again.
	ended bool
	// gap is a resolved gap wait to report once saved; gapAtLoad is State.GapSince as loaded (a
	// gap open at the release but not at the load opened during this run).
	gap       time.Duration
	gapAtLoad time.Time
}

// batches are the receive batches a run has in hand besides the message it decides.
type batches struct {
	// upcoming is the rest of the receive batch in hand.
	upcoming []msg
	// next is the receive of the next batch, started while this one is handled (askNextBatch).
	next *nextBatch
}

// inheritance is what a run that inherited a record learns while it resolves it.
type inheritance struct {
	// present holds the entries delivered again, lastDelivered the highest broker sequence
	// number delivered by Receive, and peeked the entries the broker was asked about
	// (HoldingSession), true for those it still held.
	present       map[int64]bool
	lastDelivered int64
	peeked        map[int64]bool
	// handoverAt, when set, is the earliest time of this run's first handler call: the earlier
	// holder may still be calling (holdHandover).
	handoverAt time.Time
}

func (r *run) now() time.Time { return r.e.clock.Now() }

func (r *run) log() *slog.Logger { return r.e.log.With(slog.String("session_id", r.s.id)) }

func (r *run) view() view {
	return view{cfg: &r.e.cfg, st: r.st, w: &r.w, resolving: r.phase == resolving, cooling: r.cooling()}
}

// run processes the session and settles what it may before the release: it never returns
// without having decided the outcome.
func (r *run) run() (Outcome, error) {
	out, err := r.loop()
	if err != nil {
		return r.failed(err)
	}
	r.freeSlot()
	return r.release(out)
}

// freeSlot calls RunOptions.Released, once: this run makes no more handler calls. A run whose
// settlements a throttled namespace refused keeps its slot through its tail: the namespace is not
// offered more work while it refuses this run's.
func (r *run) freeSlot() {
	if r.opts.onRelease == nil || r.s.busy.Load() {
		return
	}
	release := r.opts.onRelease
	r.opts.onRelease = nil
	release()
}

// loop loads the state and takes batches of messages until the session ends, parks, blocks,
// stops or idles.
func (r *run) loop() (Outcome, error) {
	// The first receive overlaps the load; a woken run may release at once, so it waits.
	if r.e.cfg.Pipelining == Pipelined && !r.opts.woken {
		r.askNextBatch()
	}
	if err := r.load(); err != nil {
		return 0, err
	}
	if len(r.st.InFlight) > 0 {
		r.phase = resolving
		if r.e.cfg.Pipelining == Pipelined && r.e.cfg.PipelineLease > 0 {
			r.inherited.handoverAt = r.now().Add(r.e.cfg.PipelineLease)
		}
	}
	if r.st.Ahead && r.e.cfg.PipelineLease > 0 {
		// The earlier holder may still be handing over messages ahead of its saves.
		r.inherited.handoverAt = r.now().Add(r.e.cfg.PipelineLease)
	}
	if err := r.startup(); err != nil {
		return 0, err
	}
	if err := r.drain(); err != nil {
		return 0, err
	}
	r.releaseIfCooling(r.opts.woken)
	for {
		if r.ctx.Err() != nil {
			return 0, context.Cause(r.ctx)
		}
		if out, done := r.phase.outcome(); done {
			return out, nil
		}
		if r.opts.stop.Err() != nil {
			return OutcomeStopped, nil
		}
		batch, err := r.receive()
		if err != nil {
			return 0, err
		}
		if r.ctx.Err() != nil {
			return 0, context.Cause(r.ctx)
		}
		if len(batch) > 0 {
			if r.opts.stop.Err() == nil && r.view().asksNextBatch(batch) {
				r.askNextBatch()
			}
			if err := r.take(batch); err != nil {
				return 0, err
			}
			if done, err := r.settledLateCopies(len(batch)); err != nil {
				return 0, err
			} else if done {
				return r.idle(), nil
			}
			r.releaseIfCooling(true)
		} else {
			// Nothing more at the broker: the session idles, unless that resolves an inherited
			// record or a gap timed out.
			if r.opts.stop.Err() != nil {
				return OutcomeStopped, nil
			}
			if r.phase == resolving {
				// The entries of the inherited run not delivered are gone.
				if err := r.resolve(nil); err != nil {
					return 0, err
				}
				if err := r.drain(); err != nil {
					return 0, err
				}
				continue
			}
			if r.view().gapPolicy(r.now()) == gapNone {
				return r.idle(), nil
			}
		}
		if act := r.view().gapPolicy(r.now()); act != gapNone {
			if err := r.onGapTimeout(act); err != nil {
				return 0, err
			}
			if err := r.drain(); err != nil {
				return 0, err
			}
		}
	}
}

// settledLateCopies reports whether a run of an ended session (its tombstone loaded) is done
// with the batch of n messages it took: the broker had no more (n is short of a full receive) and
// every late copy's completion landed. After a refused completion the idle timeout is the
// backoff before the copy comes back.
func (r *run) settledLateCopies(n int) (bool, error) {
	if r.phase != receiving || r.st.EndedAt.IsZero() || n >= r.e.cfg.ReceiveBatch {
		return false, nil
	}
	if err := r.s.await(); err != nil {
		return false, err
	}
	return !r.s.busy.Load(), nil
}

// take decides the messages of one receive batch in order, draining after each, then bounds the
// window. A block or a stop leaves the rest of the batch unsettled: it returns to the broker when
// the session is closed.
func (r *run) take(batch []msg) error {
	for i := range batch {
		if r.phase == blocked || r.opts.stop.Err() != nil {
			break
		}
		m := &batch[i]
		r.in.upcoming = batch[i+1:]
		if err := r.resolve(m); err != nil {
			return err
		}
		if err := r.step(m); err != nil {
			return err
		}
		if err := r.drain(); err != nil {
			return err
		}
	}
	r.in.upcoming = nil
	if err := r.way.batchEnd(r); err != nil {
		return err
	}
	if r.w.refused && r.w.bytes > r.e.cfg.WindowBytes && r.phase == receiving {
		r.phase = heldFull // what the store refused no longer fits the window either
	}
	return r.trimWindow(r.windowLimit())
}

func (r *run) failed(err error) (Outcome, error) {
	switch {
	case r.s.lost.Load() || errors.Is(err, ErrLockLost) || errors.Is(context.Cause(r.ctx), ErrLockLost):
		return OutcomeLockLost, err
	case r.ctx.Err() != nil:
		return OutcomeCanceled, err
	}
	return OutcomeFailed, err
}

// step decides what to do with m and does it: an in-order message is handed over (inOrder), an
// unsequenced one passed through, an early one held, every other one settled at once.
func (r *run) step(m *msg) error {
	a := r.view().decide(m)
	if a.learnsLast {
		if err := r.learnLast(m.seq); err != nil {
			return err
		}
	}
	if a.unparks {
		r.log().InfoContext(r.ctx, "sequencer: the missing sequence the session was parked on arrived; unparking",
			slog.Int64("sequence", m.seq))
		since := r.st.GapSince
		r.st.Unpark(false, r.now())
		r.st.GapSince, r.saved.dirty = since, true // the wait ends with this message: reported whole
		if r.phase == parkedHere {
			r.phase = receiving
		}
	}
	switch a.kind {
	case actHandle:
		return r.inOrder(m)
	case actPassThrough:
		return r.passThrough(m)
	case actHold:
		r.hold(m)
		return nil
	}
	return r.settle(m, a.settle)
}

// learnLast records the last sequence, which a message marked last revealed: the held messages
// beyond it are invalid now.
func (r *run) learnLast(last int64) error {
	r.st.Last, r.saved.dirty = last, true
	for _, k := range slices.Sorted(maps.Keys(r.w.held)) {
		if k > last {
			m := r.w.unhold(k)
			if err := r.settleLeftover(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleLeftover settles m, a message the state puts below Next or beyond the last sequence (a
// stale deferred message; a held message at the end, below a resolved record or beyond a newly
// known last): view.leftover decides it.
func (r *run) settleLeftover(m *msg) error {
	d, ok := r.view().leftover(m)
	if !ok {
		// Only a broken invariant gets here: the callers pick their messages by the same rule.
		return fmt.Errorf("sequencer: session %s: sequence %d (broker sequence %d) is neither below the next sequence %d nor after the last %d where only settlement was expected",
			r.s.id, m.seq, m.bs, r.st.Next, r.st.Last)
	}
	return r.settle(m, d)
}

// settle carries out a settle-only decision.
func (r *run) settle(m *msg, d settleDecision) error {
	switch d.kind {
	case settleInvalid:
		return r.invalid(m, d.desc)
	case settleFinishSkip:
		// Skipped as poison, but the dead-lettering did not happen before a crash.
		const desc = "handler failed; dead-lettered after a restart"
		if m.stored {
			if err := r.deadLetterHeld(m, ReasonHandlerFailed, desc); err != nil {
				return err
			}
			r.e.stats.deadLettered.Add(1)
			return nil
		}
		return r.s.deadLetterSkipped(m, desc)
	case settleFinishPark:
		// Parked, but the dead-lettering did not happen before a crash: finish it.
		return r.deadLetterParked(m)
	}
	return r.duplicate(m)
}

func (r *run) hold(m *msg) {
	r.w.put(m)
	r.e.stats.held.Add(1)
	r.e.observe(Event{Kind: EventHeld, SessionID: r.s.id, Sequence: m.seq})
	if r.phase != resolving {
		// While a record is resolved Next is only a lower bound: no gap yet (the drain after the
		// resolution opens one if messages still wait).
		r.openGap()
	}
}

func (r *run) duplicate(m *msg) error {
	r.st.Counters.Duplicates++
	r.saved.dirty = true
	r.e.stats.duplicates.Add(1)
	r.e.observe(Event{Kind: EventDuplicate, SessionID: r.s.id, Sequence: m.seq})
	if !r.indexed(m) {
		// Nothing in the stored index waits for this completion.
		return r.s.completeLater(m, nil)
	}
	landed, err := r.s.complete(m)
	if err != nil {
		return err
	}
	r.noteSettled(landed, m)
	return nil
}

func (r *run) invalid(m *msg, desc string) error {
	r.st.Counters.Invalid++
	r.st.Counters.DeadLettered++
	r.saved.dirty = true
	r.e.stats.invalid.Add(1)
	r.e.stats.deadLettered.Add(1)
	r.e.observe(Event{Kind: EventInvalid, SessionID: r.s.id, Sequence: m.seq})
	if m.stored {
		return r.deadLetterHeld(m, ReasonInvalidSequence, desc)
	}
	landed, err := r.s.deadLetter(m, ReasonInvalidSequence, desc)
	if err != nil {
		return err
	}
	r.noteSettled(landed, m)
	return nil
}

func (r *run) deadLetterParked(m *msg) error {
	if m.stored {
		r.st.Parked.Held = true
		if err := r.deadLetterHeld(m, ReasonHandlerFailed, r.st.Parked.Reason); err != nil {
			return err
		}
		r.e.stats.deadLettered.Add(1)
		return nil
	}
	landed, err := r.s.deadLetter(m, ReasonHandlerFailed, r.st.Parked.Reason)
	if err != nil || !landed {
		// Refused as busy: an active message is delivered again, a deferred one keeps its
		// index entry; either way the next run finishes the parking.
		return err
	}
	r.e.stats.deadLettered.Add(1)
	if r.st.Deferred[m.seq] == m.bs {
		delete(r.st.Deferred, m.seq)
		r.saved.dirty = true
	}
	return nil
}

// indexed reports whether m is the message the deferred index lists for its sequence.
func (r *run) indexed(m *msg) bool {
	bs, ok := r.st.Deferred[m.seq]
	return ok && bs == m.bs
}

// noteSettled records the settlement of m, if it has an entry in the deferred index: landed, m is
// gone from the broker and the next save removes the entry; refused as busy, the entry stays for
// the next run (settler.landedIndexed).
func (r *run) noteSettled(landed bool, m *msg) {
	if r.indexed(m) && m.seq != 0 {
		r.s.landedIndexed(landed, m)
	}
}
