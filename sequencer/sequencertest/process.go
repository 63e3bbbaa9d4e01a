package sequencertest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/seqbus/seqbus/sequencer"
)

// Phase says whether a hook runs before or after the operation takes effect.
type Phase int

// Hook phases.
const (
	Before Phase = iota
	After
)

func (p Phase) String() string {
	if p == Before {
		return "before"
	}
	return "after"
}

// Call describes one operation of a fake for a Process hook. Ops: accept_next, accept, receive,
// receive_deferred, holding, complete, defer, dead_letter, abandon, renew_lock, close,
// get_state, set_state (broker); load, save, delete (store).
type Call struct {
	Op        string
	SessionID string
	Phase     Phase
	// BrokerSequences are the broker sequence numbers of the messages a settlement settles, or
	// (After only) of the messages a receive or receive-deferred returned.
	BrokerSequences []int64
}

func (c Call) String() string {
	if len(c.BrokerSequences) == 0 {
		return fmt.Sprintf("%s %s(%s)", c.Phase, c.Op, c.SessionID)
	}
	return fmt.Sprintf("%s %s(%s) %v", c.Phase, c.Op, c.SessionID, c.BrokerSequences)
}

// ErrCrash, returned by a hook, crashes the process: the call fails (after the operation took
// effect if the hook ran After), the process's session locks are released as if they had
// expired, and every later call of the process fails with ErrCrashed.
var ErrCrash = errors.New("sequencertest: crash requested")

// ErrCrashed is returned by every call of a crashed process. It wraps sequencer.ErrLockLost so
// that the engine settles nothing more.
var ErrCrashed = fmt.Errorf("sequencertest: process crashed: %w", sequencer.ErrLockLost)

// Process is a simulated worker process shared by the clients of fakes (a broker Client, a
// store client); a hook sees every call and may fail it or crash the whole process.
type Process struct {
	// Hook, if set, is called before and after each operation. A non-nil error fails the
	// call; ErrCrash (possibly wrapped) crashes the process.
	Hook func(Call) error

	mu        sync.Mutex
	crashed   bool
	crashFns  []func()
	crashedAt Call
}

// Crashed reports whether the process has crashed.
func (p *Process) Crashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashed
}

// CrashedAt returns the call that crashed the process (zero if none or Crash was called).
func (p *Process) CrashedAt() Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashedAt
}

// Crash crashes the process now.
func (p *Process) Crash() { p.crash(Call{}) }

func (p *Process) crash(at Call) {
	p.mu.Lock()
	if p.crashed {
		p.mu.Unlock()
		return
	}
	p.crashed, p.crashedAt = true, at
	fns := p.crashFns
	p.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (p *Process) onCrash(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.crashFns = append(p.crashFns, fn)
}

func (p *Process) check(c Call) error {
	if p.Crashed() {
		return ErrCrashed
	}
	if p.Hook == nil {
		return nil
	}
	if err := p.Hook(c); err != nil {
		if errors.Is(err, ErrCrash) {
			p.crash(c)
			return ErrCrashed
		}
		return fmt.Errorf("%s: %w", c, err)
	}
	return nil
}

// hook runs the hook for the call (op on sessionID, naming the messages in *msgs when msgs is
// set) in phase. It builds the Call itself and is kept out of line, so that the fakes' calls keep
// small frames: they run on the engine's background goroutines, whose stacks would otherwise grow
// (a cost the engine's benchmarks would measure).
//
//go:noinline
func (p *Process) hook(phase Phase, op, sessionID string, msgs *[]int64) error {
	c := Call{Op: op, SessionID: sessionID, Phase: phase}
	if msgs != nil {
		c.BrokerSequences = *msgs
	}
	return p.check(c)
}
