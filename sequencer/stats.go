package sequencer

import (
	"sync/atomic"
	"time"
)

// CallKind names a broker call made by the engine, for Stats.BrokerCalls.
type CallKind int

// Broker call kinds.
const (
	CallReceive CallKind = iota
	CallReceiveDeferred
	CallComplete
	CallDefer
	CallDeadLetter
	CallAbandon
	CallRenewLock
	CallClose
	CallAccept
	CallPeek
	numCallKinds
)

var callKindNames = [numCallKinds]string{"receive", "receive_deferred", "complete", "defer",
	"dead_letter", "abandon", "renew_lock", "close", "accept", "peek"}

// String returns the snake_case name used as key of Stats.BrokerCalls.
func (k CallKind) String() string {
	if k < 0 || k >= numCallKinds {
		return "unknown"
	}
	return callKindNames[k]
}

// EventKind classifies an Event.
type EventKind int

// Event kinds.
const (
	EventHandled EventKind = iota
	EventHeld
	EventDeferred
	EventDuplicate
	EventInvalid
	EventDeadLettered
	EventRetry
	EventParked
	EventSkipped
	EventGapResolved
	EventSessionEnded
	EventSessionReleased
	EventLockLost
	// EventBlocked: PoisonBlock abandoned a message that kept failing (Sequence).
	EventBlocked
	// EventGapOpened: a run released the session while waiting for the missing sequence
	// (Sequence) that a later one (Lowest) waits behind.
	EventGapOpened
	// EventReleasedRetry: the handler of the message for Next (Sequence) failed again (Err) and
	// the session was released until its next attempt, due at At (EngineConfig.RetryReleaseAfter).
	EventReleasedRetry
	// EventHeldInStore: an early message (Sequence) was held in the store and completed at the
	// broker (EarlyStore), where EarlyDefer defers it (EventDeferred).
	EventHeldInStore
	// EventHeldFull: holding the early messages in hand would pass a bound of
	// EngineConfig.Held, or the store cannot keep one of them; the session is released with
	// them unsettled (Sequence: its Next).
	EventHeldFull
)

var eventKindNames = [...]string{"handled", "held", "deferred", "duplicate", "invalid", "dead_lettered",
	"retry", "parked", "skipped", "gap_resolved", "session_ended", "session_released", "lock_lost", "blocked",
	"gap_opened", "released_retry", "held_in_store", "held_full"}

// String returns the snake_case name of the event kind, for logs and metrics labels.
func (k EventKind) String() string {
	if k < 0 || int(k) >= len(eventKindNames) {
		return "unknown"
	}
	return eventKindNames[k]
}

// Event is one thing the engine did, for metrics and tests.
type Event struct {
	Kind      EventKind
	SessionID string
	// Sequence is the application sequence concerned (0 when none).
	Sequence int64
	// Duration is the gap wait for EventGapResolved.
	Duration time.Duration
	// Err is the handler error for EventRetry, EventDeadLettered (poison) and EventBlocked.
	Err error
	// Lowest is, for EventGapOpened, the lowest sequence waiting behind the gap (0 when the
	// waiting messages are only known as held in memory).
	Lowest int64
	// At is, for EventReleasedRetry, when the next attempt is due.
	At time.Time
}

// Observer receives engine events synchronously; it must be fast and safe for concurrent use.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

// Stats are running totals of an Engine (and of the Runner that owns it).
type Stats struct {
	// ActiveSessions is the number of sessions being processed now (Runner only).
	ActiveSessions int
	// Sessions counts sessions processed (accepted and run).
	Sessions     uint64
	Handled      uint64
	Held         uint64
	Deferred     uint64
	Duplicates   uint64
	Invalid      uint64
	DeadLettered uint64
	Retries      uint64
	Parked       uint64
	Skipped      uint64
	// StoreCalls counts StateStore calls (Load, Save, SaveWith, Delete).
	StoreCalls uint64
	// Runs counts the runs of in-order messages recorded with one save (State.InFlight).
	Runs uint64
	// BrokerCalls counts Session and SessionSource calls by kind (CallKind.String()).
	BrokerCalls map[string]uint64
	// GapWait is the total time Next was waited for while later messages were waiting.
	GapWait time.Duration
	// ReleasedRetries counts the releases of a session until the next attempt of a failing
	// message (EngineConfig.RetryReleaseAfter).
	ReleasedRetries uint64
	// SettlementsRefused counts the settlements the broker refused as busy (ErrSettlementRefused):
	// each message is settled again later, as a duplicate or a stale index entry.
	SettlementsRefused uint64
	// HeldInStore counts the early messages held in the store (EarlyStore); HeldFull the runs
	// that released their session because a bound of EngineConfig.Held was reached.
	HeldInStore, HeldFull uint64
}

// TotalBrokerCalls sums BrokerCalls.
func (s Stats) TotalBrokerCalls() uint64 {
	var n uint64
	for _, v := range s.BrokerCalls {
		n += v
	}
	return n
}

type statsCounters struct {
	sessions, handled, held, deferred, duplicates, invalid, deadLettered atomic.Uint64
	retries, parked, skipped, storeCalls, runs                           atomic.Uint64
	gapWait                                                              atomic.Int64
	releasedRetries, settlementsRefused, heldInStore, heldFull           atomic.Uint64
	calls                                                                [numCallKinds]atomic.Uint64
}

func (c *statsCounters) snapshot() Stats {
	s := Stats{
		Sessions:     c.sessions.Load(),
		Handled:      c.handled.Load(),
		Held:         c.held.Load(),
		Deferred:     c.deferred.Load(),
		Duplicates:   c.duplicates.Load(),
		Invalid:      c.invalid.Load(),
		DeadLettered: c.deadLettered.Load(),
		Retries:      c.retries.Load(),
		Parked:       c.parked.Load(),
		Skipped:      c.skipped.Load(),
		StoreCalls:   c.storeCalls.Load(),
		Runs:         c.runs.Load(),
		GapWait:      time.Duration(c.gapWait.Load()),
		BrokerCalls:  make(map[string]uint64, numCallKinds),
	}
	s.ReleasedRetries = c.releasedRetries.Load()
	s.SettlementsRefused = c.settlementsRefused.Load()
	s.HeldInStore, s.HeldFull = c.heldInStore.Load(), c.heldFull.Load()
	for k := range numCallKinds {
		s.BrokerCalls[k.String()] = c.calls[k].Load()
	}
	return s
}
