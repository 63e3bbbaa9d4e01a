package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"
)

// This file is the session loop: one RunSession call from the first receive to the release.
// A message goes receive (read against the contract once) → resolve an inherited run record →
// decide (decide.go, the core without I/O) → act: hold, settle, or hand it over in order
// (inOrder) → drain what became due. The calls the loop makes to the store, the handler and the
// broker follow at the end of the file.

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
	}
	return 0, false
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

	phase phase
	st    *State
	ver   int64
	// dirty: st has changes (counters, Last, GapSince) not yet saved.
	dirty bool
	w     window
	// record is this run's own recorded run (sequence → broker sequence number) while its
	// entries are handled; the next save ends it.
	record map[int64]int64
	// upcoming is the rest of the receive batch in hand, looked at when a run is recorded.
	upcoming []msg
	// While resolving: presentFrom is the lowest entry delivered again (0: none yet),
	// lastDelivered the highest broker sequence number delivered by Receive.
	presentFrom, lastDelivered int64
	// completed maps the application sequence of settled messages still in st.Deferred (or
	// st.SkippedPoison) to their broker sequence; the next save removes those entries.
	completed map[int64]int64
	// anchors are handled active messages whose completion waits until no handled-but-due
	// deferred work depends on them to wake the session.
	anchors []anchor
	// pendingGap is a resolved gap wait to report once saved.
	pendingGap time.Duration
	// gapAtLoad is State.GapSince as loaded: a gap open at the release but not at the load
	// opened during this run.
	gapAtLoad time.Time
	// claimed: this run has saved the state at least once, so the version has moved since any
	// earlier holder's last save (see SessionBoundStore).
	claimed bool
}

// anchor is a handled (or skipped) active message whose settlement waits for the drain.
type anchor struct {
	m *msg
	// deadLetter, when set, is the description of a HandlerFailed dead-lettering (PoisonSkip);
	// otherwise the anchor is completed.
	deadLetter string
}

func (r *run) now() time.Time { return r.e.clock.Now() }

func (r *run) log() *slog.Logger { return r.e.log.With(slog.String("session_id", r.id)) }

func (r *run) view() view {
	return view{cfg: &r.e.cfg, st: r.st, w: &r.w, resolving: r.phase == resolving}
}

// run processes the session and settles what it may before the release: it never returns
// without having decided the outcome.
func (r *run) run() (Outcome, error) {
	out, err := r.loop()
	if err != nil {
		return r.failed(err)
	}
	return r.release(out)
}

// loop loads the state and takes batches of messages until the session ends, parks, blocks,
// stops or idles.
func (r *run) loop() (Outcome, error) {
	if err := r.load(); err != nil {
		return 0, err
	}
	if len(r.st.InFlight) > 0 {
		r.phase = resolving
	}
	if err := r.startup(); err != nil {
		return 0, err
	}
	if err := r.drain(); err != nil {
		return 0, err
	}
	for {
		if r.ctx.Err() != nil {
			return 0, context.Cause(r.ctx)
		}
		if out, done := r.phase.outcome(); done {
			return out, nil
		}
		if r.stop.Err() != nil {
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
			if err := r.take(batch); err != nil {
				return 0, err
			}
		} else {
			// Nothing more at the broker: the session idles, unless that resolves an inherited
			// record or a gap timed out.
			if r.stop.Err() != nil {
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
			if !r.gapExpired() {
				return r.idle(), nil
			}
		}
		if r.gapExpired() {
			if err := r.onGapTimeout(); err != nil {
				return 0, err
			}
			if err := r.drain(); err != nil {
				return 0, err
			}
		}
	}
}

// idle returns the outcome of a session that has nothing more to receive; a gap is recorded as
// waited for from now.
func (r *run) idle() Outcome {
	if r.view().gapWaiting() {
		if r.st.GapSince.IsZero() {
			r.st.GapSince, r.dirty = r.now(), true
		}
		if !r.st.GapSince.Equal(r.gapAtLoad) {
			// The gap opened during this run: say so once; the worker's sweeper reports it again
			// while it stays open.
			lowest := r.view().lowestWaiting()
			r.log().WarnContext(r.ctx, "sequencer: session idle while a sequence is missing; later messages wait",
				slog.Int64("missing", r.st.Next), slog.Int64("lowest_waiting", lowest),
				slog.Duration("gap_timeout", r.e.cfg.GapTimeout), slog.String("gap_policy", string(r.e.cfg.GapPolicy)))
			r.e.observe(Event{Kind: EventGapOpened, SessionID: r.id, Sequence: r.st.Next, Lowest: lowest})
		}
	}
	if r.st.Parked != nil {
		return OutcomeParked
	}
	return OutcomeIdle
}

// take decides the messages of one receive batch in order, draining after each, then bounds the
// window. A block or a stop leaves the rest of the batch unsettled: it returns to the broker when
// the session is closed.
func (r *run) take(batch []msg) error {
	for i := range batch {
		if r.phase == blocked || r.stop.Err() != nil {
			break
		}
		m := &batch[i]
		r.upcoming = batch[i+1:]
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
	r.upcoming = nil
	return r.trimWindow(r.windowLimit())
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

// ---- session start ----

// startup settles what an earlier run left: an expired tombstone, a parked message still
// deferred, a resume, deferred messages already handled or beyond the last, a gap timed out.
func (r *run) startup() error {
	st := r.st
	now := r.now()
	if st.TombstoneExpired(now, r.e.cfg.tombstoneTTL()) && len(st.Deferred) == 0 && len(st.SkippedPoison) == 0 {
		if err := r.deleteState(); err != nil {
			return err
		}
		r.st, r.phase = NewState(), receiving
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
			return r.end()
		}
	}
	if err := r.settleStale(); err != nil {
		return err
	}
	if r.gapExpired() {
		return r.onGapTimeout()
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
	fetched, err := r.receiveDeferred([]int64{p.BrokerSequence})
	if err != nil {
		return err
	}
	for i := range fetched {
		m := &fetched[i]
		m.seq = p.Sequence // its broker sequence number makes it the parked message
		if err := r.deadLetterParked(m); err != nil {
			return err
		}
	}
	delete(r.st.Deferred, p.Sequence)
	return r.save()
}

// settleStale settles deferred messages that were handled (their sequence is below Next) but
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
		fetched, err := r.receiveDeferred(bss)
		if err != nil {
			return err
		}
		for i := range fetched {
			m := &fetched[i]
			if err := r.act(m, r.view().decide(m)); err != nil {
				return err
			}
		}
		for _, k := range chunk {
			r.completed[k] = st.Deferred[k]
		}
	}
	return r.save()
}

// ---- one message ----

// resolve settles an inherited run record with the active messages the broker delivers after the
// earlier run ended; m is the next one delivered, or nil when a receive found nothing more (the
// session idles: everything still at the broker has been delivered). The entries were handled in
// sequence order, each completed before the next was handled, so the ones gone from the broker
// are those below some sequence j, the real Next. The broker delivers a session's active messages
// in broker sequence order, so:
//
//   - an entry not delivered yet whose broker sequence number is lower than one delivered is gone;
//   - a delivered entry and every later one are still at the broker;
//   - an entry not delivered before the session idles is gone.
//
// Next moves past the entries known to be gone; the record is settled once the entry at Next is
// known to be there (or no entry is left). Held messages that end up below Next are duplicates.
func (r *run) resolve(m *msg) error {
	if r.phase != resolving {
		return nil
	}
	st := r.st
	if m != nil {
		r.lastDelivered = max(r.lastDelivered, m.bs)
		if bs, ok := st.InFlight[m.seq]; ok && m.invalid == "" && bs == m.bs && m.seq >= st.Next &&
			(r.presentFrom == 0 || m.seq < r.presentFrom) {
			r.presentFrom = m.seq
		}
	}
	for {
		bs, ok := st.InFlight[st.Next]
		if !ok || (r.presentFrom != 0 && st.Next >= r.presentFrom) {
			break // no entry left, or this one and the rest are still at the broker
		}
		if m != nil && bs > r.lastDelivered {
			return r.settleHeldBelowNext() // not decided yet
		}
		st.passRecorded()
		r.dirty = true
	}
	st.InFlight = nil
	r.phase, r.presentFrom = receiving, 0
	// Save the exact Next now: if this run crashes before its next save, the record would be
	// inherited again, and by then its entries may have left the broker other than by handling
	// (dead-lettered after too many deliveries), which the inference would take as handled.
	if err := r.save(); err != nil {
		return err
	}
	return r.settleHeldBelowNext()
}

// settleHeldBelowNext settles the held messages below Next (copies of entries that turned out to
// be handled): they are duplicates now.
func (r *run) settleHeldBelowNext() error {
	for _, k := range slices.Sorted(maps.Keys(r.w.held)) {
		if k >= r.st.Next {
			break
		}
		m := r.w.unhold(k)
		if err := r.act(m, r.view().decide(m)); err != nil {
			return err
		}
	}
	return nil
}

// step decides what to do with m and does it: an in-order message is handed over (inOrder),
// every other one is held or settled at once (act).
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
		r.st.GapSince, r.dirty = since, true // the wait ends with this message: reported whole
		if r.phase == parkedHere {
			r.phase = receiving
		}
	}
	switch a.kind {
	case actHandle:
		return r.inOrder(m)
	case actPassThrough:
		return r.passThrough(m)
	}
	return r.act(m, a)
}

// learnLast records the last sequence, which a message marked last revealed: the held messages
// beyond it are invalid now.
func (r *run) learnLast(last int64) error {
	r.st.Last, r.dirty = last, true
	for _, k := range slices.Sorted(maps.Keys(r.w.held)) {
		if k > last {
			m := r.w.unhold(k)
			if err := r.act(m, r.view().decide(m)); err != nil {
				return err
			}
		}
	}
	return nil
}

// act carries out every decision but actHandle: it holds m or settles it.
func (r *run) act(m *msg, a action) error {
	switch a.kind {
	case actHold:
		r.hold(m)
		return nil
	case actDuplicate:
		return r.duplicate(m)
	case actInvalid:
		return r.invalid(m, a.desc)
	case actFinishSkip:
		// Skipped as poison, but the dead-lettering did not happen before a crash.
		return r.deadLetterSkipped(m, "handler failed; dead-lettered after a restart")
	case actFinishPark:
		// Parked, but the dead-lettering did not happen before a crash: finish it.
		return r.deadLetterParked(m)
	}
	// act only ever sees a message in order by mistake: outside step, it settles held messages
	// beyond a newly known last, held messages below Next once a record is resolved, held
	// messages at the end and stale deferred ones, all of which the state puts below Next or
	// beyond the last sequence.
	return fmt.Errorf("sequencer: session %s: sequence %d (broker sequence %d) is %s where only settlement was expected",
		r.id, m.seq, m.bs, a.kind)
}

func (r *run) hold(m *msg) {
	r.w.put(m)
	r.e.stats.held.Add(1)
	r.e.observe(Event{Kind: EventHeld, SessionID: r.id, Sequence: m.seq})
	if r.st.GapSince.IsZero() {
		r.st.GapSince, r.dirty = r.now(), true
	}
}

func (r *run) duplicate(m *msg) error {
	r.st.Counters.Duplicates++
	r.dirty = true
	r.e.stats.duplicates.Add(1)
	r.e.observe(Event{Kind: EventDuplicate, SessionID: r.id, Sequence: m.seq})
	if !r.indexed(m) {
		// Nothing in the stored index waits for this completion.
		return r.completeLater(m)
	}
	if err := r.complete(m); err != nil {
		return err
	}
	r.noteSettled(m)
	return nil
}

func (r *run) invalid(m *msg, desc string) error {
	r.st.Counters.Invalid++
	r.st.Counters.DeadLettered++
	r.dirty = true
	r.e.stats.invalid.Add(1)
	r.e.stats.deadLettered.Add(1)
	r.e.observe(Event{Kind: EventInvalid, SessionID: r.id, Sequence: m.seq})
	if err := r.deadLetter(m, ReasonInvalidSequence, desc); err != nil {
		return err
	}
	r.noteSettled(m)
	return nil
}

func (r *run) deadLetterSkipped(m *msg, desc string) error {
	if err := r.deadLetter(m, ReasonHandlerFailed, desc); err != nil {
		return err
	}
	r.e.stats.deadLettered.Add(1)
	r.noteSettled(m)
	r.completed[m.seq] = m.bs
	return nil
}

func (r *run) deadLetterParked(m *msg) error {
	if err := r.deadLetter(m, ReasonHandlerFailed, r.st.Parked.Reason); err != nil {
		return err
	}
	r.e.stats.deadLettered.Add(1)
	if r.st.Deferred[m.seq] == m.bs {
		delete(r.st.Deferred, m.seq)
		r.dirty = true
	}
	return nil
}

// indexed reports whether m is the message the deferred index lists for its sequence.
func (r *run) indexed(m *msg) bool {
	bs, ok := r.st.Deferred[m.seq]
	return ok && bs == m.bs
}

// noteSettled records that m, if it has an entry in the deferred index, is gone from the broker.
func (r *run) noteSettled(m *msg) {
	if r.indexed(m) && m.seq != 0 {
		r.completed[m.seq] = m.bs
	}
}

// ---- in order ----

// inOrder hands the in-order message m to the handler and settles it, in one of the two orders
// the package documentation gives (settlementOf picks): as an entry of a recorded run, handler →
// complete (the run's record stands for the save); otherwise handler → save(Next+1) → complete,
// where a deferred message is completed at once and an active one waits as the drain's anchor
// while the message for Next is deferred. A handler that keeps failing meets the poison policy.
func (r *run) inOrder(m *msg) error {
	if err := r.pipelineErr(); err != nil {
		return err // a background completion failed: hand nothing more to the handler
	}
	if !r.e.sessionBound {
		// Fence (see SessionBoundStore): a save to this store says nothing about the session
		// lock, so the completions issued since the last save must have been answered (which
		// they are not once the lock is lost) before the handler is called again.
		if err := r.awaitSettlements(); err != nil {
			return err
		}
	}
	how, entries := r.view().settlementOf(m, !r.e.cfg.SaveEachMessage && r.e.atomic == nil, r.record, r.upcoming)
	switch {
	case entries != nil:
		if err := r.recordRun(entries); err != nil {
			return err
		}
	case !r.claimed && !r.e.sessionBound && r.e.atomic == nil:
		// Claim the session in the store before the run's first handler call: an earlier holder
		// that lost its lock without noticing can save no more, and this run goes on from the
		// state it loaded, which is the latest.
		if err := r.save(); err != nil {
			return err
		}
	}
	err := r.handleWithRetry(m, how)
	var perr *poisonError
	if errors.As(err, &perr) {
		return r.poison(m, perr.err)
	}
	if err != nil {
		return err
	}
	r.e.stats.handled.Add(1)
	r.e.observe(Event{Kind: EventHandled, SessionID: r.id, Sequence: m.seq})
	switch {
	case how == completeInRun:
		// Complete m even if a background completion (of a duplicate) has failed meanwhile: m is
		// handled, and leaving it at the broker would hand it to the handler again. Entries are
		// never the last message.
		if err := r.settleNow(CallComplete, m, r.sess.Complete); err != nil {
			return err
		}
		return r.pipelineErr()
	case r.indexed(m) || m.deferred:
		// A deferred message: the index entry stays until it is completed, so that a crash
		// in between leaves something the next run (or a sweeper) finds.
		if err := r.complete(m); err != nil {
			return err
		}
		r.noteSettled(m)
	case r.view().needsAnchor():
		r.anchors = append(r.anchors, anchor{m: m})
	default:
		if err := r.completeLater(m); err != nil {
			return err
		}
	}
	if !r.st.EndedAt.IsZero() {
		return r.end()
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
	if err := r.pipelineErr(); err != nil {
		return err
	}
	if !r.e.sessionBound {
		if err := r.awaitSettlements(); err != nil {
			return err
		}
	}
	err := r.retry(m, func() error {
		if r.e.atomic == nil {
			return r.callHandler(r.ctx, m)
		}
		stored := r.ver != 0
		same := r.st.clone()
		same.pruneSettled(r.completed)
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
	var perr *poisonError
	if errors.As(err, &perr) {
		r.log().WarnContext(r.ctx, "sequencer: handler failed on an unsequenced message, retries exhausted; dead-lettering it",
			slog.Int64("broker_sequence", m.bs), slog.Any("error", perr.err))
		if err := r.deadLetter(m, ReasonHandlerFailed, perr.err.Error()); err != nil {
			return err
		}
		r.e.stats.deadLettered.Add(1)
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Err: perr.err})
		return nil
	}
	if err != nil {
		return err
	}
	r.e.stats.handled.Add(1)
	r.e.observe(Event{Kind: EventHandled, SessionID: r.id})
	return r.completeLater(m)
}

// handleWithRetry calls the handler for the in-order message m until it succeeds or the retries
// are exhausted (*poisonError).
func (r *run) handleWithRetry(m *msg, how settlement) error {
	return r.retry(m, func() error { return r.handleOnce(m, how) })
}

// retry runs once (one handler call, with its save) until it succeeds or the retries are
// exhausted (*poisonError), re-reading the stored version after each backoff wait (verifyTenure).
// A retry of an ordered message counts in the state's counters.
func (r *run) retry(m *msg, once func() error) error {
	cfg := r.e.cfg
	for attempt := 1; ; attempt++ {
		err := once()
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
		if !m.unsequenced {
			r.st.Counters.Retries++
			r.dirty = true
		}
		r.e.stats.retries.Add(1)
		r.e.observe(Event{Kind: EventRetry, SessionID: r.id, Sequence: m.seq, Err: herr.err})
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

// handleOnce calls the handler once and, on success, advances the state and (unless m is an
// entry of the recorded run) saves it; with an AtomicStore both happen in one transaction.
// Handler errors come back as *handlerError.
func (r *run) handleOnce(m *msg, how settlement) error {
	if r.e.atomic != nil {
		next := r.st.clone()
		next.pruneSettled(r.completed)
		if wait := next.handled(m.seq, m.bs, r.now()); wait > 0 {
			r.pendingGap = wait
		}
		return r.saveWith(m, next)
	}
	if err := r.callHandler(r.ctx, m); err != nil {
		return err
	}
	if wait := r.st.handled(m.seq, m.bs, r.now()); wait > 0 {
		r.pendingGap = wait
	}
	if how == completeInRun {
		r.dirty = true
		return nil
	}
	return r.save()
}

// poison applies the poison policy to m, whose handler kept failing.
func (r *run) poison(m *msg, herr error) error {
	r.log().WarnContext(r.ctx, "sequencer: handler failed, retries exhausted", slog.Int64("sequence", m.seq),
		slog.String("policy", string(r.e.cfg.Poison)), slog.Any("error", herr))
	switch r.e.cfg.Poison {
	case PoisonBlock:
		// Record the block (operators list blocked sessions), then give the message back: the
		// broker delivers it again until it succeeds or its max delivery count dead-letters it.
		r.st.block(m.seq, m.bs, herr.Error(), r.now())
		if err := r.save(); err != nil {
			return err
		}
		r.phase = blocked
		r.e.observe(Event{Kind: EventBlocked, SessionID: r.id, Sequence: m.seq, Err: herr})
		return r.settle(CallAbandon, m, r.sess.Abandon)
	case PoisonSkip:
		r.e.observe(Event{Kind: EventDeadLettered, SessionID: r.id, Sequence: m.seq, Err: herr})
		// Save the skip together with a marker, then dead-letter: a crash in between leaves the
		// marker, and the redelivered message is dead-lettered instead of completed.
		r.st.skipPoison(m.seq, m.bs, r.now())
		if err := r.save(); err != nil {
			return err
		}
		r.e.stats.skipped.Add(1)
		if !r.indexed(m) && r.view().needsAnchor() {
			// Like a handled message, the skipped one wakes the session if the drain is cut short.
			r.anchors = append(r.anchors, anchor{m: m, deadLetter: herr.Error()})
		} else if err := r.deadLetterSkipped(m, herr.Error()); err != nil {
			return err
		}
		if !r.st.EndedAt.IsZero() {
			return r.end()
		}
		return nil
	default: // PoisonPark
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
}

// ---- drain ----

// drain hands over everything that is now in order: from the window first, then deferred
// messages fetched by broker sequence number, one receive-deferred call per consecutive run.
// A stop ends it after the message in hand; the anchors then stay unsettled and wake the session
// later.
func (r *run) drain() error {
	for r.phase != blocked && r.st.Parked == nil && r.st.EndedAt.IsZero() && r.stop.Err() == nil {
		next := r.st.Next
		if h, ok := r.w.held[next]; ok && !r.view().awaitsRecord(h) {
			if err := r.step(r.w.unhold(next)); err != nil {
				return err
			}
			continue
		}
		if m, ok := r.w.fetched[next]; ok {
			delete(r.w.fetched, next)
			if err := r.step(m); err != nil {
				return err
			}
			continue
		}
		if _, ok := r.st.Deferred[next]; !ok || r.w.missing[next] {
			break
		}
		if err := r.fetchRun(next); err != nil {
			return err
		}
	}
	if r.st.GapSince.IsZero() && r.view().gapWaiting() {
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
		if !ok || r.w.missing[k] || r.w.held[k] != nil || r.w.fetched[k] != nil {
			break
		}
		bss = append(bss, bs)
		bySeqNo[bs] = k
	}
	fetched, err := r.receiveDeferred(bss)
	if err != nil {
		return err
	}
	for i := range fetched {
		m := &fetched[i]
		if k, ok := bySeqNo[m.bs]; ok {
			r.w.fetched[k] = m
			delete(bySeqNo, m.bs)
		}
	}
	for _, k := range bySeqNo {
		r.w.missing[k] = true
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
	if len(r.anchors) == 0 || r.view().needsAnchor() {
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

// ---- window, gaps, end, release ----

func (r *run) windowLimit() int {
	if r.st.Parked != nil {
		return 0
	}
	return r.e.cfg.windowMessages()
}

// trimWindow defers the held messages furthest ahead until at most limit messages and
// WindowBytes remain (view.overflow): one state save records them all, then each is deferred.
func (r *run) trimWindow(limit int) error {
	evict := r.view().overflow(limit)
	if len(evict) == 0 {
		return nil
	}
	for _, m := range evict {
		r.w.unhold(m.seq)
		r.st.recordDeferral(m.seq, m.bs)
		delete(r.w.missing, m.seq)
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
		r.e.observe(Event{Kind: EventDeferred, SessionID: r.id, Sequence: m.seq})
	}
	return nil
}

// gapExpired reports whether the gap policy acts now: a missing sequence has been waited for
// GapTimeout and the policy is not GapWait.
func (r *run) gapExpired() bool {
	gt := r.e.cfg.GapTimeout
	return gt > 0 && r.e.cfg.GapPolicy != GapWait && !r.st.GapSince.IsZero() && r.view().gapWaiting() &&
		r.now().Sub(r.st.GapSince) >= gt
}

// onGapTimeout applies the gap policy to a gap waited for GapTimeout.
func (r *run) onGapTimeout() error {
	if r.e.cfg.GapPolicy == GapPark {
		return r.parkGap()
	}
	return r.skipGap()
}

// parkGap parks the session on the missing sequence Next (GapPark): what waits behind it is
// deferred when the run releases the session, and an operator resumes it (once the message is
// found and sent again) or skips it.
func (r *run) parkGap() error {
	missing, since := r.st.Next, r.st.GapSince
	lowest := r.view().lowestWaiting()
	reason := fmt.Sprintf("gap timeout: sequence %d missing since %s", missing, since.UTC().Format(time.RFC3339))
	r.log().WarnContext(r.ctx, "sequencer: gap timeout, parking the session on the missing sequence",
		slog.Int64("missing", missing), slog.Int64("lowest_waiting", lowest), slog.Time("gap_since", since))
	r.st.parkOnGap(reason, r.now())
	if err := r.save(); err != nil {
		return err
	}
	r.e.stats.parked.Add(1)
	r.phase = parkedHere
	r.e.observe(Event{Kind: EventParked, SessionID: r.id, Sequence: missing, Lowest: lowest})
	return nil
}

// skipGap advances Next to the lowest sequence that is waiting (held or deferred).
func (r *run) skipGap() error {
	lowest := r.view().lowestWaiting()
	if lowest == 0 {
		return nil
	}
	from := r.st.Next
	r.log().WarnContext(r.ctx, "sequencer: gap timeout, skipping missing sequences",
		slog.Int64("from", from), slog.Int64("to", lowest-1))
	skipped, wait := r.st.skipTo(lowest, r.now())
	r.e.stats.skipped.Add(skipped)
	r.pendingGap = wait
	r.e.observe(Event{Kind: EventSkipped, SessionID: r.id, Sequence: from})
	return r.save()
}

// end runs once the last message is handled (or skipped): it settles what is left, then deletes
// the state or turns it into a tombstone.
func (r *run) end() error {
	r.phase = ended
	// Every completion must be done before the state becomes a tombstone or is deleted: a message
	// redelivered after the delete would start a new sequence.
	if err := r.awaitSettlements(); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(r.w.held)) {
		m := r.w.unhold(k)
		if err := r.act(m, r.view().decide(m)); err != nil {
			return err
		}
	}
	if err := r.settleStale(); err != nil {
		return err
	}
	if err := r.settleDrain(); err != nil {
		return err
	}
	r.st.pruneSettled(r.completed)
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

// ---- calls: state store ----

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
	r.st, r.ver, r.gapAtLoad = st, ver, st.GapSince
	return nil
}

// save writes r.st as it is, without the index entries of messages settled meanwhile. In memory
// State.InFlight holds an inherited record until it is resolved and is empty otherwise, so every
// save writes the exact Next; only recordRun writes a run's record. A save ends the run's own
// record: the entries left are handled with saves of their own.
func (r *run) save() error {
	r.st.pruneSettled(r.completed)
	clear(r.completed)
	r.st.UpdatedAt = r.now()
	r.e.stats.storeCalls.Add(1)
	ver, err := r.e.store.Save(r.ctx, SaveParams{Session: r.sess, State: r.st, ExpectedVersion: r.ver})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: saving state (next %d): %w", r.id, r.st.Next, err)
	}
	r.ver, r.dirty, r.record, r.claimed = ver, false, nil, true
	r.flushGap()
	return nil
}

// recordRun saves the record of a new run (State.InFlight = entries, Next still at the first).
func (r *run) recordRun(entries map[int64]int64) error {
	r.st.InFlight = entries
	err := r.save()
	r.st.InFlight = nil
	if err != nil {
		return err
	}
	r.record = entries
	r.e.stats.runs.Add(1)
	return nil
}

// saveWith runs the handler for m and saves next (the state with m handled) in one transaction
// of the AtomicStore. A handler error comes back as *handlerError.
func (r *run) saveWith(m *msg, next *State) error {
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
	r.st, r.ver, r.dirty, r.record, r.claimed = next, ver, false, nil, true
	r.flushGap()
	return nil
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
	r.ver, r.dirty, r.record = 0, false, nil
	return nil
}

// verifyTenure checks, after a retry wait in which the engine made no call that would have shown
// a lost session lock, that the run still holds the session before it hands the message over
// again: the lock is renewed (a store that is not session-bound cannot tell), and the stored
// version is re-read; if another holder wrote the state meanwhile (the lock was lost and taken
// again behind the engine's back, see the package documentation), the engine stops.
func (r *run) verifyTenure() error {
	if !r.e.sessionBound {
		r.e.stats.calls[CallRenewLock].Add(1)
		if _, err := r.sess.RenewLock(r.ctx); err != nil {
			return r.sessErr(CallRenewLock, err)
		}
	}
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

// ---- calls: handler ----

type poisonError struct{ err error }

func (p *poisonError) Error() string { return p.err.Error() }
func (p *poisonError) Unwrap() error { return p.err }

type handlerError struct{ err error }

func (h *handlerError) Error() string { return h.err.Error() }
func (h *handlerError) Unwrap() error { return h.err }

func (r *run) callHandler(ctx context.Context, m *msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log().ErrorContext(ctx, "sequencer: handler panicked", slog.Int64("sequence", m.seq),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = &handlerError{err: fmt.Errorf("handler panic: %v", p)}
		}
	}()
	if err := r.e.handler.Handle(ctx, m.raw); err != nil {
		return &handlerError{err: err}
	}
	return nil
}

// ---- calls: broker ----

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
func (r *run) settle(kind CallKind, m *msg, fn func(context.Context, *Message) error) error {
	if err := r.awaitSettlements(); err != nil {
		return err
	}
	return r.settleNow(kind, m, fn)
}

// settleNow runs one settlement; background completions call it concurrently with the run.
func (r *run) settleNow(kind CallKind, m *msg, fn func(context.Context, *Message) error) error {
	if r.lost.Load() {
		return r.sessErr(kind, ErrLockLost)
	}
	r.e.stats.calls[kind].Add(1)
	if err := fn(r.ctx, m.raw); err != nil {
		return r.sessErr(kind, err)
	}
	return nil
}

func (r *run) complete(m *msg) error { return r.settle(CallComplete, m, r.sess.Complete) }

func (r *run) deadLetter(m *msg, reason, desc string) error {
	return r.settle(CallDeadLetter, m, func(ctx context.Context, m *Message) error {
		return r.sess.DeadLetter(ctx, m, DeadLetterParams{Reason: reason, Description: desc})
	})
}

// receive waits for the next batch of active messages, read against the contract. An empty batch
// means the idle timeout or a stop ended the wait.
func (r *run) receive() ([]msg, error) {
	rctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	idle := r.e.clock.AfterFunc(r.e.cfg.IdleTimeout, cancel)
	defer idle.Stop()
	stopWatch := context.AfterFunc(r.stop, cancel)
	defer stopWatch()
	r.e.stats.calls[CallReceive].Add(1)
	raw, err := r.sess.Receive(rctx, r.e.cfg.ReceiveBatch)
	if err != nil {
		if rctx.Err() != nil && r.ctx.Err() == nil && !errors.Is(err, ErrLockLost) {
			return r.e.read(raw, false), nil // the idle timer or a stop ended the receive
		}
		return nil, r.sessErr(CallReceive, err)
	}
	return r.e.read(raw, false), nil
}

// receiveDeferred fetches deferred messages by broker sequence number, read against the contract.
func (r *run) receiveDeferred(bss []int64) ([]msg, error) {
	if r.lost.Load() {
		return nil, r.sessErr(CallReceiveDeferred, ErrLockLost)
	}
	r.e.stats.calls[CallReceiveDeferred].Add(1)
	raw, err := r.sess.ReceiveDeferred(r.ctx, bss)
	if err != nil {
		return nil, r.sessErr(CallReceiveDeferred, err)
	}
	return r.e.read(raw, true), nil
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

// ---- calls: background completions ----

// completeLater completes m, an in-order or duplicate active message whose handling is saved and
// that no index entry or drain depends on. With pipelining it returns once the completion is
// started (after waiting for a free slot); its error surfaces at the next completeLater, before
// the next handler call, or when the pipeline is awaited. Without pipelining it completes m now.
func (r *run) completeLater(m *msg) error {
	p := r.pipe
	if p == nil {
		return r.complete(m)
	}
	if err := p.failure(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-r.ctx.Done():
		return fmt.Errorf("sequencer: session %s: waiting to complete broker sequence %d: %w", r.id, m.bs, context.Cause(r.ctx))
	}
	if r.lost.Load() {
		<-p.slots
		return r.sessErr(CallComplete, ErrLockLost)
	}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		if err := r.settleNow(CallComplete, m, r.sess.Complete); err != nil {
			p.fail(err)
		}
	})
	return nil
}

// pipelineErr reports the error of a background completion that has already finished.
func (r *run) pipelineErr() error {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.failure()
}

// awaitSettlements waits for every background completion and returns the first error. It runs
// before every other settlement, at the end of a session and before the session is released.
func (r *run) awaitSettlements() error {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.wait()
}
