package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
)

// gapWarnings are the ages of an open gap at which the sweeper warns (again).
var gapWarnings = []time.Duration{time.Minute, 10 * time.Minute, time.Hour}

// sweeper looks, every interval, at the sessions whose state says they may need attention
// (parked, blocked, waiting on a gap, stranded on deferred messages, waiting for a released
// retry): it hands the runner those the broker will not offer (stranded; past their gap timeout
// when the gap policy skips or parks; due for their released retry), refreshes the session
// gauges, and warns about gaps open for long. A released retry that is not due yet is woken on
// time by a timer armed for the earliest such retry the last sweep saw, not at the next sweep.
// One replica per entity sweeps: the one that holds the lease (every replica tries each
// interval); the others report 0 in the session gauges.
type sweeper struct {
	attention attention
	// lease, when set, makes this replica sweep only while it holds it.
	lease lease
	// before, when set, runs at the start of each sweep (the Postgres tombstone purge).
	before func(ctx context.Context)
	// held, when set (the Postgres store), is read each sweep for the held-message gauges.
	held     sequencer.HeldStore
	wake     func(id string)
	interval time.Duration
	// gapTimeout, when positive and gapActs (the gap policy is skip or park), makes a session
	// whose gap is that old due a run.
	gapTimeout time.Duration
	gapActs    bool
	clock      clock.Clock
	m          *metrics
	log        *slog.Logger

	// holding: this replica held the lease at the last interval.
	holding bool
	// warned holds, per session with an open gap, how many gapWarnings were logged, and since
	// when the gap is open (a new gap starts over).
	warned map[string]gapWarned

	// retries holds the released retries the last sweep saw that were not due yet (session id →
	// when due); retryTimer fires at the earliest of them. The timer's goroutine and the sweep
	// share them under retryMu.
	retryMu    sync.Mutex
	retries    map[string]time.Time
	retryTimer clock.Timer
}

// attention finds the sessions whose state may need the sweeper.
type attention interface {
	// sessions returns the sessions that are parked, blocked, on a gap, stranded or waiting for
	// a released retry, as of now.
	sessions(ctx context.Context, now time.Time) ([]sessionstate.Entry, error)
	// reset forgets what it learnt: this replica lost the lease (or takes it anew).
	reset()
}

type gapWarned struct {
	since time.Time
	n     int
}

// gapPolicyActs reports whether the engine acts on a gap timeout (skip or park), so that the
// sweeper must wake a session whose gap is older than the timeout: nothing else would.
func gapPolicyActs(e sequencer.EngineConfig) bool {
	return e.GapTimeout > 0 && e.GapPolicy != sequencer.GapWait
}

// pageSize bounds one List call of a sweep.
const pageSize = 500

// service sweeps every interval until it is stopped, then lets go of the lease so that another
// replica takes it at its next try.
func (s *sweeper) service() *base {
	return newBase("worker: sweeper", s.log, func(soft, _ context.Context) error {
		every(soft, s.clock, s.interval, s.tick)
		s.planRetries(nil)
		if s.lease != nil {
			s.lease.Release(soft)
		}
		return nil
	})
}

// tick sweeps if this replica holds the lease (taking it when free).
func (s *sweeper) tick(ctx context.Context) {
	if s.lease != nil {
		held, err := s.lease.Hold(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "worker: sweeper lease", slog.Any("error", err))
		}
		s.m.sweeperLease.Set(b2f(held))
		switch {
		case !held && s.holding:
			s.log.InfoContext(ctx, "worker: sweeper lease lost; another replica sweeps")
			s.holding = false
			s.attention.reset()
			clear(s.warned)
			s.planRetries(nil) // the new holder wakes them
			s.m.sessionsParked.Set(0)
			s.m.sessionsBlocked.Set(0)
			s.m.retrying.Set(0)
			s.m.gapOldest.Set(0)
			s.setHeld(sequencer.HeldTotals{})
			return
		case !held:
			return
		case !s.holding:
			s.log.InfoContext(ctx, "worker: took the sweeper lease; this replica sweeps")
			s.holding = true
			s.attention.reset()
		}
	}
	stop := s.keepLease(ctx)
	err := s.sweep(ctx)
	stop()
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "worker: sweep failed; trying again at the next interval", slog.Any("error", err))
	}
}

// keepLease renews the lease every interval until the returned stop is called. A sweep may
// outlast the lease's lock (up to 2,000 session reads on a loaded replica with Service Bus
// session state); a lease lost mid-sweep passes to another replica, which starts over from the
// last snapshot, or rescans every session when there was none, and the two hand it back and
// forth while the sweeps stay long.
func (s *sweeper) keepLease(ctx context.Context) (stop func()) {
	if s.lease == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for clock.Sleep(ctx, s.clock, s.interval) == nil {
			if _, err := s.lease.Hold(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "worker: sweeper lease", slog.Any("error", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// listerAttention finds the sessions with a Lister query (Postgres: indexed columns).
type listerAttention struct{ lister sessionstate.Lister }

func (a listerAttention) sessions(ctx context.Context, _ time.Time) ([]sessionstate.Entry, error) {
	var out []sessionstate.Entry
	after := ""
	for {
		page, err := a.lister.List(ctx, sessionstate.ListParams{
			Filter: sessionstate.Filter{Parked: true, Blocked: true, Gap: true, Stranded: true, Retrying: true},
			After:  after, Limit: pageSize,
		})
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		out = append(out, page...)
		if len(page) < pageSize {
			return out, nil
		}
		after = page[len(page)-1].SessionID
	}
}

func (listerAttention) reset() {}

// purge returns the Postgres tombstone purge: it deletes the tombstones of pg older than ttl at
// the start of each sweep of the lease holder. The engine deletes an expired tombstone only when
// its session runs again; without this purge the table would grow with every session ever ended.
func purge(pg *postgres.Store, ttl time.Duration, clk clock.Clock, log *slog.Logger) func(ctx context.Context) {
	return func(ctx context.Context) {
		n, err := pg.PurgeTombstones(ctx, pg.Entity(), clk.Now().Add(-ttl))
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "worker: purging expired tombstones", slog.Any("error", err))
		case n > 0:
			log.InfoContext(ctx, "worker: purged expired tombstones", slog.Int64("num_deleted", n))
		}
	}
}

// sweep looks at every session that is parked, blocked, waiting on a gap, stranded or waiting
// for a released retry, once.
func (s *sweeper) sweep(ctx context.Context) error {
	if s.before != nil {
		s.before(ctx)
	}
	now := s.clock.Now()
	entries, err := s.attention.sessions(ctx, now)
	if err != nil {
		return fmt.Errorf("worker: sweep: %w", err)
	}
	var (
		parked, blocked, retrying, wakes int
		oldest                           time.Duration
	)
	seen := map[string]bool{}
	retries := map[string]time.Time{}
	for _, e := range entries {
		if e.Busy {
			continue // a worker holds it: it is being handled
		}
		st := e.State
		if st.Parked != nil {
			parked++
		}
		if st.Blocked != nil {
			blocked++
		}
		if !st.GapSince.IsZero() && st.Parked == nil {
			age := now.Sub(st.GapSince)
			oldest = max(oldest, age)
			seen[e.SessionID] = true
			s.warnGap(ctx, e, age)
		}
		if st.Retrying != nil && st.Parked == nil && st.EndedAt.IsZero() {
			retrying++
			if !st.RetryDue(now) {
				retries[e.SessionID] = st.Retrying.At
			}
		}
		if st.NeedsWake() || (s.gapActs && st.GapExpired(now, s.gapTimeout)) || st.RetryDue(now) {
			s.wake(e.SessionID)
			wakes++
		}
	}
	s.planRetries(retries)
	for id := range s.warned {
		if !seen[id] {
			delete(s.warned, id) // the gap closed
		}
	}
	s.m.sessionsParked.Set(float64(parked))
	s.m.sessionsBlocked.Set(float64(blocked))
	s.m.retrying.Set(float64(retrying))
	s.m.gapOldest.Set(oldest.Seconds())
	s.m.sweeperWakes.Add(float64(wakes))
	if s.held != nil {
		t, err := s.held.HeldTotals(ctx, sequencer.HeldTotalsParams{})
		if err != nil {
			return fmt.Errorf("worker: sweep: reading the held messages: %w", err)
		}
		s.setHeld(t)
	}
	if wakes > 0 {
		s.log.DebugContext(ctx, "worker: sweeper woke sessions", slog.Int("num_sessions", wakes))
	}
	return nil
}

// warnGap logs a warning when the gap of e has been open for another of gapWarnings.
func (s *sweeper) warnGap(ctx context.Context, e sessionstate.Entry, age time.Duration) {
	w := s.warned[e.SessionID]
	if !w.since.Equal(e.State.GapSince) {
		w = gapWarned{since: e.State.GapSince}
	}
	n := w.n
	for n < len(gapWarnings) && age >= gapWarnings[n] {
		n++
	}
	if n > w.n {
		s.log.WarnContext(ctx, "worker: session still waiting for a missing sequence",
			slog.String("session_id", e.SessionID),
			slog.Int64("expected", e.State.Next),
			slog.Int64("lowest_waiting", e.State.LowestDeferredAbove(e.State.Next)),
			slog.Duration("waiting", age.Round(time.Second)),
			slog.Time("gap_since", e.State.GapSince))
	}
	w.n = n
	s.warned[e.SessionID] = w
}

// planRetries replaces the released retries to wake on time with retries (nil: none; the lease is
// gone or the sweeper stops) and arms the timer for the earliest.
func (s *sweeper) planRetries(retries map[string]time.Time) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	s.retries = retries
	s.armLocked()
}

// armLocked arms the retry timer for the earliest planned retry (stopping the one armed before).
func (s *sweeper) armLocked() {
	if s.retryTimer != nil {
		s.retryTimer.Stop()
		s.retryTimer = nil
	}
	var first time.Time
	for _, at := range s.retries {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		return
	}
	s.retryTimer = s.clock.AfterFunc(max(first.Sub(s.clock.Now()), 0), s.wakeDueRetries)
}

// wakeDueRetries wakes the planned retries that are due and arms the timer for the next one. A
// retry planned anew since the last sweep (another attempt failed, an operator's retry-now) is
// seen at the next sweep; the runner that released it wakes it on time meanwhile.
func (s *sweeper) wakeDueRetries() {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	now, n := s.clock.Now(), 0
	for id, at := range s.retries {
		if !now.Before(at) {
			delete(s.retries, id)
			s.wake(id)
			n++
		}
	}
	s.m.sweeperWakes.Add(float64(n))
	s.armLocked()
}

// setHeld sets the held-message gauges to t.
func (s *sweeper) setHeld(t sequencer.HeldTotals) {
	s.m.heldMessages.Set(float64(t.Held.Messages))
	s.m.heldBytes.Set(float64(t.Held.Bytes))
	s.m.heldDeadLetters.Set(float64(t.DeadLetters.Messages))
}
