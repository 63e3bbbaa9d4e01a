package sequencer

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// This file saves a run's state in the background while the handler goes on, in two cases. For
// one save each with pipelined runs (EngineConfig.SaveEachMessage and Pipelined; see "One
// save each, pipelined" in the package documentation): every handled message is still covered by
// a save of the exact Next before it is completed, but the next handler call does not wait for
// that save. And for a recorded run that extends over the next batch, received while its entries
// are handled (extendRun; see "Extended runs"). One save is in flight at a time (each expects the
// version the one before returned); the messages handled meanwhile go into the next one.

// aheadSave is the run's save in flight in the background.
type aheadSave struct {
	st *State // what it stores (a copy: the run goes on changing its own)
	// covers are the messages handled up to it, completed once it has landed.
	covers []*msg
	// gap is a resolved gap wait it records, reported once it has landed.
	gap time.Duration
	// record is the extended run it records (extendRun), the run's record once it has landed.
	record map[int64]int64
	done   chan struct{}
	ver    int64
	err    error
}

// pipelining is what the pipelined strategies' decisions look at besides the view.
func (r *run) pipelining() pipelining {
	return pipelining{
		runs:         r.e.strategy == pipelinedRuns,
		ahead:        r.e.strategy == saveAhead,
		recordStored: r.runs.record != nil && r.bg.save == nil && r.phase == receiving,
		pending:      len(r.bg.unsaved) + r.s.inFlight(),
	}
}

// handledAhead queues m, handled, for the next save and, with one save each, keeps the
// background saves going; the tail of a recorded run waits for the last message's save.
func (r *run) handledAhead(m *msg) error {
	r.bg.unsaved = append(r.bg.unsaved, m)
	if r.e.strategy != saveAhead {
		return nil
	}
	return r.pumpAhead()
}

// aheadAtBatchEnd, with one save each, pipelined, keeps what was handled from waiting for the
// next batch: when that batch is in hand already its messages keep the saves going, otherwise
// the run saves and completes everything handled before it waits for the broker (up to the idle
// timeout).
func (r *run) aheadAtBatchEnd() error {
	if r.e.strategy != saveAhead || len(r.bg.unsaved) == 0 && r.bg.save == nil {
		return nil
	}
	if r.peekNextBatch() != nil {
		return r.pumpAhead()
	}
	if err := r.flushAhead(); err != nil {
		return err
	}
	if len(r.bg.unsaved) == 0 {
		return nil
	}
	r.startAhead()
	return r.flushAhead()
}

// pumpAhead lands the save in flight if it is done, or waits for it when the handler has gone
// as far ahead as MaxPendingSettlements allows or when the stored state does not say Ahead yet
// (a handler call may go ahead of the saves only once a save with Ahead has landed: the next
// holder must find it), then starts the save of what was handled since.
func (r *run) pumpAhead() error {
	if a := r.bg.save; a != nil {
		wait := !r.bg.aheadStored || len(a.covers)+len(r.bg.unsaved) > r.e.cfg.MaxPendingSettlements
		if err := r.landAhead(wait); err != nil {
			return err
		}
	}
	if r.bg.save != nil || len(r.bg.unsaved) == 0 || r.view().gathersAhead(r.bg.aheadStored, len(r.runs.upcoming), len(r.bg.unsaved)) {
		return nil
	}
	r.startAhead()
	if !r.bg.aheadStored {
		return r.landAhead(true)
	}
	return nil
}

// startAhead starts the background save of the state as it is, with Ahead, covering the
// messages handled since the last save.
func (r *run) startAhead() {
	r.st.Ahead = true
	r.saveInBackground(&aheadSave{st: r.snapshot(), covers: r.bg.unsaved, gap: r.gap.pending})
	r.bg.unsaved, r.gap.pending, r.saved.dirty = nil, 0, false
}

// snapshot readies the state for a save (the index entries of messages settled since out, the
// time of the save in) and returns a copy the run may go on changing.
func (r *run) snapshot() *State {
	r.st.pruneSettled(r.s.settled)
	clear(r.s.settled)
	r.st.UpdatedAt = r.now()
	return r.st.clone()
}

// saveInBackground makes a the run's save in flight and starts it on one of the engine's
// workers, expecting the version the run last saved.
func (r *run) saveInBackground(a *aheadSave) {
	a.done = make(chan struct{})
	r.bg.save = a
	expected := r.saved.ver
	r.e.stats.storeCalls.Add(1)
	r.e.workers.run(func() {
		defer close(a.done)
		a.ver, a.err = r.e.store.Save(r.ctx, SaveParams{Session: r.sess, State: a.st, ExpectedVersion: expected})
	})
}

// landAhead takes the result of the save in flight, waiting for it when wait is set (otherwise
// it returns at once if the save is not done), and completes the messages it covers. A failed
// save fails the run, as any failed save does.
func (r *run) landAhead(wait bool) error {
	a := r.bg.save
	if wait {
		select {
		case <-a.done:
		case <-r.ctx.Done():
			return fmt.Errorf("sequencer: session %s: waiting for the state save (next %d): %w", r.id, a.st.Next, context.Cause(r.ctx))
		}
	} else {
		select {
		case <-a.done:
		default:
			return nil
		}
	}
	r.bg.save = nil
	if a.err != nil {
		return fmt.Errorf("sequencer: session %s: saving state (next %d): %w", r.id, a.st.Next, a.err)
	}
	r.saved.ver, r.saved.claimed, r.bg.aheadStored = a.ver, true, a.st.Ahead
	if a.record != nil {
		r.runs.record = a.record
		r.e.stats.runs.Add(1)
	}
	if r.e.sessionBound {
		r.s.noteAnswered(a.st.UpdatedAt) // the store's save is a call on the session
	}
	r.reportGap(a.gap, a.st.Next)
	for _, m := range a.covers {
		if err := r.s.completeLater(m, a.record != nil); err != nil {
			return err
		}
	}
	return nil
}

// extendRun extends the recorded run over the next batch when that batch has already been
// received (askNextBatch) while m, an entry of the run, is about to be handed over: the record of
// the run from m on over everything in hand is saved in the background, and the entries past the
// current record wait only for that save to land (landExtension), not for a save of their own
// after the entries before them were handled. See "Extended runs" in the package documentation.
func (r *run) extendRun(m *msg) {
	if r.bg.save != nil || r.runs.record == nil || r.e.strategy != pipelinedRuns {
		return
	}
	more := r.peekNextBatch()
	if more == nil {
		return
	}
	entries := r.view().lookahead(m, append(slices.Clip(r.runs.upcoming), more...))
	extends := false
	for seq, bs := range entries {
		if was, ok := r.runs.record[seq]; !ok || was != bs {
			extends = true
			break
		}
	}
	if !extends {
		return
	}
	st := r.snapshot()
	st.InFlight = entries
	r.saveInBackground(&aheadSave{st: st, record: entries})
}

// landExtension lands the extension of the run in flight, if any, when it is done, and otherwise
// says whether m may be handed over before it lands (view.extensionOf): early, its completion
// then waits for the extension (aheadSave.covers); otherwise it waits for the extension to land.
func (r *run) landExtension(m *msg) (early bool, err error) {
	a := r.bg.save
	if a == nil || a.record == nil {
		return false, nil
	}
	if err := r.landAhead(false); err != nil || r.bg.save == nil {
		return false, err
	}
	switch r.view().extensionOf(m, r.runs.record, a.record, len(a.covers)+r.s.inFlight()) {
	case extensionNone:
		return false, nil
	case extensionEarly:
		return true, nil
	}
	return false, r.landAhead(true)
}

// flushAhead lands the save in flight, if any, before a save of the run's own: one save at a
// time.
func (r *run) flushAhead() error {
	if r.bg.save == nil {
		return nil
	}
	return r.landAhead(true)
}

// waitAhead waits for the save in flight to return, so that nothing of the run outlives it.
func (r *run) waitAhead() {
	if r.bg.save != nil {
		<-r.bg.save.done
	}
}
