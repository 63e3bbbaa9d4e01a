package sequencer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// background is a run's saves in the background while the handler goes on, for one save each,
// pipelined, and for pipelined runs (an extension, the tail of a run). One save is in flight at a
// time (each expects the version the one before returned); the messages handled meanwhile go into
// the next one.
type background struct {
	// save is the save in flight.
	save *aheadSave
	// unsaved are the messages handled since it started, completed once a later save landed.
	unsaved []*msg
	// aheadStored: the last save that landed said Ahead.
	aheadStored bool
}

// aheadSave is a save in flight in the background.
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

// startAhead starts the background save of the state as it is, with Ahead, covering the
// messages handled since the last save.
func (b *background) startAhead(r *run) {
	r.st.Ahead = true
	b.start(r, &aheadSave{st: r.snapshot(), covers: b.unsaved, gap: r.saved.gap})
	b.unsaved, r.saved.gap, r.saved.dirty = nil, 0, false
}

// snapshot readies the state for a save (the index entries of messages settled since out, the
// time of the save in) and returns a copy the run may go on changing.
func (r *run) snapshot() *State {
	r.st.pruneSettled(r.s.settled)
	clear(r.s.settled)
	r.st.UpdatedAt = r.now()
	return r.st.clone()
}

// start makes a the save in flight and starts it on one of the engine's workers, expecting the
// version the run last saved.
func (b *background) start(r *run, a *aheadSave) {
	a.done = make(chan struct{})
	b.save = a
	expected := r.saved.ver
	r.e.stats.storeCalls.Add(1)
	r.e.workers.run(func() {
		defer close(a.done)
		a.ver, a.err = r.e.store.Save(r.ctx, SaveParams{Session: r.s.sess, State: a.st, ExpectedVersion: expected})
	})
}

// land takes the result of the save in flight, waiting for it when wait is set (otherwise it
// returns at once if the save is not done), and completes the messages it covers; an extension
// becomes the record of rec. A failed save fails the run, as any failed save does.
func (b *background) land(r *run, wait bool, rec *recordedRuns) error {
	a := b.save
	if wait {
		select {
		case <-a.done:
		case <-r.ctx.Done():
			return fmt.Errorf("sequencer: session %s: waiting for the state save (next %d): %w", r.s.id, a.st.Next, context.Cause(r.ctx))
		}
	} else {
		select {
		case <-a.done:
		default:
			return nil
		}
	}
	b.save = nil
	if a.err != nil {
		return fmt.Errorf("sequencer: session %s: saving state (next %d): %w", r.s.id, a.st.Next, a.err)
	}
	r.saved.ver, r.saved.claimed, b.aheadStored = a.ver, true, a.st.Ahead
	if a.record != nil {
		rec.record = a.record
		r.e.stats.runs.Add(1)
	}
	if r.e.sessionBound {
		r.s.noteAnswered(a.st.UpdatedAt) // the store's save is a call on the session
	}
	r.reportGap(a.gap, a.st.Next)
	var refused *atomic.Int64
	if a.record != nil {
		refused = &rec.refused
	}
	for _, m := range a.covers {
		if err := r.s.completeLater(m, refused); err != nil {
			return err
		}
	}
	return nil
}

// flush lands the save in flight, if any.
func (b *background) flush(r *run, rec *recordedRuns) error {
	if b.save == nil {
		return nil
	}
	return b.land(r, true, rec)
}

// stored follows a save of the run's own, which covers what was handled ahead of it and does
// not say Ahead: those messages are completed.
func (b *background) stored(r *run) error {
	b.aheadStored = false
	unsaved := b.unsaved
	b.unsaved = nil
	for _, m := range unsaved {
		if err := r.s.completeLater(m, nil); err != nil {
			return err
		}
	}
	return nil
}

func (b *background) pending() bool { return b.save != nil || len(b.unsaved) > 0 }

func (b *background) wait() {
	if b.save != nil {
		<-b.save.done
	}
}
