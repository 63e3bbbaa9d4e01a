package sessionstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Entry is one session's stored state, as a Lister found it.
type Entry struct {
	SessionID string
	// State and Version are what is stored (nil and 0 when Busy).
	State   *sequencer.State
	Version int64
	// Busy reports that the state could not be read because another receiver holds the session:
	// Service Bus session state is read only under the session lock. A worker is processing it.
	Busy bool
}

// Filter selects sessions by what their state says. The set fields are alternatives: a session
// is listed when it matches any of them; a Filter with none set lists every session. Ended
// sessions (tombstones) are left out unless Ended is set.
type Filter struct {
	// Parked: the poison policy or the gap policy parked the session (State.Parked).
	Parked bool
	// Blocked: the poison policy block holds the session on a failing message (State.Blocked).
	Blocked bool
	// Gap: the session waits for a missing sequence while later ones wait (State.GapSince).
	Gap bool
	// Stranded: the session needs a run the broker will not start (State.NeedsWake), ended or
	// not: a tombstone whose index still lists a handled message that is deferred at the broker
	// (its completion refused as busy, or cut short by a crash) needs one run to settle it.
	Stranded bool
	// Retrying: the session waits, released, for the next attempt of a failing message
	// (State.Retrying).
	Retrying bool
	// Ended includes the tombstones of ended sessions (a stranded one matches Stranded anyway).
	Ended bool
}

// any reports whether f selects on the state at all.
func (f Filter) any() bool { return f.Parked || f.Gap || f.Stranded || f.Blocked || f.Retrying }

// Match reports whether st passes f.
func (f Filter) Match(st *sequencer.State) bool {
	if !st.EndedAt.IsZero() && !f.Ended {
		return f.Stranded && st.NeedsWake()
	}
	if !f.any() {
		return true
	}
	return (f.Parked && st.Parked != nil) || (f.Gap && !st.GapSince.IsZero()) || (f.Stranded && st.NeedsWake()) ||
		(f.Blocked && st.Blocked != nil) || (f.Retrying && st.Retrying != nil)
}

// ListParams are the arguments of Lister.List.
type ListParams struct {
	Filter Filter
	// After lists only sessions whose id sorts after it (paging: pass the last id of a page).
	After string
	// Limit bounds the entries returned; 0 means no bound.
	Limit int
}

// Lister lists the sessions of an entity that have stored state, ordered by session id. Busy
// entries (a state another receiver holds) are listed whatever the filter, since their state is
// unknown. Sweepers and operator commands use it; storetest.RunLister is its conformance suite.
type Lister interface {
	List(ctx context.Context, p ListParams) ([]Entry, error)
}

// ScanConfig configures a ScanLister.
type ScanConfig struct {
	// IDs lists the ids of the sessions that may have stored state (Service Bus: the SDK's
	// list-sessions pager with a state filter). Required.
	IDs func(ctx context.Context) ([]string, error)
	// Source locks each session by id to read its state. Required.
	Source sequencer.SessionSource
	// Store reads the state of a locked session. Required.
	Store sequencer.StateStore
	// PerSession bounds the accept, load and release of one session (default 10s).
	PerSession time.Duration
	// Concurrency is how many sessions are read at once (default 1). Each read is a few round
	// trips to the broker, so a listing of many sessions takes that many round trips in turn.
	Concurrency int
}

// ScanLister lists sessions by locking each one briefly and reading its state: the way to list
// a store that keeps the state in the session itself (Service Bus session state). A session that
// another receiver holds is listed as Busy.
type ScanLister struct {
	cfg ScanConfig
}

var _ Lister = (*ScanLister)(nil)

// NewScanLister checks cfg and returns a ScanLister. Missing fields are a programmer error.
func NewScanLister(cfg ScanConfig) *ScanLister {
	if cfg.IDs == nil || cfg.Source == nil || cfg.Store == nil {
		panic("sessionstate: ScanConfig needs IDs, Source and Store")
	}
	cfg.PerSession = cmp.Or(cfg.PerSession, 10*time.Second)
	cfg.Concurrency = max(cfg.Concurrency, 1)
	return &ScanLister{cfg: cfg}
}

// List implements Lister.
func (l *ScanLister) List(ctx context.Context, p ListParams) ([]Entry, error) {
	ids, err := l.cfg.IDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("sessionstate: list session ids: %w", err)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ids = slices.DeleteFunc(ids, Reserved)
	if p.After != "" {
		i, found := slices.BinarySearch(ids, p.After)
		if found {
			i++
		}
		ids = ids[i:]
	}
	var out []Entry
	// Read a window of sessions at once, then keep what matches in id order, until the limit.
	window := l.cfg.Concurrency
	if window > 1 {
		window *= 4
	}
	for len(ids) > 0 {
		if p.Limit > 0 && len(out) >= p.Limit {
			break
		}
		n := min(window, len(ids))
		entries, err := l.readAll(ctx, ids[:n])
		for _, e := range entries {
			if p.Limit > 0 && len(out) >= p.Limit {
				break
			}
			if e.Busy || (e.Version != 0 && p.Filter.Match(e.State)) {
				out = append(out, e)
			}
		}
		if err != nil {
			return out, err
		}
		ids = ids[n:]
	}
	return out, nil
}

// readAll reads the sessions of ids, up to Concurrency at once. On an error it returns the
// entries before the first session that failed, and that error.
func (l *ScanLister) readAll(ctx context.Context, ids []string) ([]Entry, error) {
	return readStates(ctx, ids, l.cfg.Concurrency, l.read)
}

// readStates reads the sessions of ids with read, up to concurrency at once. On an error it
// returns the entries before the first session that failed, and that error.
func readStates(ctx context.Context, ids []string, concurrency int, read func(context.Context, string) (Entry, error)) ([]Entry, error) {
	entries := make([]Entry, len(ids))
	errs := make([]error, len(ids))
	if concurrency <= 1 {
		for i, id := range ids {
			if entries[i], errs[i] = read(ctx, id); errs[i] != nil {
				return entries[:i], errs[i]
			}
		}
		return entries, nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, concurrency)
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			entries[i], errs[i] = read(ctx, id)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return entries[:i], err
		}
	}
	return entries, nil
}

// read locks session id, loads its state and releases it.
func (l *ScanLister) read(ctx context.Context, id string) (Entry, error) {
	return readState(ctx, l.cfg.Source, l.cfg.Store, l.cfg.PerSession, id)
}

// readState locks session id on source, loads its state from store and releases it, each
// within perSession. A session another receiver holds is Busy.
func readState(ctx context.Context, source sequencer.SessionSource, store sequencer.StateStore, perSession time.Duration, id string) (Entry, error) {
	e := Entry{SessionID: id}
	busy, err := withLock(ctx, source, perSession, id, func(ctx context.Context, sess sequencer.Session) error {
		var err error
		if e.State, e.Version, err = store.Load(ctx, sequencer.LoadParams{Session: sess}); err != nil {
			return fmt.Errorf("sessionstate: read the state of session %q: %w", id, err)
		}
		return nil
	})
	e.Busy = busy
	return e, err
}

// withLock locks session id on source and runs fn with it, then releases it; all within
// perSession. busy reports that another receiver holds the session (fn did not run).
func withLock(ctx context.Context, source sequencer.SessionSource, perSession time.Duration, id string, fn func(context.Context, sequencer.Session) error) (busy bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, perSession)
	defer cancel()
	sess, err := source.Accept(ctx, id)
	if errors.Is(err, sequencer.ErrSessionLocked) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("sessionstate: lock session %q: %w", id, err)
	}
	defer func() {
		// Release the lock even when ctx has ended, but never wait on a hung connection longer
		// than one session may take.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), perSession)
		defer ccancel()
		_ = sess.Close(cctx)
	}()
	return false, fn(ctx, sess)
}
