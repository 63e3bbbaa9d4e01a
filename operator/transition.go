package operator

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// The state transitions of the operator's commands. They are written on State's exported
// fields and State.Unpark, and belong in sequencer.State once its transitions are methods
// written once (issue 13): resume as Unpark(false) plus the gap clock, skip as a SkipTo.

// settled refuses a change while the state still records work a worker finishes on its own:
// a parked message that a crash left undead-lettered (the sweeper wakes the session for it), or
// a run of in-order messages cut short (State.InFlight: Next is only a lower bound until the
// next run resolves it).
func settled(id string, st *sequencer.State) error {
	if p := st.Parked; p != nil {
		if bs, ok := st.Deferred[p.Sequence]; ok && bs == p.BrokerSequence {
			return fmt.Errorf("session %q: %w: the parked message (sequence %d) is not dead-lettered yet; a worker does that within one sweep interval, try again then",
				id, ErrUnsettled, p.Sequence)
		}
	}
	if len(st.InFlight) > 0 {
		return fmt.Errorf("session %q: %w: a worker's run was cut short and its next expected sequence is not known exactly yet; a worker resolves it when the broker offers the session, try again then",
			id, ErrUnsettled)
	}
	return nil
}

// resumeState clears the parked mark of st so that the session waits for the parked sequence
// again (the replay of its dead-lettered message, or that message itself still deferred). The
// gap clock restarts, so a gap timeout gives the replay its full time.
func resumeState(id string, st *sequencer.State, now time.Time) (*sequencer.Parked, error) {
	if !st.EndedAt.IsZero() {
		return nil, fmt.Errorf("session %q: %w (at %s)", id, ErrSessionEnded, st.EndedAt.UTC().Format(time.RFC3339))
	}
	if st.Parked == nil {
		return nil, fmt.Errorf("session %q: %w (next expected sequence %d); nothing to resume", id, ErrNotParked, st.Next)
	}
	if err := settled(id, st); err != nil {
		return nil, err
	}
	p := *st.Parked
	st.Unpark(false, now)
	restartGapClock(st, now)
	return &p, nil
}

// skipPlan says what skipping st to a sequence gives up.
type skipPlan struct {
	// From and To: the sequences From..To-1 are given up; To is the new next expected sequence.
	From, To int64
	// Dropped lists the deferred messages among them: the next run completes them unhandled.
	Dropped []int64
	// Unparked is the parked mark the skip clears.
	Unparked *sequencer.Parked
	// Ends: To is past the last sequence, so the session ends.
	Ends bool
}

// defaultSkipTarget is where skip goes without --to: past the parked message, or to the lowest
// deferred sequence when the session waits on a gap. 0 when there is nothing to skip.
func defaultSkipTarget(st *sequencer.State) int64 {
	if p := st.Parked; p != nil {
		return p.Sequence + 1
	}
	if _, due := st.Deferred[st.Next]; due {
		return 0
	}
	return lowestDeferredAbove(st, st.Next)
}

// lowestDeferredAbove is the lowest deferred sequence above n (0 when none).
func lowestDeferredAbove(st *sequencer.State, n int64) int64 {
	var low int64
	for k := range st.Deferred {
		if k > n && (low == 0 || k < low) {
			low = k
		}
	}
	return low
}

// skipState moves st past every sequence below to (0: the default target), clearing a parked
// mark. The engine's next run completes the deferred messages below the new Next unhandled
// (State.DueDeferred makes the sweeper wake it for them).
func skipState(id string, st *sequencer.State, to int64, now time.Time) (*skipPlan, error) {
	if !st.EndedAt.IsZero() {
		return nil, fmt.Errorf("session %q: %w (at %s)", id, ErrSessionEnded, st.EndedAt.UTC().Format(time.RFC3339))
	}
	if err := settled(id, st); err != nil {
		return nil, err
	}
	if to == 0 {
		if to = defaultSkipTarget(st); to == 0 {
			return nil, fmt.Errorf("session %q: %w: it is not parked and not waiting on a gap (next expected sequence %d); give --to to skip ahead",
				id, ErrNothingToSkip, st.Next)
		}
	}
	if to <= st.Next {
		return nil, fmt.Errorf("session %q: %w: --to %d is not above the next expected sequence %d", id, ErrNothingToSkip, to, st.Next)
	}
	if st.Last != 0 && to > st.Last+1 {
		return nil, fmt.Errorf("session %q: %w: --to %d is past the session's last sequence %d (at most %d ends the session)",
			id, ErrInvalidInput, to, st.Last, st.Last+1)
	}
	if st.Last != 0 && to == st.Last+1 && len(st.Deferred) > 0 {
		// An ended session is never woken again, so its deferred messages would stay at the
		// broker for good; a worker that handles the last sequence itself settles them.
		return nil, fmt.Errorf("session %q: %w: --to %d ends the session, which would leave its %d deferred messages at the broker unsettled; skip to %d at most and let the worker handle the last sequence",
			id, ErrInvalidInput, to, len(st.Deferred), st.Last)
	}
	plan := &skipPlan{From: st.Next, To: to}
	for _, k := range slices.Sorted(maps.Keys(st.Deferred)) {
		if k >= plan.From && k < to {
			plan.Dropped = append(plan.Dropped, k)
		}
	}
	if st.Parked != nil {
		p := *st.Parked
		plan.Unparked = &p
		st.Unpark(true, now) // Next = p.Sequence+1 (p.Sequence is Next), ends the session at its last
	}
	if to > st.Next {
		st.Counters.Skipped += uint64(to - st.Next)
		st.Next = to
	}
	if st.Last != 0 && to == st.Last+1 && st.EndedAt.IsZero() {
		st.EndedAt = now
	}
	plan.Ends = !st.EndedAt.IsZero()
	st.GapSince = time.Time{}
	restartGapClock(st, now)
	st.UpdatedAt = now
	return plan, nil
}

// restartGapClock sets GapSince to now when st waits for a missing Next while later sequences
// are deferred, and clears it otherwise.
func restartGapClock(st *sequencer.State, now time.Time) {
	_, due := st.Deferred[st.Next]
	if !due && st.EndedAt.IsZero() && lowestDeferredAbove(st, st.Next) != 0 {
		st.GapSince = now
		return
	}
	st.GapSince = time.Time{}
}
