package demo

import "fmt"

// SessionOrder judges one session's handler calls against the order seqbus promises, the one
// rule the demo's Checker and the chaos test both apply: each sequence is handed over after the
// one before it, with no gap, and nothing is handed over again but the engine's at-least-once
// replay (sequencer.EngineConfig.ReplayWindow): up to Window of the sequences handled last,
// handed over again in their order after a crash, a lost lock or a failed settlement. A replay
// may start again lower (another crash during it) and must reach the last sequence handled
// before the next one comes. The zero value with Window set starts at sequence 1. It is not safe
// for concurrent use.
type SessionOrder struct {
	// Window is the replay window (1: only the sequence handled last may come again).
	Window int64
	// last is the highest sequence handled; replayed, while a replay is in progress, the one it
	// handed over last; runFrom the first of the sequences handled without a gap up to last.
	last, replayed, runFrom int64
}

// Check judges a call for seq before its outcome is known: "" when it keeps the order,
// otherwise what breaks it.
func (o *SessionOrder) Check(seq int64) string {
	want := o.last + 1
	r := o.replayed
	switch {
	case seq >= want && r != 0 && r != o.last:
		return fmt.Sprintf("a replay stopped at sequence %d, then %d was handed over (last handled %d)", r, seq, o.last)
	case seq > want:
		return fmt.Sprintf("sequence %d handed over, expected %d", seq, want)
	case seq < o.runFrom:
		return fmt.Sprintf("sequence %d handed over again, below %d, which came after a gap", seq, o.runFrom)
	case seq < want && want-seq > o.window():
		return fmt.Sprintf("sequence %d handed over again, %d back (replay window %d)", seq, want-seq, o.window())
	case seq < want && r != 0 && seq > r+1:
		return fmt.Sprintf("a replay skipped from %d to %d", r, seq)
	}
	return ""
}

// Handled records that the call for seq succeeded and reports whether it repeated a sequence
// handled before, and how far back it reached (1: the sequence handled last). A repeat that Check
// took for a replay goes on with it; one below a gap or beyond the window (a violation) does not.
func (o *SessionOrder) Handled(seq int64) (repeat bool, depth int64) {
	if seq <= o.last {
		depth = o.last - seq + 1
		if seq >= o.runFrom && depth <= o.window() {
			o.replayed = seq
		}
		return true, depth
	}
	if seq != o.last+1 {
		o.runFrom = seq // after a gap: nothing below it was handled in this run of sequences
	}
	o.last, o.replayed = seq, 0
	return false, 0
}

// Last is the highest sequence handled.
func (o *SessionOrder) Last() int64 { return o.last }

func (o *SessionOrder) window() int64 { return max(o.Window, 1) }
