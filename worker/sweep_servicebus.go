package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// With Service Bus session state, reading a state locks the session, so the sweeper keeps a
// sessionstate.Watch: each sweep reads only the sessions whose state changed since the last one,
// and the Watch's snapshot lives in the lease session's own state, so that a replica taking the
// lease over goes on from there instead of reading every session again.

// snapshotEvery is how many sweeps may pass between two snapshot writes while the kept set does
// not change: the cursor a new holder starts from is at most that many intervals old.
const snapshotEvery = 10

// watchAttention finds the sessions with a Watch.
type watchAttention struct {
	watch *sessionstate.Watch
	// lease keeps the snapshot; nil keeps none (a full rescan after every reset).
	lease *sessionLease
	calls func(op string, n int)
	log   *slog.Logger

	restored   bool
	lastKept   string
	sinceSaved int
}

func (a *watchAttention) sessions(ctx context.Context, now time.Time) ([]sessionstate.Entry, error) {
	if !a.restored && a.lease != nil {
		a.restored = true
		b, err := a.lease.state(ctx)
		switch {
		case err != nil:
			a.log.WarnContext(ctx, "worker: sweeper: reading the snapshot of the last lease holder; reading every session instead", slog.Any("error", err))
		case len(b) > 0:
			if err := a.watch.Restore(b); err != nil {
				a.log.WarnContext(ctx, "worker: sweeper: the last lease holder's snapshot is unusable; reading every session instead", slog.Any("error", err))
			}
		}
	}
	entries, stats, err := a.watch.Sweep(ctx, now)
	a.calls("list_sessions", max(1, (stats.Changed+99)/100))
	if stats.Rescanning > 0 {
		a.log.InfoContext(ctx, "worker: sweeper: reading every session with state once, a share per sweep",
			slog.Int("num_left", stats.Rescanning))
	}
	if stats.Carried > 0 {
		a.log.InfoContext(ctx, "worker: sweeper: more sessions changed than a sweep reads; the rest are read at the next sweeps",
			slog.Int("num_read", stats.Read), slog.Int("num_left", stats.Carried))
	}
	if err != nil {
		return nil, err
	}
	a.save(ctx, entries)
	return entries, nil
}

// save writes the Watch's snapshot into the lease session when the kept set changed, or every
// snapshotEvery sweeps.
func (a *watchAttention) save(ctx context.Context, entries []sessionstate.Entry) {
	if a.lease == nil {
		return
	}
	kept := ""
	for _, e := range entries {
		kept += e.SessionID + "\x00"
	}
	a.sinceSaved++
	if kept == a.lastKept && a.sinceSaved < snapshotEvery {
		return
	}
	b := a.watch.Snapshot(a.lease.maxState)
	if err := a.lease.setState(ctx, b); err != nil {
		a.log.WarnContext(ctx, "worker: sweeper: saving the snapshot for the next lease holder", slog.Any("error", err))
		return
	}
	a.lastKept, a.sinceSaved = kept, 0
}

func (a *watchAttention) reset() {
	a.watch.Reset()
	a.restored, a.lastKept, a.sinceSaved = false, "", 0
}

// state reads the lease session's state (the last holder's snapshot).
func (l *sessionLease) state(ctx context.Context) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acc, err := l.accessorLocked()
	if err != nil {
		return nil, err
	}
	return acc.GetState(ctx)
}

// setState replaces the lease session's state (nil clears it).
func (l *sessionLease) setState(ctx context.Context, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	acc, err := l.accessorLocked()
	if err != nil {
		return err
	}
	return acc.SetState(ctx, b)
}

func (l *sessionLease) accessorLocked() (sbstate.StateAccessor, error) {
	if l.sess == nil {
		return nil, errors.New("the sweeper lease is not held")
	}
	acc, ok := l.sess.(sbstate.StateAccessor)
	if !ok {
		return nil, fmt.Errorf("the lease session (%T) has no session state", l.sess)
	}
	return acc, nil
}

// countingSource counts the broker calls made through a SessionSource and its sessions.
type countingSource struct {
	sequencer.SessionSource
	calls func(op string, n int)
}

func (c countingSource) Accept(ctx context.Context, id string) (sequencer.Session, error) {
	c.calls("accept", 1)
	sess, err := c.SessionSource.Accept(ctx, id)
	if err != nil {
		return nil, err
	}
	return countingSession{Session: sess, calls: c.calls}, nil
}

// countingSession counts the calls the sweeper makes on a session: its lock, its state, its close.
type countingSession struct {
	sequencer.Session
	calls func(op string, n int)
}

func (c countingSession) RenewLock(ctx context.Context) (time.Time, error) {
	c.calls("renew_lock", 1)
	return c.Session.RenewLock(ctx)
}

func (c countingSession) Close(ctx context.Context) error {
	c.calls("close", 1)
	return c.Session.Close(ctx)
}

func (c countingSession) GetState(ctx context.Context) ([]byte, error) {
	acc, ok := c.Session.(sbstate.StateAccessor)
	if !ok {
		return nil, fmt.Errorf("session %q (%T) has no session state", c.ID(), c.Session)
	}
	c.calls("get_state", 1)
	return acc.GetState(ctx)
}

func (c countingSession) SetState(ctx context.Context, b []byte) error {
	acc, ok := c.Session.(sbstate.StateAccessor)
	if !ok {
		return fmt.Errorf("session %q (%T) has no session state", c.ID(), c.Session)
	}
	c.calls("set_state", 1)
	return acc.SetState(ctx, b)
}

var _ sbstate.StateAccessor = countingSession{}
