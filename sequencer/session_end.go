package sequencer

import (
	"maps"
	"slices"
)

// end runs once the last message is handled (or skipped): it settles what is left, then deletes
// the state or turns it into a tombstone.
func (r *run) end() error {
	r.phase = ended
	// Every completion must be done before the state becomes a tombstone or is deleted: a message
	// redelivered after the delete would start a new sequence.
	if err := r.s.await(); err != nil {
		return err
	}
	// The save that handled the last message stored the tombstone. With nothing held, deferred
	// or changed since, what follows settles nothing and changes nothing: writing the same state
	// again would cost a store call per session (a broker call with Service Bus session state).
	unchanged := r.saved.ended && !r.saved.dirty && len(r.w.held) == 0 && len(r.st.Deferred) == 0
	for _, k := range slices.Sorted(maps.Keys(r.w.held)) {
		m := r.w.unhold(k)
		if err := r.settleLeftover(m); err != nil {
			return err
		}
	}
	if err := r.settleStale(); err != nil {
		return err
	}
	if err := r.settleDrain(); err != nil {
		return err
	}
	r.st.pruneSettled(r.s.settled)
	if r.e.cfg.tombstoneTTL() == 0 && len(r.st.Deferred) == 0 && len(r.st.SkippedPoison) == 0 {
		if err := r.deleteState(); err != nil {
			return err
		}
	} else if !unchanged {
		if err := r.save(); err != nil {
			return err
		}
	}
	r.e.observe(Event{Kind: EventSessionEnded, SessionID: r.s.id, Sequence: r.st.Last})
	return nil
}

// release ends a run that may settle: the window is deferred, the state saved if it changed and
// the anchors completed when nothing depends on them.
func (r *run) release(out Outcome) (Outcome, error) {
	r.dropNextBatch()
	if r.way.pending() || r.st.Ahead {
		// The last save must cover what was handled ahead of it and clear the Ahead mark: the
		// next holder then need not wait for this one.
		r.saved.dirty = true
	}
	if err := r.s.await(); err != nil {
		return r.failed(err)
	}
	if err := r.trimWindow(0); err != nil {
		return r.failed(err)
	}
	if r.saved.dirty || len(r.s.settled) > 0 {
		if r.st.EndedAt.IsZero() || r.saved.ver != 0 || len(r.st.Deferred) > 0 {
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
