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

// DueDeferred reports whether a deferred message is due, that is whether the broker holds the
// message for Next as deferred. A sweeper accepts such sessions, since the broker does not offer a
// session that has only deferred messages to accept-next.
func (s *State) DueDeferred() bool {
	_, ok := s.Deferred[s.Next]
	return ok
}
