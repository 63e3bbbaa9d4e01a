package sbadapter

import (
	"context"
	"errors"
	"sync"
	"time"
)

// refusedSettlementWait is how long a settlement may go unanswered while the namespace refuses
// calls as busy (a server-busy answer was seen since it started, see watchSettlement) before it
// is presumed refused (sequencer.ErrSettlementRefused). The SDK would report a refused
// settlement settled after its fixed retry delay of about 4 s, without sending it again (see
// refusedSettlementHint): waiting for it only stalls the session. Either the message is settled
// or it stays locked with the session until it is closed; then an active one is delivered again
// and dropped as a duplicate, and a deferred one stays deferred, its index entry kept for the
// next run because the settlement was reported refused. Giving the session up instead
// (ErrLockLost) would release the message at once, and with pipelined runs the next run would
// hand over again the entries whose completions had not landed. A settlement answers within a
// round trip otherwise.
const refusedSettlementWait = 500 * time.Millisecond

// refusedSettlementPoll is how often a settlement past refusedSettlementWait looks again for a
// server-busy answer.
const refusedSettlementPoll = 100 * time.Millisecond

// errSettleRefused is the cause of a settlement's ctx when it was presumed refused as busy.
var errSettleRefused = errors.New("settlement presumed refused as busy")

// errSettleTimeout is the cause of a settlement's ctx when settleTimeout passed.
var errSettleTimeout = errors.New("settlement timeout")

// watchSettlement returns the ctx of one settlement attempt and the slot of its watch in the
// session's settleWatches, which settleWatches.remove frees. The ctx is canceled with
// errSettleTimeout once settleTimeout has passed and, with a Limiter, with errSettleRefused once
// the settlement has run refusedSettlementWait and a server-busy answer was seen since it
// started: by the Limiter, or in the SDK's log of a settlement refused (sdklog.go), which is how
// a session whose only calls are settlements learns of it (the namespace refuses everything for
// the rest of its period, so this settlement most likely was refused too; one that was not is
// answered within a round trip). A settlement runs for every message, so the session's
// settlements share one timer and their watches live in one slice rather than a timer and a
// watch each.
func (s *Session) watchSettlement(ctx context.Context) (context.Context, int) {
	sctx, cancel := context.WithCancelCause(ctx)
	now := time.Now()
	e := settleEntry{start: now, cancel: cancel}
	first := s.settleTimeout
	if s.limit != nil {
		e.mark, e.logged = s.limit.busyCount(), s.settleRefusals.Load()
		first = min(first, refusedSettlementWait)
	}
	return sctx, s.watches.add(s, e, now.Add(first))
}

// settleWatches watches a session's settlements in flight (watchSettlement) with one timer,
// which runs while any is in flight.
type settleWatches struct {
	mu      sync.Mutex
	entries []settleEntry // in flight where cancel is set
	free    []int         // slots of entries without a settlement
	t       *time.Timer
	due     time.Time // when t fires; zero: not armed
}

// settleEntry is the watch of one settlement attempt.
type settleEntry struct {
	start        time.Time
	mark, logged uint64 // the server-busy answers seen when it started
	cancel       context.CancelCauseFunc
	// ended: the watch canceled the settlement's ctx; it waits for remove.
	ended bool
}

// add watches e, which needs a look at first, and returns its slot.
func (w *settleWatches) add(s *Session, e settleEntry, first time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var slot int
	if n := len(w.free); n > 0 {
		slot = w.free[n-1]
		w.free = w.free[:n-1]
		w.entries[slot] = e
	} else {
		slot = len(w.entries)
		w.entries = append(w.entries, e)
	}
	w.armLocked(s, first)
	return slot
}

// remove ends the watch in slot and the ctx of its settlement.
func (w *settleWatches) remove(slot int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entries[slot].cancel(nil)
	w.entries[slot] = settleEntry{}
	w.free = append(w.free, slot)
	if len(w.free) == len(w.entries) && !w.due.IsZero() {
		// Nothing in flight: stop the timer, which would keep the session reachable until
		// it fires.
		w.t.Stop()
		w.due = time.Time{}
	}
}

// armLocked makes the timer fire at at, unless it fires before.
func (w *settleWatches) armLocked(s *Session, at time.Time) {
	if !w.due.IsZero() && !at.Before(w.due) {
		return
	}
	w.due = at
	d := time.Until(at)
	if w.t == nil {
		w.t = time.AfterFunc(d, func() { w.check(s) })
		return
	}
	w.t.Reset(d)
}

// check runs when the timer fires: it ends the ctx of each settlement past settleTimeout or
// presumed refused, and sets the timer for the next look while any is in flight: the first
// threshold of each, then every refusedSettlementPoll for one past refusedSettlementWait.
func (w *settleWatches) check(s *Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.due = time.Time{}
	var next time.Time
	for i := range w.entries {
		e := &w.entries[i]
		if e.cancel == nil || e.ended {
			continue
		}
		ran := now.Sub(e.start)
		timeout := e.start.Add(s.settleTimeout)
		switch {
		case ran >= s.settleTimeout:
			e.cancel(errSettleTimeout)
			e.ended = true
			continue
		case s.limit != nil && ran >= refusedSettlementWait && (s.limit.busyCount() > e.mark || s.settleRefusals.Load() > e.logged):
			e.cancel(errSettleRefused)
			e.ended = true
			continue
		}
		at := timeout
		if s.limit != nil {
			look := e.start.Add(refusedSettlementWait)
			if ran >= refusedSettlementWait {
				look = now.Add(refusedSettlementPoll)
			}
			if look.Before(at) {
				at = look
			}
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if !next.IsZero() {
		w.armLocked(s, next)
	}
}
