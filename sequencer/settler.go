package sequencer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// settler makes one run's settlements at the broker and owns what they share. Nothing is settled
// once the lock is known lost (the first lost lock cancels the run); every settlement but a
// completion through the completer first waits for the completions in flight ("Pipelined
// completion" in the package documentation). The atomic fields are shared with the renewal
// goroutine and the background completions; the rest belongs to the run's goroutine.
type settler struct {
	e      *Engine
	sess   Session
	id     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   atomic.Bool
	// answered is when the latest call the broker answered for this run was sent (UnixNano): the
	// lock was held then. Background completions land in any order, so it only moves forward.
	answered atomic.Int64
	// busy: the broker refused one of this run's settlements as busy (a throttled namespace).
	busy atomic.Bool
	// done completes the messages whose handling is saved.
	done completer
	// settled maps the application sequence of settled messages that may still have an index
	// entry (State.Deferred, State.SkippedPoison) to their broker sequence; the next save removes
	// those entries (State.pruneSettled).
	settled map[int64]int64
	// refused maps the application sequence of indexed messages whose settlement the broker
	// refused as busy (ErrSettlementRefused) to their broker sequence: their entries stay, and
	// this run does not look for them again (they are locked to it until it releases the
	// session); the next run settles them (nil until one is refused).
	refused map[int64]int64
	// anchors are handled active messages whose completion waits until no handled-but-due
	// deferred work depends on them to wake the session (see Waking in the package doc).
	anchors []anchor
}

// anchor is a handled (or skipped) active message whose settlement waits for the drain.
type anchor struct {
	m *msg
	// deadLetter, when set, is the description of a HandlerFailed dead-lettering (PoisonSkip);
	// otherwise the anchor is completed.
	deadLetter string
	// indexed: an index entry names m (State.Deferred), removed by the save after m is settled.
	indexed bool
}

// init readies s for a run of e on sess: ctx is the run's context, cancel cancels it.
func (s *settler) init(ctx context.Context, cancel context.CancelCauseFunc, e *Engine, sess Session) {
	s.e, s.sess, s.id, s.ctx, s.cancel = e, sess, sess.ID(), ctx, cancel
	s.settled = map[int64]int64{}
	s.done = syncCompleter{s}
	if n := e.cfg.MaxPendingSettlements; n > 1 {
		s.done = newPipeline(s, n)
	}
}

// markLost records that the session lock is gone: the run is canceled with ErrLockLost, once.
func (s *settler) markLost() {
	if s.lost.CompareAndSwap(false, true) {
		s.cancel(ErrLockLost)
		s.e.observe(Event{Kind: EventLockLost, SessionID: s.id})
	}
}

// callErr wraps the error of a broker call, noting a lost lock.
func (s *settler) callErr(kind CallKind, err error) error {
	if errors.Is(err, ErrLockLost) {
		s.markLost()
	}
	return fmt.Errorf("sequencer: session %s: %s: %w", s.id, kind, err)
}

// settle waits for the completions in flight, then runs one settlement now. landed is false when
// the broker refused it as busy (ErrSettlementRefused), which is not an error: the message is
// not settled, and is settled again later (see ErrSettlementRefused).
func (s *settler) settle(kind CallKind, m *msg, fn func(context.Context, *Message) error) (landed bool, err error) {
	if err := s.await(); err != nil {
		return false, err
	}
	return s.call(kind, m, fn, s.e.clock.Now())
}

// call runs one settlement that the run asked for at asked: a background completion runs it
// later, concurrently with the run, and the lease counts from the ask, which comes before the
// call is sent. landed as for settle.
func (s *settler) call(kind CallKind, m *msg, fn func(context.Context, *Message) error, asked time.Time) (landed bool, err error) {
	if s.lost.Load() {
		return false, s.callErr(kind, ErrLockLost)
	}
	if m.stored {
		// A copy read from the store: the save that moves Next past it removes it (a HeldStore's
		// guarantee); a dead-lettering is the run's (deadLetterHeld), never the broker's.
		if kind == CallDeadLetter {
			return false, fmt.Errorf("sequencer: session %s: sequence %d was held in the store: it is dead-lettered there", s.id, m.seq)
		}
		return true, nil
	}
	s.e.stats.calls[kind].Add(1)
	if err := fn(s.ctx, m.raw); err != nil {
		if errors.Is(err, ErrSettlementRefused) && !errors.Is(err, ErrLockLost) {
			// Not an answer that proves the lock (a presumed refusal had none): answered stays.
			s.e.stats.settlementsRefused.Add(1)
			s.busy.Store(true)
			return false, nil
		}
		return false, s.callErr(kind, err)
	}
	s.noteAnswered(asked)
	return true, nil
}

// noteAnswered records that a call sent at sent was answered: the broker held the lock for this
// run at some moment after sent.
func (s *settler) noteAnswered(sent time.Time) {
	t := sent.UnixNano()
	for {
		cur := s.answered.Load()
		if t <= cur || s.answered.CompareAndSwap(cur, t) {
			return
		}
	}
}

// holdLease makes a pipelined run wait for its completions in flight before the next handler
// call once the latest answered call was sent PipelineLease ago or more ("Pipelined runs").
func (s *settler) holdLease() error {
	lease := s.e.cfg.PipelineLease
	if !s.e.pipelined || lease < 0 {
		return nil
	}
	if s.e.clock.Now().Sub(time.Unix(0, s.answered.Load())) < lease {
		return nil
	}
	return s.await()
}

// complete completes m now, after the completions in flight; landed as for settle.
func (s *settler) complete(m *msg) (landed bool, err error) {
	return s.settle(CallComplete, m, s.sess.Complete)
}

// deferMsg defers m. A deferral refused as busy leaves m active and locked to the session: it is
// delivered again once the session is released, and its index entry recognises it (as after a
// crash between the save and the defer).
func (s *settler) deferMsg(m *msg) error {
	ds, ok := s.sess.(DeferringSession)
	if !ok {
		return s.callErr(CallDefer, ErrNoDeferral)
	}
	_, err := s.settle(CallDefer, m, ds.Defer)
	return err
}

// abandon abandons m. One refused as busy has the same outcome later: m returns to the broker
// when the session is released.
func (s *settler) abandon(m *msg) error {
	_, err := s.settle(CallAbandon, m, s.sess.Abandon)
	return err
}

// deadLetter dead-letters m; landed as for settle.
func (s *settler) deadLetter(m *msg, reason, desc string) (landed bool, err error) {
	return s.settle(CallDeadLetter, m, func(ctx context.Context, raw *Message) error {
		return s.sess.DeadLetter(ctx, raw, DeadLetterParams{Reason: reason, Description: desc})
	})
}

// deadLetterSkipped dead-letters m, a poison message PoisonSkip skipped; its SkippedPoison entry
// goes in the next save once the dead-lettering landed (refused, the entry dead-letters the copy
// delivered again).
func (s *settler) deadLetterSkipped(m *msg, desc string) error {
	landed, err := s.deadLetter(m, ReasonHandlerFailed, desc)
	if err != nil {
		return err
	}
	s.landedIndexed(landed, m)
	if landed {
		s.e.stats.deadLettered.Add(1)
	}
	return nil
}

// landedIndexed records the settlement of m, a message an index entry may name: landed, the
// entry goes in the next save (settled); refused, it stays, and this run leaves it (refused).
func (s *settler) landedIndexed(landed bool, m *msg) {
	if landed {
		s.settled[m.seq] = m.bs
		return
	}
	if s.refused == nil {
		s.refused = map[int64]int64{}
	}
	s.refused[m.seq] = m.bs
}

// refusedHere reports whether this run's settlement of the message with application sequence
// seq and broker sequence bs was refused as busy.
func (s *settler) refusedHere(seq, bs int64) bool {
	b, ok := s.refused[seq]
	return ok && b == bs
}

// completeLater completes m, an active message whose handling is saved and that nothing else
// depends on, through the completer, unless an earlier background completion failed. refused,
// for an entry of the stored record, counts its refusal as busy.
func (s *settler) completeLater(m *msg, refused *atomic.Int64) error {
	if err := s.done.failure(); err != nil {
		return err
	}
	return s.done.issue(m, refused)
}

// completeEntry completes m, a handled entry of the run this engine recorded, through c. m's
// completion is issued even when an earlier background completion failed (m is handled: leaving
// it at the broker would hand it over again), and that failure is returned after it. refused
// counts its refusal as busy.
func (s *settler) completeEntry(m *msg, c completer, refused *atomic.Int64) error {
	if err := c.issue(m, refused); err != nil {
		return err
	}
	return s.done.failure()
}

// failure reports the error of a background completion that has already finished.
func (s *settler) failure() error { return s.done.failure() }

// await waits for every background completion and returns the first error. It runs before every
// other settlement, at the end of a session and before the session is released.
func (s *settler) await() error { return s.done.wait() }

// inFlight is the number of completions started and not yet answered.
func (s *settler) inFlight() int { return s.done.inFlight() }

// anchor keeps m unsettled until the drain it wakes the session for is durable; deadLetter is the
// description of a skipped poison message's dead-lettering ("" completes it).
func (s *settler) anchor(m *msg, deadLetter string, indexed bool) {
	s.anchors = append(s.anchors, anchor{m: m, deadLetter: deadLetter, indexed: indexed})
}

// settleAnchors settles the anchors in the order they were handled; after a failure the rest
// stay for a later call.
func (s *settler) settleAnchors() error {
	for len(s.anchors) > 0 {
		a := s.anchors[0]
		if a.deadLetter != "" {
			if err := s.deadLetterSkipped(a.m, a.deadLetter); err != nil {
				return err
			}
		} else {
			landed, err := s.complete(a.m)
			if err != nil {
				return err
			}
			if a.indexed {
				s.landedIndexed(landed, a.m)
			}
		}
		s.anchors = s.anchors[1:]
	}
	return nil
}

// completer completes handled messages at the broker. The synchronous one completes before it
// returns; the pipelined one (EngineConfig.MaxPendingSettlements > 1) starts the completion in the
// background, at most MaxPendingSettlements at a time, and keeps the first error for failure and
// wait. Only the run's own goroutine issues completions and waits for them.
type completer interface {
	// issue completes m, or starts its completion once a slot is free. refused, when set, counts
	// a refusal as busy (an entry of the stored record).
	issue(m *msg, refused *atomic.Int64) error
	// failure returns the first error of a background completion that has finished, if any.
	failure() error
	// wait waits for every completion started and returns the first error.
	wait() error
	// inFlight is the number of completions started and not yet answered.
	inFlight() int
}

// syncCompleter completes each message before issue returns.
type syncCompleter struct{ s *settler }

func (c syncCompleter) issue(m *msg, refused *atomic.Int64) error {
	landed, err := c.s.call(CallComplete, m, c.s.sess.Complete, c.s.e.clock.Now())
	if err == nil && !landed && refused != nil {
		refused.Add(1)
	}
	return err
}

func (syncCompleter) failure() error { return nil }
func (syncCompleter) wait() error    { return nil }
func (syncCompleter) inFlight() int  { return 0 }

// pipeline completes in the background, on the engine's workers.
type pipeline struct {
	s     *settler
	slots chan struct{}
	// wg counts the tasks started and not finished.
	wg sync.WaitGroup

	mu  sync.Mutex
	err error
}

func newPipeline(s *settler, n int) *pipeline {
	return &pipeline{s: s, slots: make(chan struct{}, n)}
}

func (p *pipeline) inFlight() int { return len(p.slots) }

func (p *pipeline) issue(m *msg, refused *atomic.Int64) error {
	s := p.s
	select {
	case p.slots <- struct{}{}:
	case <-s.ctx.Done():
		return fmt.Errorf("sequencer: session %s: waiting to complete broker sequence %d: %w", s.id, m.bs, context.Cause(s.ctx))
	}
	if s.lost.Load() {
		<-p.slots
		return s.callErr(CallComplete, ErrLockLost)
	}
	asked := s.e.clock.Now()
	p.wg.Add(1)
	s.e.workers.run(func() {
		defer p.wg.Done()
		defer func() { <-p.slots }()
		landed, err := s.call(CallComplete, m, s.sess.Complete, asked)
		if err != nil {
			p.fail(err)
		} else if !landed && refused != nil {
			refused.Add(1)
		}
	})
	return nil
}

// failure returns the first error of a completion that has finished, if any.
func (p *pipeline) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *pipeline) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// wait blocks until every completion started has finished and returns the first error.
func (p *pipeline) wait() error {
	p.wg.Wait()
	return p.failure()
}

// workers runs an engine's background calls on goroutines shared by its runs and kept while
// there is work (a kept goroutine grows its stack once); one idle for workerIdle ends.
type workers struct {
	tasks chan func()
}

// workerIdle is how long a worker goroutine waits for its next task before it ends.
const workerIdle = 100 * time.Millisecond

func newWorkers() *workers { return &workers{tasks: make(chan func())} }

// run runs fn on an idle worker, or on a new one when none is idle.
func (w *workers) run(fn func()) {
	select {
	case w.tasks <- fn:
	default:
		go w.work(fn)
	}
}

func (w *workers) work(fn func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-w.tasks:
		case <-idle.C:
			return
		}
	}
}
