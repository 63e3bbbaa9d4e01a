package worker

import (
	"context"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// heldSide passes a HeldStore's calls on, counting Hold and DeadLetterHeld as saves (they save
// the state with the messages).
type heldSide struct {
	in   *instrumented
	held sequencer.HeldStore
}

// instrumentedHeld and instrumentedAtomicHeld keep a HeldStore's side (the Postgres store) in
// view of the engine, which holds early messages through it (sequencer.EarlyStore).
type instrumentedHeld struct {
	*instrumented
	heldSide
}

type instrumentedAtomicHeld struct {
	*instrumentedAtomic
	heldSide
}

func (h heldSide) Hold(ctx context.Context, p sequencer.HoldParams) (sequencer.HoldResult, error) {
	start := time.Now()
	res, err := h.held.Hold(ctx, p)
	h.in.observe(start, err)
	if h.in.saved != nil {
		h.in.saved(p.Session.ID(), p.State, err)
	}
	return res, err
}

func (h heldSide) DeadLetterHeld(ctx context.Context, p sequencer.DeadLetterHeldParams) (int64, error) {
	start := time.Now()
	v, err := h.held.DeadLetterHeld(ctx, p)
	h.in.observe(start, err)
	if h.in.saved != nil {
		h.in.saved(p.Session.ID(), p.State, err)
	}
	return v, err
}

func (h heldSide) Held(ctx context.Context, p sequencer.HeldParams) ([]*sequencer.HeldMessage, error) {
	return h.held.Held(ctx, p)
}

func (h heldSide) HeldStats(ctx context.Context, p sequencer.HeldStatsParams) (sequencer.HeldStats, error) {
	return h.held.HeldStats(ctx, p)
}

func (h heldSide) HeldTotals(ctx context.Context, p sequencer.HeldTotalsParams) (sequencer.HeldTotals, error) {
	return h.held.HeldTotals(ctx, p)
}

func (h heldSide) HeldDeadLetters(ctx context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error) {
	return h.held.HeldDeadLetters(ctx, p)
}

func (h heldSide) RemoveHeldDeadLetter(ctx context.Context, p sequencer.RemoveHeldDeadLetterParams) error {
	return h.held.RemoveHeldDeadLetter(ctx, p)
}
