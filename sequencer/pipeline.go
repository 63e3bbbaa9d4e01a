package sequencer

import "sync"

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
