package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

func (r *run) load() error {
	r.e.stats.storeCalls.Add(1)
	st, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.s.sess})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: loading state: %w", r.s.id, err)
	}
	if st == nil {
		st = NewState()
	}
	if st.Deferred == nil {
		st.Deferred = map[int64]int64{}
	}
	r.st, r.saved.ver, r.saved.gapAtLoad = st, ver, st.GapSince
	return nil
}

// save writes r.st as it is, without the index entries of messages settled meanwhile: the exact
// Next, or an inherited record not yet resolved (recordRun writes a run's own). It ends the run's
// own record.
func (r *run) save() error {
	return r.storeState("saving state", func(p SaveParams) (int64, error) { return r.e.store.Save(r.ctx, p) })
}

// storeState writes r.st with write (a Save, or a HeldStore's Hold or DeadLetterHeld, which store
// more with it), as save describes; what names the write in an error.
func (r *run) storeState(what string, write func(SaveParams) (int64, error)) error {
	if err := r.holdHandover(); err != nil {
		return err
	}
	// A background save goes first (one save at a time), and this one covers what was handled
	// since; it clears Ahead: the next handler call follows it, it does not go ahead of it.
	if err := r.way.flush(r); err != nil {
		return err
	}
	r.st.Ahead = false
	r.st.pruneSettled(r.s.settled)
	clear(r.s.settled)
	r.st.UpdatedAt = r.now()
	r.e.stats.storeCalls.Add(1)
	ver, err := write(SaveParams{Session: r.s.sess, State: r.st, ExpectedVersion: r.saved.ver})
	if err != nil {
		return fmt.Errorf("sequencer: session %s: %s (next %d): %w", r.s.id, what, r.st.Next, err)
	}
	r.held.known = false // a save may remove held messages (those below Next)
	if r.e.sessionBound {
		r.s.noteAnswered(r.st.UpdatedAt) // the store's save is a call on the session
	}
	r.saved.ver, r.saved.dirty, r.saved.claimed = ver, false, true
	r.saved.ended = !r.st.EndedAt.IsZero()
	r.flushGap()
	return r.way.stored(r)
}

// saveWith runs the handler for m and saves next (the state with m handled) in one transaction
// of the AtomicStore. A handler error comes back as *handlerError.
func (r *run) saveWith(store AtomicStore, m *msg, next *State) error {
	next.UpdatedAt = r.now()
	r.e.stats.storeCalls.Add(1)
	ver, err := store.SaveWith(r.ctx, SaveParams{Session: r.s.sess, State: next, ExpectedVersion: r.saved.ver},
		func(ctx context.Context) error { return r.callHandler(ctx, m) })
	if err != nil {
		r.saved.gap = 0
		var herr *handlerError
		if errors.As(err, &herr) {
			return herr
		}
		return fmt.Errorf("sequencer: session %s: saving state with handler (next %d): %w", r.s.id, next.Next, err)
	}
	clear(r.s.settled)
	r.st, r.saved.ver, r.saved.dirty, r.saved.claimed = next, ver, false, true
	r.saved.ended = !r.st.EndedAt.IsZero()
	r.flushGap()
	return nil
}

func (r *run) flushGap() {
	r.reportGap(r.saved.gap, r.st.Next)
	r.saved.gap = 0
}

// reportGap reports a resolved gap wait (none when wait is 0) once a save with Next next stored it.
func (r *run) reportGap(wait time.Duration, next int64) {
	if wait > 0 {
		r.e.stats.gapWait.Add(int64(wait))
		r.e.observe(Event{Kind: EventGapResolved, SessionID: r.s.id, Sequence: next, Duration: wait})
	}
}

func (r *run) deleteState() error {
	if err := r.way.flush(r); err != nil { // the version compared is the one last saved
		return err
	}
	r.e.stats.storeCalls.Add(1)
	if err := r.e.store.Delete(r.ctx, DeleteParams{Session: r.s.sess, ExpectedVersion: r.saved.ver}); err != nil {
		return fmt.Errorf("sequencer: session %s: deleting state: %w", r.s.id, err)
	}
	r.saved.ver, r.saved.dirty, r.saved.ended = 0, false, false
	return nil
}

// ---- calls: handler ----

type poisonError struct{ err error }

func (p *poisonError) Error() string { return p.err.Error() }
func (p *poisonError) Unwrap() error { return p.err }

type handlerError struct{ err error }

func (h *handlerError) Error() string { return h.err.Error() }
func (h *handlerError) Unwrap() error { return h.err }

func (r *run) callHandler(ctx context.Context, m *msg) error {
	err := CallHandler(ctx, r.e.handler, m.raw)
	if err == nil {
		return nil
	}
	if p, ok := err.(*PanicError); ok {
		r.log().ErrorContext(ctx, "sequencer: handler panicked", slog.Int64("sequence", m.seq),
			slog.Any("panic", p.Value), slog.String("stack", string(p.Stack)))
	}
	return &handlerError{err: err}
}

// receive waits for the next batch of active messages, read against the contract. An empty batch
// means the idle timeout or a stop ended the wait.
func (r *run) receive() ([]msg, error) {
	if p := r.in.next; p != nil {
		r.in.next = nil
		return r.takeNextBatch(p)
	}
	rctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	idle := r.e.clock.AfterFunc(r.e.cfg.IdleTimeout, cancel)
	defer idle.Stop()
	stopWatch := context.AfterFunc(r.opts.stop, cancel)
	defer stopWatch()
	r.e.stats.calls[CallReceive].Add(1)
	raw, err := r.s.sess.Receive(rctx, r.e.cfg.ReceiveBatch)
	if err != nil {
		if rctx.Err() != nil && r.ctx.Err() == nil && !errors.Is(err, ErrLockLost) {
			return r.e.read(raw, false), nil // the idle timer or a stop ended the receive
		}
		return nil, r.s.callErr(CallReceive, err)
	}
	return r.e.read(raw, false), nil
}

// nextBatch is a receive started while the batch before it is handled, or the state loaded
// (Pipelined). Only when it is sent changes: the idle timeout counts from the moment the run
// takes it, and a run that ends first drops it (its messages return to the broker unsettled).
type nextBatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	raw    []*Message
	err    error
	// peeked: the run looked at the batch before taking it (peekNextBatch); read is the batch as
	// read then, which takeNextBatch returns.
	peeked bool
	read   []msg
}

// askNextBatch starts the receive of the next batch on one of the engine's workers.
func (r *run) askNextBatch() {
	ctx, cancel := context.WithCancel(r.ctx)
	p := &nextBatch{ctx: ctx, cancel: cancel, done: make(chan struct{})}
	stopWatch := context.AfterFunc(r.opts.stop, cancel)
	r.e.stats.calls[CallReceive].Add(1)
	r.e.workers.run(func() {
		defer close(p.done)
		defer stopWatch()
		p.raw, p.err = r.s.sess.Receive(ctx, r.e.cfg.ReceiveBatch)
	})
	r.in.next = p
}

// takeNextBatch returns the batch of p, waiting for it up to the idle timeout from now, as a
// receive sent now would. A source that returns at once with nothing (one that does not wait, as
// test fakes may) is asked again, now.
func (r *run) takeNextBatch(p *nextBatch) ([]msg, error) {
	idle := r.e.clock.AfterFunc(r.e.cfg.IdleTimeout, p.cancel)
	<-p.done
	idle.Stop()
	ended := p.ctx.Err() != nil
	p.cancel()
	if p.err != nil {
		if ended && r.ctx.Err() == nil && !errors.Is(p.err, ErrLockLost) {
			return r.e.read(p.raw, false), nil // the idle timer or a stop ended the receive
		}
		return nil, r.s.callErr(CallReceive, p.err)
	}
	if len(p.raw) == 0 && !ended {
		return r.receive()
	}
	if p.peeked {
		return p.read, nil
	}
	return r.e.read(p.raw, false), nil
}

// peekNextBatch returns the next batch if its receive has landed with messages, without waiting
// and without taking it (the batch in hand is still being handled): a recorded run may extend
// over it (extendRun). It looks once per receive.
func (r *run) peekNextBatch() []msg {
	p := r.in.next
	if p == nil || p.peeked {
		return nil
	}
	select {
	case <-p.done:
	default:
		return nil
	}
	p.peeked = true
	if p.err != nil || len(p.raw) == 0 {
		return nil
	}
	p.read = r.e.read(p.raw, false)
	return p.read
}

// dropNextBatch ends a receive the run started and will not take: the run ends.
func (r *run) dropNextBatch() {
	if p := r.in.next; p != nil {
		r.in.next = nil
		p.cancel()
		<-p.done
	}
}

// receiveDeferred fetches deferred messages by broker sequence number, read against the contract.
func (r *run) receiveDeferred(bss []int64) ([]msg, error) {
	if r.s.lost.Load() {
		return nil, r.s.callErr(CallReceiveDeferred, ErrLockLost)
	}
	ds, ok := r.s.sess.(DeferringSession)
	if !ok {
		return nil, r.s.callErr(CallReceiveDeferred, ErrNoDeferral)
	}
	r.e.stats.calls[CallReceiveDeferred].Add(1)
	raw, err := ds.ReceiveDeferred(r.ctx, bss)
	if err != nil {
		return nil, r.s.callErr(CallReceiveDeferred, err)
	}
	return r.e.read(raw, true), nil
}

func (r *run) renewLoop() {
	cfg := r.e.cfg
	for {
		d := cfg.LockRenewInterval
		if d == 0 {
			if until := r.s.sess.LockedUntil(); until.IsZero() {
				d = 10 * time.Second // the session does not know its expiry
			} else {
				d = max(until.Sub(r.now())/2, 100*time.Millisecond)
			}
		}
		t := r.e.clock.NewTimer(d)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		r.e.stats.calls[CallRenewLock].Add(1)
		if _, err := r.s.sess.RenewLock(r.ctx); err != nil {
			if errors.Is(err, ErrLockLost) {
				r.s.markLost()
				return
			}
			if r.ctx.Err() != nil {
				return
			}
			r.log().WarnContext(r.ctx, "sequencer: renewing session lock", slog.Any("error", err))
		}
	}
}
