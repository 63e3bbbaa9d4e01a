package sequencer

import (
	"context"
	"fmt"
	"time"
)

// This file saves a run's state in the background while the handler goes on, for one save each
// with pipelined runs (EngineConfig.SaveEachMessage and PipelineRuns; see "One save each,
// pipelined" in the package documentation): every handled message is still covered by a save of
// the exact Next before it is completed, but the next handler call does not wait for that save.
// One save is in flight at a time (each expects the version the one before returned); the
// messages handled meanwhile go into the next one.

// aheadSave is the run's save in flight in the background.
type aheadSave struct {
	st *State // what it stores (a copy: the run goes on changing its own)
	// covers are the messages handled up to it, completed once it has landed.
	covers []*msg
	// gap is a resolved gap wait it records, reported once it has landed.
	gap  time.Duration
	done chan struct{}
	ver  int64
	err  error
}

// aheadMode reports whether messages saved one by one may be handed over ahead of their saves.
func (r *run) aheadMode() bool {
	return r.e.cfg.SaveEachMessage && r.s.pipelinedRuns() && r.e.atomic == nil
}

// goesAhead reports whether the in-order message m, settled handler → save → complete, may be
// handed over ahead of its save: an active message that no index entry names and that does not
// end the session (the tombstone's save comes before the last message is completed, and nothing
// is handed over after it).
func (r *run) goesAhead(m *msg, how settlement) bool {
	return how == saveThenComplete && r.aheadMode() && !m.last && !m.deferred && !r.indexed(m) &&
		(r.st.Last == 0 || m.seq < r.st.Last)
}

// handledAhead queues m, handled, for the next background save and keeps the saves going.
func (r *run) handledAhead(m *msg) error {
	r.unsaved = append(r.unsaved, m)
	return r.pumpAhead()
}

// pumpAhead lands the save in flight if it is done, or waits for it when the handler has gone
// as far ahead as MaxPendingSettlements allows or when the stored state does not say Ahead yet
// (a handler call may go ahead of the saves only once a save with Ahead has landed: the next
// holder must find it), then starts the save of what was handled since.
func (r *run) pumpAhead() error {
	if a := r.ahead; a != nil {
		wait := !r.aheadStored || len(a.covers)+len(r.unsaved) > r.e.cfg.MaxPendingSettlements
		if err := r.landAhead(wait); err != nil {
			return err
		}
	}
	if r.ahead != nil || len(r.unsaved) == 0 {
		return nil
	}
	r.startAhead()
	if !r.aheadStored {
		return r.landAhead(true)
	}
	return nil
}

// startAhead starts the background save of the state as it is, with Ahead, covering the
// messages handled since the last save.
func (r *run) startAhead() {
	r.st.pruneSettled(r.s.settled)
	clear(r.s.settled)
	r.st.UpdatedAt = r.now()
	r.st.Ahead = true
	a := &aheadSave{st: r.st.clone(), covers: r.unsaved, gap: r.pendingGap, done: make(chan struct{})}
	r.unsaved, r.pendingGap, r.dirty = nil, 0, false
	r.ahead = a
	expected := r.ver
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
	a := r.ahead
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
	r.ahead = nil
	if a.err != nil {
		return fmt.Errorf("sequencer: session %s: saving state (next %d): %w", r.id, a.st.Next, a.err)
	}
	r.ver, r.claimed, r.aheadStored = a.ver, true, true
	if r.e.sessionBound {
		r.s.noteAnswered(a.st.UpdatedAt) // the store's save is a call on the session
	}
	r.reportGap(a.gap, a.st.Next)
	for _, m := range a.covers {
		if err := r.s.completeLater(m); err != nil {
			return err
		}
	}
	return nil
}

// flushAhead lands the save in flight, if any, before a save of the run's own: one save at a
// time.
func (r *run) flushAhead() error {
	if r.ahead == nil {
		return nil
	}
	return r.landAhead(true)
}

// waitAhead waits for the save in flight to return, so that nothing of the run outlives it.
func (r *run) waitAhead() {
	if r.ahead != nil {
		<-r.ahead.done
	}
}
