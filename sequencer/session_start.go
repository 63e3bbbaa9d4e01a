package sequencer

import (
	"log/slog"
	"maps"
	"slices"
)

// This file is what a run does before it takes messages: it settles what an earlier run left
// (startup), and, while an inherited run record is unresolved, learns the real Next from what the
// broker delivers (resolve).

// startup settles what an earlier run left: an expired tombstone, a parked message still
// deferred, a resume, deferred messages already handled or beyond the last, a gap timed out.
func (r *run) startup() error {
	st := r.st
	now := r.now()
	if st.TombstoneClearable(now, r.e.cfg.tombstoneTTL()) {
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
	if act := r.view().gapPolicy(r.now()); act != gapNone {
		return r.onGapTimeout(act)
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
		if done, ok := r.s.settled[k]; ok && done == bs {
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
			if err := r.settleLeftover(m); err != nil {
				return err
			}
		}
		for _, k := range chunk {
			r.s.settled[k] = st.Deferred[k]
		}
	}
	return r.save()
}

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
		if err := r.settleLeftover(m); err != nil {
			return err
		}
	}
	return nil
}
