package sequencer

import (
	"maps"
	"time"
)

// State is what the engine stores per session. It alone decides what has been handled.
type State struct {
	// Next is the next expected application sequence (the first message of a session is 1).
	Next int64
	// Last is the last sequence of the session once a message marked last has been seen (even
	// early); 0 while unknown.
	Last int64
	// Deferred maps application sequence → broker sequence number of messages deferred at the
	// broker.
	Deferred map[int64]int64
	// Parked is set while the session is parked: by the poison policy (the message was
	// dead-lettered), or by the gap policy GapPark (BrokerSequence 0: no message, the sequence
	// is missing).
	Parked *Parked
	// Blocked is set while the poison policy PoisonBlock holds the session on a failing message,
	// which the broker delivers again until it succeeds or its max delivery count dead-letters it.
	Blocked *Blocked
	// Retrying is set while the handler of the message for Next keeps failing and the engine
	// spends the wait before its next attempt with the session released
	// (EngineConfig.RetryReleaseAfter): the message is deferred at the broker (its index entry
	// is in Deferred), and a sweeper wakes the session at Retrying.At.
	Retrying *Retrying
	// EndedAt is set once the last message was handled: the state is then a tombstone that makes
	// late copies of the ended sequence duplicates until it expires.
	EndedAt time.Time
	// GapSince is when the engine started waiting for Next while later messages were waiting
	// (zero when there is no gap).
	GapSince time.Time
	// SkippedPoison maps application sequence → broker sequence number of poison messages that
	// PoisonSkip skipped and whose dead-lettering is not yet known to have happened. A redelivered
	// copy with that broker sequence number is dead-lettered, not completed as a duplicate.
	SkippedPoison map[int64]int64
	// InFlight maps application sequence → broker sequence number of the run of active messages
	// the engine is handling in order, one by one, each completed before the next handler call
	// (EngineConfig.SaveEachMessage off). While it is set, Next is the first entry of the run:
	// the entries below the real next sequence were handled and completed and are gone from the
	// broker; what the broker delivers after a crash tells which (see the package
	// documentation). Empty once a save records Next exactly.
	InFlight map[int64]int64
	// Ahead says the holder that saved this state may hand messages to the handler ahead of
	// their saves (EngineConfig.SaveEachMessage with Pipelined): Next is exact, but the
	// messages from Next on may be in its handler's hands. A new holder waits
	// EngineConfig.PipelineLease before its first handler call and its first save (see "One
	// save each, pipelined" in the package documentation). A holder's last save before it
	// releases the session clears it.
	Ahead bool
	// Counters are running totals for the session.
	Counters Counters
	// UpdatedAt is when the state was last changed.
	UpdatedAt time.Time
}

// Parked records why and where a session was parked.
type Parked struct {
	// Sequence is the application sequence of the message that was dead-lettered, or of the
	// missing message (GapPark).
	Sequence int64
	// BrokerSequence is the broker sequence number of that message (0 for GapPark: there is no
	// message).
	BrokerSequence int64
	// Reason is the handler error text.
	Reason string
	// At is when the session was parked.
	At time.Time
	// Held: the message was held in the store (EarlyStore) and went to the store's dead letters
	// in the write that stored this mark. Nothing is left to finish: a copy the broker delivers
	// again is a duplicate.
	Held bool
}

// OnGap reports whether the session was parked on a missing sequence (GapPark) rather than on a
// message that kept failing.
func (p *Parked) OnGap() bool { return p.BrokerSequence == 0 }

// Blocked records the message the poison policy PoisonBlock holds the session on.
type Blocked struct {
	// Sequence and BrokerSequence name the message.
	Sequence, BrokerSequence int64
	// Reason is the last handler error text.
	Reason string
	// Since is when the policy first applied to it; Times how often it has.
	Since time.Time
	Times uint64
}

// Retrying records the planned next attempt of a message whose handler keeps failing, while the
// session is released (EngineConfig.RetryReleaseAfter). It is always about the message for Next.
type Retrying struct {
	// Sequence and BrokerSequence name the message (deferred at the broker meanwhile).
	Sequence, BrokerSequence int64
	// At is when the next attempt is due.
	At time.Time
	// Attempts counts the handler calls made so far, the in-place ones included.
	Attempts uint64
	// Reason is the last handler error text.
	Reason string
}

// Counters are per-session running totals.
type Counters struct {
	Handled      uint64
	Deferred     uint64
	Duplicates   uint64
	Invalid      uint64
	DeadLettered uint64
	Retries      uint64
	Skipped      uint64
}

// NewState returns the state of a session that has never been seen.
func NewState() *State {
	return &State{Next: 1, Deferred: map[int64]int64{}}
}

// pristine reports whether s says nothing more than NewState does: storing it is pointless.
func (s *State) pristine() bool {
	return s.Next == 1 && s.Last == 0 && s.Counters == (Counters{}) && len(s.Deferred) == 0 &&
		len(s.SkippedPoison) == 0 && len(s.InFlight) == 0 && !s.Ahead && s.Parked == nil && s.Blocked == nil &&
		s.Retrying == nil && s.EndedAt.IsZero() && s.GapSince.IsZero()
}

// DueDeferred reports whether the session needs a run although the broker may not offer it to
// accept-next: the message for Next is deferred (and the session is not parked), or the deferred
// index still lists messages that were handled (below Next) or lie beyond the last sequence, whose
// settlement a crash interrupted. A sweeper accepts such sessions by id, since the broker does not
// offer a session that has only deferred messages to accept-next. The message for Next that waits
// for a released retry (State.Retrying) is not due here: it is due at Retrying.At (RetryDue).
func (s *State) DueDeferred() bool {
	if _, ok := s.Deferred[s.Next]; ok && s.Parked == nil && !s.retryingOn(s.Next) {
		return true
	}
	for k := range s.Deferred {
		if k < s.Next || (s.Last != 0 && k > s.Last) {
			return true
		}
	}
	return false
}

// NeedsWake reports whether the session needs a run started by id, which a sweeper provides: a
// deferred message is due (DueDeferred), or the parked message is still deferred at the broker (a
// crash came between parking and dead-lettering; the next run dead-letters it). A parked session is
// not woken otherwise: it waits for an operator. Both sweepers (Service Bus list-sessions and the
// Postgres query) apply this one rule.
func (s *State) NeedsWake() bool {
	if p := s.Parked; p != nil {
		if bs, ok := s.Deferred[p.Sequence]; ok && bs == p.BrokerSequence {
			return true
		}
	}
	return s.DueDeferred()
}

// retryingOn reports whether a released retry waits on sequence seq.
func (s *State) retryingOn(seq int64) bool { return s.Retrying != nil && s.Retrying.Sequence == seq }

// RetryDue reports whether the released retry of the message for Next is due at now: a sweeper
// wakes such a session (Runner.Wake), as it wakes a stranded one. A session whose retry is not
// due yet needs nothing: its message is deferred, later ones wait behind it.
func (s *State) RetryDue(now time.Time) bool {
	return s.Retrying != nil && s.Parked == nil && s.EndedAt.IsZero() && !now.Before(s.Retrying.At)
}

// RetryWaiting reports whether a released retry waits at now (not due yet): the message for Next
// stays deferred, and nothing later is handed over.
func (s *State) RetryWaiting(now time.Time) bool {
	return s.Retrying != nil && now.Before(s.Retrying.At)
}

// RetryNow makes the released retry due at now (an operator's retry-now) and reports whether
// there was one; the session then needs a wake (RetryDue).
func (s *State) RetryNow(now time.Time) bool {
	if s.Retrying == nil {
		return false
	}
	if s.Retrying.At.After(now) {
		s.Retrying.At = now
	}
	s.UpdatedAt = now
	return true
}

// GapExpired reports whether the engine has waited at least timeout for Next while later
// messages wait, and the session is not parked; a sweeper may wake such sessions so that the
// engine's gap policy acts. A parked session waits for an operator (or, parked on a gap, for the
// missing message), whatever its gap clock says.
func (s *State) GapExpired(now time.Time, timeout time.Duration) bool {
	return timeout > 0 && s.Parked == nil && !s.GapSince.IsZero() && now.Sub(s.GapSince) >= timeout
}

// TombstoneExpired reports whether s is the tombstone of an ended session older than ttl; such
// state may be deleted.
func (s *State) TombstoneExpired(now time.Time, ttl time.Duration) bool {
	return !s.EndedAt.IsZero() && now.Sub(s.EndedAt) >= ttl
}

// TombstoneClearable reports whether s is an expired tombstone (TombstoneExpired) that leaves
// nothing to settle at the broker (no deferred or skipped poison message recorded): its state may
// be deleted. The engine does so when such a session runs again, a sweeper when it finds one.
func (s *State) TombstoneClearable(now time.Time, ttl time.Duration) bool {
	return s.TombstoneExpired(now, ttl) && len(s.Deferred) == 0 && len(s.SkippedPoison) == 0
}

// Unpark clears the parked mark and reports whether there was one. With skip, Next moves past
// the dead-lettered message (and the session ends if it was the last), or, parked on a gap, past
// the missing sequences to the lowest deferred one; without, the engine waits for the message's
// replay (or the missing message), a gap timeout counting from now. Runner.Resume does this and
// then runs the session; a tool that edits stored state directly can call it itself, after which
// the session needs a wake (DueDeferred).
func (s *State) Unpark(skip bool, now time.Time) bool {
	p := s.Parked
	if p == nil {
		return false
	}
	switch {
	case skip && p.OnGap() && s.LowestDeferredAbove(p.Sequence) != 0:
		s.skipTo(s.LowestDeferredAbove(p.Sequence), now)
	case skip:
		s.pass(p.Sequence, now)
		s.Counters.Skipped++
	}
	s.Parked = nil
	s.restartGap(now)
	s.UpdatedAt = now
	return true
}

// Unblock clears the blocked mark and reports whether there was one (an operator's resume: the
// message is tried again when the broker delivers it).
func (s *State) Unblock(now time.Time) bool {
	if s.Blocked == nil {
		return false
	}
	s.Blocked, s.UpdatedAt = nil, now
	return true
}

// SkipTo gives up on every sequence below seq (an operator's skip): Next moves to seq, a parked
// or blocked mark on a sequence below it is cleared, and the session ends if the last sequence
// is passed. It returns how many sequences were skipped; none when seq is not above Next.
func (s *State) SkipTo(seq int64, now time.Time) uint64 {
	if s.Last != 0 {
		seq = min(seq, s.Last+1)
	}
	if seq <= s.Next {
		return 0
	}
	n, _ := s.skipTo(seq, now)
	if p := s.Parked; p != nil && p.Sequence < seq {
		s.Parked = nil
	}
	if s.Last != 0 && seq > s.Last {
		s.EndedAt = now
	}
	s.restartGap(now)
	s.UpdatedAt = now
	return n
}

// restartGap starts the gap clock at now when Next is missing while later sequences are
// deferred (a gap timeout then counts from an operator's change), and stops it otherwise.
func (s *State) restartGap(now time.Time) {
	s.GapSince = time.Time{}
	if _, due := s.Deferred[s.Next]; !due && s.Parked == nil && s.EndedAt.IsZero() && s.LowestDeferredAbove(s.Next) != 0 {
		s.GapSince = now
	}
}

// The transitions the engine applies to a state. Each is written once; the engine's session
// loop calls them and saves the state afterwards, in the order the package documentation gives.

// pass moves Next past seq and ends the session (EndedAt: the state becomes a tombstone) if seq
// is the last sequence. It is the one way Next moves past a message: handled, skipped as poison,
// or skipped when a parked session resumes.
func (s *State) pass(seq int64, now time.Time) {
	s.Next = seq + 1
	if s.Last == seq {
		s.EndedAt = now
	}
	if b := s.Blocked; b != nil && b.Sequence <= seq {
		s.Blocked = nil // the message it was blocked on is done with
	}
	if r := s.Retrying; r != nil && r.Sequence <= seq {
		s.Retrying = nil // the message it waited to retry is done with
	}
}

// handled records that the handler took the in-order message (seq, broker sequence bs). It
// returns the gap wait this ends (0 when Next was not waited for).
func (s *State) handled(seq, bs int64, now time.Time) time.Duration {
	s.pass(seq, now)
	s.Counters.Handled++
	if b, ok := s.Deferred[seq]; ok && b != bs {
		delete(s.Deferred, seq) // the deferred copy is gone (missing); this one replaced it
	}
	return s.closeGap(now)
}

// closeGap ends the wait for Next and returns how long it lasted (at least 1ns; 0 when there was
// none).
func (s *State) closeGap(now time.Time) time.Duration {
	if s.GapSince.IsZero() {
		return 0
	}
	d := max(now.Sub(s.GapSince), 1)
	s.GapSince = time.Time{}
	return d
}

// skipTo gives up on the missing sequences below seq (GapTimeout): Next moves to seq. It returns
// how many sequences were skipped and how long the gap was waited for.
func (s *State) skipTo(seq int64, now time.Time) (uint64, time.Duration) {
	n := uint64(seq - s.Next)
	s.Counters.Skipped += n
	wait := s.closeGap(now)
	s.Next = seq
	if b := s.Blocked; b != nil && b.Sequence < seq {
		s.Blocked = nil
	}
	if r := s.Retrying; r != nil && r.Sequence < seq {
		s.Retrying = nil
	}
	return n, wait
}

// park marks the session parked on the poison message (seq, broker sequence bs), which is then
// dead-lettered.
func (s *State) park(seq, bs int64, reason string, now time.Time) {
	s.Parked = &Parked{Sequence: seq, BrokerSequence: bs, Reason: reason, At: now}
	s.Blocked, s.Retrying = nil, nil
	s.Counters.DeadLettered++
}

// parkOnGap parks the session on the missing sequence Next (GapPark). GapSince stays: the wait
// goes on, and is reported whole when the missing message arrives (an operator's resume starts
// the clock again).
func (s *State) parkOnGap(reason string, now time.Time) {
	s.Parked = &Parked{Sequence: s.Next, Reason: reason, At: now}
}

// block records that PoisonBlock holds the session on the message (seq, broker sequence bs).
func (s *State) block(seq, bs int64, reason string, now time.Time) {
	s.Retrying = nil
	b := s.Blocked
	if b == nil || b.Sequence != seq {
		b = &Blocked{Sequence: seq, BrokerSequence: bs, Since: now}
		s.Blocked = b
	}
	b.BrokerSequence, b.Reason = bs, reason
	b.Times++
}

// skipPoison moves past the poison message (seq, broker sequence bs) under PoisonSkip. The
// message stays in SkippedPoison until its dead-lettering is known to have happened, so that a
// copy redelivered after a crash is dead-lettered rather than completed as a duplicate.
func (s *State) skipPoison(seq, bs int64, now time.Time) {
	s.pass(seq, now)
	s.Counters.Skipped++
	s.Counters.DeadLettered++
	if s.SkippedPoison == nil {
		s.SkippedPoison = map[int64]int64{}
	}
	s.SkippedPoison[seq] = bs
}

// recordDeferral records that the message (seq, broker sequence bs) is deferred at the broker.
func (s *State) recordDeferral(seq, bs int64) {
	if s.Deferred[seq] != bs {
		s.Deferred[seq] = bs
		s.Counters.Deferred++
	}
}

// passRecorded moves Next past the entry at Next of an inherited run record that turned out to be
// handled and completed by an earlier run. Entries are never the last sequence.
func (s *State) passRecorded() {
	if b := s.Blocked; b != nil && b.Sequence <= s.Next {
		s.Blocked = nil
	}
	if r := s.Retrying; r != nil && r.Sequence <= s.Next {
		s.Retrying = nil
	}
	delete(s.InFlight, s.Next)
	s.Next++
	s.Counters.Handled++
}

// pruneSettled removes the index entries (Deferred, SkippedPoison) of messages known to be
// settled at the broker: settled maps application sequence → broker sequence number.
func (s *State) pruneSettled(settled map[int64]int64) {
	for k, bs := range settled {
		if s.Deferred[k] == bs {
			delete(s.Deferred, k)
		}
		if s.SkippedPoison[k] == bs {
			delete(s.SkippedPoison, k)
		}
	}
}

// LowestDeferredAbove returns the lowest deferred sequence above n (0: none). Above Next, it is
// where a gap ends.
func (s *State) LowestDeferredAbove(n int64) int64 {
	var low int64
	for k := range s.Deferred {
		if k > n && (low == 0 || k < low) {
			low = k
		}
	}
	return low
}

func (s *State) clone() *State {
	c := *s
	c.Deferred = maps.Clone(s.Deferred)
	if c.Deferred == nil {
		c.Deferred = map[int64]int64{}
	}
	if s.SkippedPoison != nil {
		c.SkippedPoison = maps.Clone(s.SkippedPoison)
	}
	if s.InFlight != nil {
		c.InFlight = maps.Clone(s.InFlight)
	}
	if s.Parked != nil {
		p := *s.Parked
		c.Parked = &p
	}
	if s.Blocked != nil {
		b := *s.Blocked
		c.Blocked = &b
	}
	if s.Retrying != nil {
		r := *s.Retrying
		c.Retrying = &r
	}
	return &c
}
