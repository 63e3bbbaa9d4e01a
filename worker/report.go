package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// reporter records the last state this replica's runner saved of each session (through the
// instrumented store) and, every half sweep interval while it has saved anything since its last
// report, writes the saves of the last two intervals as a sessionstate.Report into the state of
// a reserved session of its own: the sweeper reads that report instead of each session it names
// (see sessionstate.Watch). A report that does not fit the session state keeps every save that
// needs the sweeper and the newest of the others; the sweeper reads those left out. Memory is
// bounded by the sessions saved in two intervals (and by maxEntries).
type reporter struct {
	// source accepts the report session; its calls are the report_* ops of
	// seqbus_sweep_broker_calls_total.
	source sequencer.SessionSource
	id     string
	// window is how far back a report reaches: two sweep intervals, so that the sweeper, which
	// reads the latest report once per interval, misses none of its saves.
	window   time.Duration
	maxState int
	clock    clock.Clock
	log      *slog.Logger

	mu    sync.Mutex
	saves map[string]reporterSave
	// fresh: a save since the last report was written.
	fresh bool
	// incompleteUntil: a save needing the sweeper was left out (maxEntries); reports say so
	// until it has left the window.
	incompleteUntil time.Time
}

type reporterSave struct {
	at    time.Time
	clean bool
}

// maxEntries bounds the saves a reporter keeps, whatever the rate.
const maxEntries = 100_000

// reportSessionID is this process's report session: host name and process id, unique among
// the replicas running at once.
func reportSessionID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return sessionstate.ReportSessionID(fmt.Sprintf("%s.%d", host, os.Getpid()))
}

// saved records the outcome of a save (or delete, st nil) of session id: clean when it
// succeeded and the state needs no sweeper. A failed save is not clean: what is stored is
// unknown.
func (r *reporter) saved(id string, st *sequencer.State, err error) {
	s := reporterSave{at: r.clock.Now(), clean: err == nil && !sessionstate.NeedsSweeper(st)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fresh = true
	if _, ok := r.saves[id]; !ok && len(r.saves) >= maxEntries {
		if !s.clean {
			r.incompleteUntil = s.at.Add(r.window)
		}
		return // left out: the sweeper reads it
	}
	r.saves[id] = s
}

// report takes the saves to report, dropping those older than the window; ok is false when
// nothing was saved since the last report.
func (r *reporter) report() (rep sessionstate.Report, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fresh {
		return rep, false
	}
	now := r.clock.Now()
	from := now.Add(-r.window)
	maps.DeleteFunc(r.saves, func(_ string, s reporterSave) bool { return s.at.Before(from) })
	rep = sessionstate.Report{Written: now, Clean: map[string]time.Time{}, Dirty: map[string]time.Time{},
		Incomplete: now.Before(r.incompleteUntil)}
	for id, s := range r.saves {
		if s.clean {
			rep.Clean[id] = s.at
		} else {
			rep.Dirty[id] = s.at
		}
	}
	r.fresh = false
	return rep, true
}

// write writes a report if there is one: accept the report session, set its state, close it.
// On a failure the saves are reported at the next try.
func (r *reporter) write(ctx context.Context) {
	rep, ok := r.report()
	if !ok {
		return
	}
	if err := r.put(ctx, rep); err != nil {
		r.mu.Lock()
		r.fresh = true
		r.mu.Unlock()
		if ctx.Err() == nil && !errors.Is(err, sequencer.ErrSessionLocked) { // locked: the sweeper reads it
			r.log.WarnContext(ctx, "worker: writing the release report; the sweeper reads those sessions instead", slog.Any("error", err))
		}
	}
}

func (r *reporter) put(ctx context.Context, rep sessionstate.Report) error {
	b, dropped, err := rep.Encode(r.maxState)
	if err != nil {
		return err
	}
	if dropped > 0 {
		r.log.DebugContext(ctx, "worker: release report full; the sweeper reads the sessions left out", slog.Int("num_left_out", dropped))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sess, err := r.source.Accept(ctx, r.id)
	if err != nil {
		return fmt.Errorf("accept the report session %q: %w", r.id, err)
	}
	defer func() { _ = sess.Close(context.WithoutCancel(ctx)) }()
	acc, ok := sess.(sbstate.StateAccessor)
	if !ok {
		return fmt.Errorf("the report session (%T) has no session state", sess)
	}
	if err := acc.SetState(ctx, b); err != nil {
		return fmt.Errorf("set the state of the report session %q: %w", r.id, err)
	}
	return nil
}

// service writes a report every half interval, and a last one when it stops.
func (r *reporter) service(interval time.Duration) *base {
	return newBase("worker: release reporter", r.log, func(soft, _ context.Context) error {
		every(soft, r.clock, interval/2, r.write)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(soft), 10*time.Second)
		defer cancel()
		r.write(ctx)
		return nil
	})
}

// readReport returns the raw state of a report session the sweeper's Watch has locked.
func readReport(ctx context.Context, sess sequencer.Session) ([]byte, error) {
	acc, ok := sess.(sbstate.StateAccessor)
	if !ok {
		return nil, fmt.Errorf("the report session (%T) has no session state", sess)
	}
	return acc.GetState(ctx)
}

// clearReport clears the state of a report session the sweeper's Watch has locked (a stopped
// replica's, left unchanged for the tombstone TTL).
func clearReport(ctx context.Context, sess sequencer.Session) error {
	acc, ok := sess.(sbstate.StateAccessor)
	if !ok {
		return fmt.Errorf("the report session (%T) has no session state", sess)
	}
	return acc.SetState(ctx, nil)
}
