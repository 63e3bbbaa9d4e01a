package sequencer

import (
	"log/slog"
	"time"
)

// This file spends the wait before a failing message's next attempt with the session released
// (EngineConfig.RetryReleaseAfter): the retry loop (session_inorder.go) hands over here once the
// in-place attempts are used up, the state records when the next attempt is due (State.Retrying),
// the message is deferred, and the run releases the session; a sweeper (or the Runner that
// released it) wakes the session when the attempt is due. Until then a run of the session hands
// nothing over: it holds what arrives, defers it and releases the session again.

// releaseError is how retry says the next wait is to be spent released: attempts handler calls
// have failed, the last with err.
type releaseError struct {
	err      error
	attempts int
}

func (e *releaseError) Error() string { return e.err.Error() }
func (e *releaseError) Unwrap() error { return e.err }

// attemptsBefore returns the handler calls already made for m by earlier runs (the attempts of a
// released retry of its sequence): the retry loop counts on from there.
func (r *run) attemptsBefore(m *msg) int {
	if rt := r.st.Retrying; rt != nil && !m.unsequenced && rt.Sequence == m.seq {
		return int(rt.Attempts)
	}
	return 0
}

// releases reports whether the wait after the failed attempt (1-based, counted across runs) of m
// is spent with the session released: RetryReleaseAfter is set, the in-place attempts are used up,
// and m is in the session's order (an unsequenced message is retried in place: nothing waits
// behind it).
func (r *run) releases(m *msg, attempt int) bool {
	n := r.e.cfg.RetryReleaseAfter
	return n > 0 && !m.unsequenced && attempt >= n
}

// cooling reports whether the message for Next waits for a released retry: this run released it
// (retryingHere), or the stored attempt is not due yet. Nothing is handed over meanwhile.
func (r *run) cooling() bool {
	return r.phase == retryingHere || (r.st != nil && r.st.RetryWaiting(r.now()))
}

// releaseIfCooling ends the run (retryingHere) when now is set and the message for Next waits
// for a released retry that is not due.
func (r *run) releaseIfCooling(now bool) {
	if now && r.phase == receiving && r.cooling() {
		r.phase = retryingHere
	}
}

// releaseRetry plans the next attempt of m, whose handler failed rerr.attempts times, and
// releases the session until then: save(Retrying, Deferred[seq]) → defer. A crash between leaves
// the message active with its index entry: redelivered, it is recognised by its broker sequence
// number and held (then deferred) until the attempt is due. A crash after the defer leaves the
// plan, which a sweeper carries out at Retrying.At.
func (r *run) releaseRetry(m *msg, rerr *releaseError) error {
	now := r.now()
	wait := r.e.cfg.Retry.Backoff(rerr.attempts)
	at := now.Add(wait)
	r.st.Counters.Retries++
	r.e.stats.retries.Add(1)
	r.e.observe(Event{Kind: EventRetry, SessionID: r.s.id, Sequence: m.seq, Err: rerr.err})
	r.st.Retrying = &Retrying{Sequence: m.seq, BrokerSequence: m.bs, At: at, Attempts: uint64(rerr.attempts), Reason: rerr.err.Error()}
	// The message for Next is here: whatever gap was open before it arrived has closed.
	if gap := r.st.closeGap(now); gap > 0 {
		r.saved.gap = gap
	}
	r.st.recordDeferral(m.seq, m.bs)
	if err := r.save(); err != nil {
		return err
	}
	if err := r.s.deferMsg(m); err != nil {
		return err
	}
	r.phase = retryingHere
	r.e.stats.releasedRetries.Add(1)
	r.log().InfoContext(r.ctx, "sequencer: handler failed; the session is released until the next attempt",
		slog.Int64("sequence", m.seq), slog.Int("attempts", rerr.attempts), slog.Time("retry_at", at),
		slog.Duration("wait", wait.Round(time.Millisecond)), slog.Any("error", rerr.err))
	r.e.observe(Event{Kind: EventReleasedRetry, SessionID: r.s.id, Sequence: m.seq, Err: rerr.err, At: at})
	return nil
}
