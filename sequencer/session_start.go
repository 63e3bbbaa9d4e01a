package sequencer

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
)

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
	if r.opts.resume != nil && st.Parked != nil {
		r.log().InfoContext(r.ctx, "sequencer: resuming parked session", slog.Int64("sequence", st.Parked.Sequence),
			slog.Bool("skip", r.opts.resume.Skip))
		st.Unpark(r.opts.resume.Skip, now)
		if r.opts.resume.Skip {
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

// finishParking dead-letters a parked message that is still set aside (a crash came between the
// parked save and the dead-lettering).
func (r *run) finishParking() error {
	p := r.st.Parked
	if p == nil || r.st.Deferred[p.Sequence] != p.BrokerSequence {
		return nil
	}
	fetched, err := r.e.keep.fetch(r, map[int64]int64{p.Sequence: p.BrokerSequence})
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
// whose completion was lost (or refused as busy), and dead-letters deferred messages beyond a
// known last sequence. An entry whose message the broker no longer holds is dropped; one whose
// settlement the broker refused as busy stays, and this run does not look for it again.
func (r *run) settleStale() error {
	st := r.st
	var stale []int64
	for k, bs := range st.Deferred {
		if done, ok := r.s.settled[k]; (ok && done == bs) || r.s.refusedHere(k, bs) {
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
		entries := make(map[int64]int64, len(chunk))
		for _, k := range chunk {
			entries[k] = st.Deferred[k]
		}
		fetched, err := r.e.keep.fetch(r, entries)
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
			if bs := st.Deferred[k]; !r.s.refusedHere(k, bs) {
				r.s.settled[k] = bs // settled now, or gone from the broker
			}
		}
	}
	return r.save()
}

// resolve settles an inherited run record with the active messages the broker delivers after the
// earlier run ended; m is the next one delivered, or nil when a receive found nothing more. Each
// entry is decided by the rules of "Recorded runs" in the package documentation.
func (r *run) resolve(m *msg) error {
	if r.phase != resolving {
		return nil
	}
	st := r.st
	if m != nil {
		r.inherited.lastDelivered = max(r.inherited.lastDelivered, m.bs)
		if bs, ok := st.InFlight[m.seq]; ok && m.invalid == "" && bs == m.bs && m.seq >= st.Next {
			if r.inherited.present == nil {
				r.inherited.present = map[int64]bool{}
			}
			r.inherited.present[m.seq] = true
		}
	}
	if m != nil {
		if err := r.peekPassed(); err != nil {
			return err
		}
	}
	var gone int64
	undecided := false
	for seq, bs := range st.InFlight {
		switch {
		case seq < st.Next || r.inherited.present[seq]:
		case m != nil && (bs > r.inherited.lastDelivered || r.inherited.peeked[seq]):
			undecided = true
		default:
			gone = max(gone, seq)
		}
	}
	for st.Next <= gone {
		st.passRecorded()
		r.saved.dirty = true
	}
	if undecided {
		return r.settleHeldBelowNext() // not decided yet
	}
	st.InFlight = nil
	r.phase, r.inherited.present, r.inherited.peeked = receiving, nil, nil
	// Save the exact Next now: if this run crashes before its next save, the record would be
	// inherited again, and by then its entries may have left the broker other than by handling
	// (dead-lettered after too many deliveries), which the inference would take as handled.
	if err := r.save(); err != nil {
		return err
	}
	return r.settleHeldBelowNext()
}

// peekPassed asks the broker, when the session can tell (HoldingSession), whether it still holds
// the entries not delivered although a later message was: each entry is asked about once, and
// one the broker holds is then left to be delivered (or the session to idle).
func (r *run) peekPassed() error {
	hs, ok := r.s.sess.(HoldingSession)
	if !ok {
		return nil
	}
	var ask []int64
	for seq, bs := range r.st.InFlight {
		if _, asked := r.inherited.peeked[seq]; !asked && seq >= r.st.Next && !r.inherited.present[seq] && bs < r.inherited.lastDelivered {
			ask = append(ask, bs)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	r.e.stats.calls[CallPeek].Add(1)
	held, err := hs.Holding(r.ctx, ask)
	if errors.Is(err, ErrNoPeek) {
		return nil // as without a HoldingSession ("Recorded runs")
	}
	if err != nil {
		return r.s.callErr(CallPeek, err)
	}
	if r.inherited.peeked == nil {
		r.inherited.peeked = map[int64]bool{}
	}
	for seq, bs := range r.st.InFlight {
		if slices.Contains(ask, bs) {
			r.inherited.peeked[seq] = slices.Contains(held, bs)
			if r.inherited.peeked[seq] {
				// Broker order would have taken it as handled: worth a line when a replay is studied.
				r.log().InfoContext(r.ctx, "sequencer: an entry of the inherited run record is delivered after a later message; waiting for it",
					slog.Int64("sequence", seq), slog.Int64("broker_sequence", bs), slog.Int64("later_broker_sequence", r.inherited.lastDelivered))
			}
		}
	}
	return nil
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
