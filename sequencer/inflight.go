package sequencer

import (
	"errors"
	"maps"
	"slices"
)

// maxRun bounds the entries of one recorded run (State.InFlight).
const maxRun = 256

// inRun reports whether the in-order message m is handled as an entry of a recorded run
// (handler → complete, Next saved later), recording a new run starting at m if none covers it.
// Runs are used only for active messages that nothing else depends on: not deferred, not the
// last, not the message before a deferred one (that one is a drain's anchor), not while parked
// or while an inherited record is unresolved, and never with an AtomicStore or SaveEachMessage.
func (r *run) inRun(m *Message, fromDeferred bool) (bool, error) {
	if r.e.cfg.SaveEachMessage || r.e.atomic != nil || fromDeferred || r.inherited || !r.runnable(m.Sequence, m.IsLast) {
		return false, nil
	}
	if bs, ok := r.st.InFlight[m.Sequence]; ok && bs == m.BrokerSequence {
		return true, nil
	}
	if m.DeliveryCount > 1 {
		return false, nil // redelivered: see lookahead
	}
	entries := r.lookahead(m)
	if len(entries) < 2 {
		return false, nil // a run of one saves as often as handler → save → complete
	}
	r.st.InFlight = entries
	if err := r.store(); err != nil {
		return false, err
	}
	r.e.stats.runs.Add(1)
	return true, nil
}

// runnable reports whether the message for sequence seq may be an entry of a run.
func (r *run) runnable(seq int64, last bool) bool {
	st := r.st
	if st.Parked != nil || last || (st.Last != 0 && seq >= st.Last) {
		return false
	}
	_, deferred := st.Deferred[seq]
	_, anchor := st.Deferred[seq+1]
	return !deferred && !anchor
}

// candidate is a message in hand that may join a run.
type candidate struct {
	brokerSequence int64
	last           bool
	redelivered    bool
}

// lookahead returns the run starting at m: the following sequences in hand, held in the window
// or later in the receive batch. It returns nil when no other message would join m.
//
// Redelivered messages (DeliveryCount > 1) never join a run: a process that crashes in the
// handler of some message again and again has its run's messages delivered as often, and once the
// broker dead-letters them (max delivery count) a record holding them would make the next run
// take them as handled. With a save per message the engine instead waits on the gap at the
// crashing message, which an operator sees.
func (r *run) lookahead(m *Message) map[int64]int64 {
	var later map[int64]candidate // the rest of the batch by sequence, parsed on first need
	next := func(seq int64) (candidate, bool) {
		if x := r.held[seq]; x != nil { // a held copy is handled before any copy later in the batch
			return candidate{x.BrokerSequence, x.IsLast, x.DeliveryCount > 1}, true
		}
		if later == nil {
			later = make(map[int64]candidate, len(r.upcoming))
			for _, x := range r.upcoming {
				seq, last, desc := r.e.parse(x)
				if _, seen := later[seq]; desc == "" && !seen {
					later[seq] = candidate{x.BrokerSequence, last, x.DeliveryCount > 1}
				}
			}
		}
		c, ok := later[seq]
		return c, ok
	}
	var entries map[int64]int64
	for seq := m.Sequence + 1; len(entries) < maxRun; seq++ {
		c, ok := next(seq)
		if !ok || c.redelivered || !r.runnable(seq, c.last) {
			break
		}
		if entries == nil {
			entries = map[int64]int64{m.Sequence: m.BrokerSequence}
		}
		entries[seq] = c.brokerSequence
	}
	return entries
}

// handleInRun handles an entry of the recorded run: handler, then complete, and only then the
// next handler call. The save that records the new Next comes later (the next run, a slow-path
// step, release); until then the broker's copy of m is what says m is not yet done.
func (r *run) handleInRun(m *Message) error {
	err := r.handleWithRetry(m, false)
	var perr *poisonError
	if errors.As(err, &perr) {
		return r.poison(m, perr.err)
	}
	if err != nil {
		return err
	}
	r.e.stats.handled.Add(1)
	r.e.observe(Event{Kind: EventHandled, SessionID: r.id, Sequence: m.Sequence})
	// Complete m even if a background completion (of a duplicate) has failed meanwhile: m is
	// handled, and leaving it at the broker would hand it to the handler again.
	if err := r.settleNow(CallComplete, m, r.sess.Complete); err != nil {
		return err
	}
	return r.pipelineErr()
}

// resolveInFlight settles an inherited run record with the active messages the broker delivers
// after the earlier run ended; m is the next one delivered, or nil when a receive found nothing
// more (the session idles: everything still at the broker has been delivered). The entries were
// handled in sequence order, each completed before the next was handled, so the ones gone from
// the broker are those below some sequence j, the real Next. The broker delivers a session's
// active messages in broker sequence order, so:
//
//   - an entry not delivered yet whose broker sequence number is lower than one delivered is gone;
//   - a delivered entry and every later one are still at the broker;
//   - an entry not delivered before the session idles is gone.
//
// Next moves past the entries known to be gone; the record is settled once the entry at Next is
// known to be there (or no entry is left). Held messages that end up below Next are duplicates.
func (r *run) resolveInFlight(m *Message) error {
	if !r.inherited {
		return nil
	}
	st := r.st
	if m != nil {
		r.lastDelivered = max(r.lastDelivered, m.BrokerSequence)
		seq, _, desc := r.e.parse(m) // m is not classified yet
		if bs, ok := st.InFlight[seq]; ok && desc == "" && bs == m.BrokerSequence && seq >= st.Next &&
			(r.presentFrom == 0 || seq < r.presentFrom) {
			r.presentFrom = seq
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
		delete(st.InFlight, st.Next)
		st.Next++
		st.Counters.Handled++
		r.dirty = true
	}
	st.InFlight = nil
	r.inherited, r.presentFrom = false, 0
	// Save the exact Next now: if this run crashes before its next save, the record would be
	// inherited again, and by then its entries may have left the broker other than by handling
	// (dead-lettered after too many deliveries), which the inference would take as handled.
	if err := r.save(); err != nil {
		return err
	}
	return r.settleHeldBelowNext()
}

// recorded reports whether m is an entry of the inherited, unresolved record: such a message is
// held, never deferred, until the record is settled (deferring it would hide it from the next
// run's resolution).
func (r *run) recorded(m *Message) bool {
	if !r.inherited {
		return false
	}
	bs, ok := r.st.InFlight[m.Sequence]
	return ok && bs == m.BrokerSequence
}

// awaitsRecord reports whether m must wait for the inherited record to be resolved: another
// copy of its sequence is an entry whose fate is not known yet.
func (r *run) awaitsRecord(m *Message) bool {
	if !r.inherited {
		return false
	}
	bs, ok := r.st.InFlight[m.Sequence]
	return ok && bs != m.BrokerSequence
}

// settleHeldBelowNext processes the held messages below Next (copies of entries that turned out
// to be handled): they are duplicates now.
func (r *run) settleHeldBelowNext() error {
	for _, k := range slices.Sorted(maps.Keys(r.held)) {
		if k >= r.st.Next {
			break
		}
		if err := r.process(r.unhold(k), false); err != nil {
			return err
		}
	}
	return nil
}
