package sequencer

import (
	"context"
	"fmt"
	"sync"
)

// pipeline runs the completions of one run in the background, at most cap(slots) at a time, and
// keeps the first error. Only the run's own goroutine starts completions and waits for them.
type pipeline struct {
	slots chan struct{}
	wg    sync.WaitGroup

	mu  sync.Mutex
	err error
}

func newPipeline(n int) *pipeline {
	return &pipeline{slots: make(chan struct{}, n)}
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

// completeLater completes m, an in-order or duplicate active message whose handling is saved and
// that no index entry or drain depends on. With pipelining it returns once the completion is
// started (after waiting for a free slot); its error surfaces at the next completeLater, before
// the next handler call, or when the pipeline is awaited. Without pipelining it completes m now.
func (r *run) completeLater(m *Message) error {
	p := r.pipe
	if p == nil {
		return r.complete(m)
	}
	if err := p.failure(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-r.ctx.Done():
		return fmt.Errorf("sequencer: session %s: waiting to complete broker sequence %d: %w", r.id, m.BrokerSequence, context.Cause(r.ctx))
	}
	if r.lost.Load() {
		<-p.slots
		return r.sessErr(CallComplete, ErrLockLost)
	}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		if err := r.settleNow(CallComplete, m, r.sess.Complete); err != nil {
			p.fail(err)
		}
	})
	return nil
}

// pipelineErr reports the error of a background completion that has already finished.
func (r *run) pipelineErr() error {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.failure()
}

// awaitSettlements waits for every background completion and returns the first error. It runs
// before every other settlement, at the end of a session and before the session is released.
func (r *run) awaitSettlements() error {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.wait()
}
