package sequencer

import (
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// drain hands over everything that is now in order: from the window first, then deferred
// messages fetched by broker sequence number, one receive-deferred call per consecutive run.
// A stop ends it after the message in hand; the anchors then stay unsettled and wake the session
// later. A released retry that is not due (cooling) holds it up.
func (r *run) drain() error {
	for r.phase != blocked && r.st.Parked == nil && r.st.EndedAt.IsZero() && r.opts.stop.Err() == nil && !r.cooling() {
		next := r.st.Next
		if h, ok := r.w.held[next]; ok && !r.view().awaitsRecord(h) && !r.view().recorded(h) {
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
	if r.view().gapWaiting() {
		r.openGap()
	}
	return r.settleDrain()
}

// fetchRun brings back the set-aside messages for the consecutive run of sequences starting at
// from (the keeper's fetch).
func (r *run) fetchRun(from int64) error {
	entries := map[int64]int64{}
	bySeqNo := map[int64]int64{}
	for k := from; len(entries) < r.e.cfg.DeferredBatch; k++ {
		bs, ok := r.st.Deferred[k]
		if !ok || r.w.missing[k] || r.w.held[k] != nil || r.w.fetched[k] != nil {
			break
		}
		entries[k] = bs
		bySeqNo[bs] = k
	}
	fetched, err := r.e.keep.fetch(r, entries)
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
	if len(r.s.settled) > 0 {
		if err := r.save(); err != nil {
			return err
		}
	}
	if len(r.s.anchors) == 0 || r.view().needsAnchor() {
		return nil
	}
	if r.saved.dirty {
		if err := r.save(); err != nil {
			return err
		}
	}
	return r.s.settleAnchors()
}

func (r *run) windowLimit() int {
	if r.st.Parked != nil {
		return 0
	}
	return r.e.cfg.windowMessages()
}

// trimWindow sets aside the held messages furthest ahead until at most limit messages and
// WindowBytes remain (view.overflow): deferred at the broker or held in the store, as the keeper
// says, one state write recording them all. After a bound of EngineConfig.Held was reached
// (heldFull) nothing more is set aside: what the window holds returns to the broker.
func (r *run) trimWindow(limit int) error {
	if r.phase == heldFull {
		return nil
	}
	evict := r.view().overflow(limit)
	if len(evict) == 0 {
		return nil
	}
	slices.Reverse(evict) // nearest first
	if err := r.e.keep.setAside(r, evict, true); err != nil || r.phase == heldFull {
		return err
	}
	for _, m := range evict {
		r.w.unhold(m.seq)
		delete(r.w.missing, m.seq)
	}
	return nil
}

// idle returns the outcome of a session that has nothing more to receive; a gap is recorded as
// waited for from now.
func (r *run) idle() Outcome {
	if r.view().gapWaiting() {
		r.openGap()
		if !r.st.GapSince.Equal(r.saved.gapAtLoad) {
			// The gap opened during this run: say so once; the worker's sweeper reports it again
			// while it stays open.
			lowest := r.view().lowestWaiting()
			r.log().WarnContext(r.ctx, "sequencer: session idle while a sequence is missing; later messages wait",
				slog.Int64("missing", r.st.Next), slog.Int64("lowest_waiting", lowest),
				slog.Duration("gap_timeout", r.e.cfg.GapTimeout), slog.String("gap_policy", string(r.e.cfg.GapPolicy)))
			r.e.observe(Event{Kind: EventGapOpened, SessionID: r.s.id, Sequence: r.st.Next, Lowest: lowest})
		}
	}
	if r.st.Parked != nil {
		return OutcomeParked
	}
	return OutcomeIdle
}

// openGap starts the gap clock (State.GapSince) unless it runs already: Next is missing while
// later messages wait.
func (r *run) openGap() {
	if r.st.GapSince.IsZero() {
		r.st.GapSince, r.saved.dirty = r.now(), true
	}
}

// onGapTimeout carries out what the gap policy decided (view.gapPolicy).
func (r *run) onGapTimeout(act gapAction) error {
	if act == gapPark {
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
	r.e.observe(Event{Kind: EventParked, SessionID: r.s.id, Sequence: missing, Lowest: lowest})
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
	r.saved.gap = wait
	r.e.observe(Event{Kind: EventSkipped, SessionID: r.s.id, Sequence: from})
	return r.save()
}
