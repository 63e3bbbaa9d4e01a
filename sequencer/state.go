package sequencer

import "time"

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
	// Parked is set while the session is parked by the poison policy.
	Parked *Parked
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
	// Counters are running totals for the session.
	Counters Counters
	// UpdatedAt is when the state was last changed.
	UpdatedAt time.Time
}

// Parked records why and where a session was parked.
type Parked struct {
	// Sequence is the application sequence of the message that was dead-lettered.
	Sequence int64
	// BrokerSequence is the broker sequence number of that message.
	BrokerSequence int64
	// Reason is the handler error text.
	Reason string
	// At is when the session was parked.
	At time.Time
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

// DueDeferred reports whether the session needs a run although the broker may not offer it to
// accept-next: the message for Next is deferred (and the session is not parked), or the deferred
// index still lists messages that were handled (below Next) or lie beyond the last sequence, whose
// settlement a crash interrupted. A sweeper accepts such sessions by id, since the broker does not
// offer a session that has only deferred messages to accept-next.
func (s *State) DueDeferred() bool {
	if _, ok := s.Deferred[s.Next]; ok && s.Parked == nil {
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

// GapExpired reports whether the engine has waited at least timeout for Next while later
// messages wait; a sweeper may wake such sessions so that the engine's gap timeout skips ahead.
func (s *State) GapExpired(now time.Time, timeout time.Duration) bool {
	return timeout > 0 && !s.GapSince.IsZero() && now.Sub(s.GapSince) >= timeout
}

// TombstoneExpired reports whether s is the tombstone of an ended session older than ttl; such
// state may be deleted.
func (s *State) TombstoneExpired(now time.Time, ttl time.Duration) bool {
	return !s.EndedAt.IsZero() && now.Sub(s.EndedAt) >= ttl
}

// Unpark clears the parked mark and reports whether there was one. With skip, Next moves past
// the dead-lettered message (and the session ends if it was the last); without, the engine waits
// for the message's replay. Runner.Resume does this and then runs the session; a tool that edits
// stored state directly can call it itself, after which the session needs a wake (DueDeferred).
func (s *State) Unpark(skip bool, now time.Time) bool {
	p := s.Parked
	if p == nil {
		return false
	}
	if skip {
		s.Next = p.Sequence + 1
		s.Counters.Skipped++
		if s.Last == p.Sequence {
			s.EndedAt = now
		}
	}
	s.Parked = nil
	s.UpdatedAt = now
	return true
}
