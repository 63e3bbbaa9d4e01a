package operator

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// The operator's commands change a stored state through State's own transitions (Unpark,
// Unblock, SkipTo), after the checks here: what may be changed, and what a skip gives up.

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
// again (the replay of its dead-lettered message, the missing message of a gap, or that message
// itself already deferred), or the blocked mark of a session the poison policy block held (its
// message is tried again when the broker delivers it, or its replay). The gap clock restarts, so
// a gap timeout gives the replay its full time. It returns the mark it cleared.
func resumeState(id string, st *sequencer.State, now time.Time) (*sequencer.Parked, *sequencer.Blocked, error) {
	if !st.EndedAt.IsZero() {
		return nil, nil, fmt.Errorf("session %q: %w (at %s)", id, ErrSessionEnded, st.EndedAt.UTC().Format(time.RFC3339))
	}
	if st.Parked == nil && st.Blocked == nil {
		return nil, nil, fmt.Errorf("session %q: %w (next expected sequence %d); nothing to resume", id, ErrNotParked, st.Next)
	}
	if err := settled(id, st); err != nil {
		return nil, nil, err
	}
	var (
		p *sequencer.Parked
		b *sequencer.Blocked
	)
	if st.Parked != nil {
		c := *st.Parked
		p = &c
		st.Unpark(false, now)
	}
	if st.Blocked != nil {
		c := *st.Blocked
		b = &c
		st.Unblock(now)
	}
	return p, b, nil
}

// skipPlan says what skipping st to a sequence gives up.
type skipPlan struct {
	// From and To: the sequences From..To-1 are given up; To is the new next expected sequence.
	From, To int64
	// Dropped lists the deferred messages among them: the next run completes them unhandled.
	Dropped []int64
	// Unparked and Unblocked are the marks the skip clears.
	Unparked  *sequencer.Parked
	Unblocked *sequencer.Blocked
	// Ends: To is past the last sequence, so the session ends.
	Ends bool
}

// defaultSkipTarget is where skip goes without --to: past the parked, blocked or retrying message, past
// the missing sequences of a gap (to the lowest deferred sequence) when the session waits on one
// or was parked on one by the gap policy. 0 when there is nothing to skip.
func defaultSkipTarget(st *sequencer.State) int64 {
	if p := st.Parked; p != nil {
		if low := st.LowestDeferredAbove(p.Sequence); p.OnGap() && low != 0 {
			return low
		}
		return p.Sequence + 1
	}
	if b := st.Blocked; b != nil && b.Sequence == st.Next {
		return b.Sequence + 1
	}
	if r := st.Retrying; r != nil && r.Sequence == st.Next {
		return r.Sequence + 1 // give up the message that keeps failing (its deferred copy is completed)
	}
	if _, due := st.Deferred[st.Next]; due {
		return 0
	}
	return st.LowestDeferredAbove(st.Next)
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
	}
	if st.Blocked != nil {
		b := *st.Blocked
		plan.Unblocked = &b
	}
	st.SkipTo(to, now) // clears the marks below to, ends the session past its last, restarts the gap clock
	plan.Ends = !st.EndedAt.IsZero()
	return plan, nil
}
