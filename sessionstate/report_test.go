package sessionstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// report writes rep, encoded within maxBytes, as replica's release report at time at.
func (f *fakeEntity) report(t *testing.T, replica string, rep sessionstate.Report, maxBytes int, at time.Time) {
	t.Helper()
	id := sessionstate.ReportSessionID(replica)
	sess, err := f.Accept(context.Background(), id)
	require.NoError(t, err)
	b, _, err := rep.Encode(maxBytes)
	require.NoError(t, err)
	require.NoError(t, sess.(sbstate.StateAccessor).SetState(context.Background(), b))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated[id] = at
}

// newReportWatch is a Watch over f that reads release reports, with a tombstone ttl (0: none)
// and, with clearReports, clears the stale ones.
func newReportWatch(f *fakeEntity, ttl time.Duration, clearReports bool) *sessionstate.Watch {
	cfg := sessionstate.WatchConfig{
		ChangedIDs: f.changedIDs, Source: f, Store: sbstate.New(nil), Filter: attentionFilter, TombstoneTTL: ttl,
		ReadReport: func(ctx context.Context, sess sequencer.Session) ([]byte, error) {
			return sess.(sbstate.StateAccessor).GetState(ctx)
		},
	}
	if clearReports {
		cfg.ClearReport = func(ctx context.Context, sess sequencer.Session) error {
			return sess.(sbstate.StateAccessor).SetState(ctx, nil)
		}
	}
	return sessionstate.NewWatch(cfg)
}

// TestWatchReportsExplainChanges: with release reports, a changed session is decided at the
// sweep after the one that lists it; one whose last reported save needs no sweeper is not read
// (and is no longer kept), while a change no report explains is read: no report at all (a
// crash), a reported save that needs the sweeper, a save reported cleanly before the listing's
// window, a clean save followed by one that needs the sweeper (the same replica, or another).
func TestWatchReportsExplainChanges(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	gap := sequencer.NewState()
	gap.Next, gap.Deferred[3], gap.GapSince = 2, 30, t0
	f.set(t, "was-gap", gap, t0)
	w := newReportWatch(f, 0, false)
	kept, _, err := w.Sweep(context.Background(), t0.Add(time.Second)) // the first rescan
	require.NoError(t, err)
	require.Equal(t, []string{"was-gap"}, ids(kept))

	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred[3] = 3, 33
	ended := sequencer.NewState()
	ended.Next, ended.Last, ended.EndedAt = 4, 3, t0
	at := t0.Add(10 * time.Second)
	for _, id := range []string{"was-gap", "clean"} {
		f.set(t, id, ended, at)
	}
	for _, id := range []string{"crashed", "dirty", "stale", "redone", "redone-elsewhere"} {
		f.set(t, id, stranded, at)
	}
	f.report(t, "a", sessionstate.Report{
		Written: at.Add(time.Second),
		Clean: map[string]time.Time{
			"was-gap": at, "clean": at, "stale": t0.Add(-time.Hour),
			"redone": at.Add(-time.Second), "redone-elsewhere": at.Add(-time.Second),
		},
		Dirty: map[string]time.Time{"dirty": at},
	}, 0, at.Add(time.Second))
	f.acceptCount()

	kept, stats, err := w.Sweep(context.Background(), t0.Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, stats.Reports)
	require.Zero(t, stats.Read, "the changes are decided at the next sweep, once every replica reported them")
	require.Equal(t, 1, f.acceptCount(), "the report, and nothing else")
	require.Equal(t, []string{"was-gap"}, ids(kept))

	// By the next sweep, replica a reports that it saved "redone" again, needing the sweeper,
	// and replica b that it did so with "redone-elsewhere".
	f.report(t, "a", sessionstate.Report{Written: at.Add(20 * time.Second), Dirty: map[string]time.Time{"redone": at.Add(17 * time.Second)}}, 0, at.Add(20*time.Second))
	f.report(t, "b", sessionstate.Report{Written: at.Add(20 * time.Second), Dirty: map[string]time.Time{"redone-elsewhere": at}}, 0, at.Add(20*time.Second))
	f.set(t, "redone", stranded, at.Add(17*time.Second))
	f.acceptCount()
	kept, stats, err = w.Sweep(context.Background(), t0.Add(60*time.Second))
	require.NoError(t, err)
	require.Equal(t, 2, stats.Reports)
	require.Equal(t, 2, stats.Explained, "was-gap and clean")
	require.Equal(t, 5, stats.Read, "crashed, dirty, stale, redone, redone-elsewhere")
	require.Equal(t, 2+5, f.acceptCount())
	require.Equal(t, []string{"crashed", "dirty", "redone", "redone-elsewhere", "stale"}, ids(kept),
		"was-gap is no longer kept, without a read")

	// "redone" changed after the last sweep began, so that sweep listed it again; its read came
	// after that listing and saw the change: it is not read again, nor is anything else.
	kept, stats, err = w.Sweep(context.Background(), t0.Add(90*time.Second))
	require.NoError(t, err)
	require.Zero(t, stats.Read)
	require.Zero(t, f.acceptCount())
	require.Len(t, kept, 5)
}

// TestWatchReportOverflowReads: a report that does not fit its bound keeps the saves needing the
// sweeper and the newest clean ones; the sessions left out are read. A report that had to leave
// out a save needing the sweeper explains nothing, whatever the other reports say: every changed
// session is read.
func TestWatchReportOverflowReads(t *testing.T) {
	t.Parallel()
	const entry = 2 + 24 // an id of 2 bytes, as Encode counts it
	tests := []struct {
		name           string
		dirtyLeftOut   bool
		wantExplained  []string
		wantIncomplete bool
	}{
		{name: "clean saves left out", wantExplained: []string{"s4", "s5"}},
		{name: "a dirty save left out", dirtyLeftOut: true, wantIncomplete: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEntity()
			t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			w := newReportWatch(f, 0, false)
			_, _, err := w.Sweep(context.Background(), t0)
			require.NoError(t, err)
			ended := sequencer.NewState()
			ended.EndedAt = t0
			written := t0.Add(20 * time.Second)
			clean := sessionstate.Report{Written: written, Clean: map[string]time.Time{}}
			for i, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
				at := t0.Add(time.Duration(i+1) * time.Second)
				f.set(t, id, ended, at)
				clean.Clean[id] = at
			}
			bound := 64 + 2*entry // two entries
			if tt.dirtyLeftOut {
				// Replica b's report has no room for its dirty save of s6; replica a reports
				// every clean save.
				f.set(t, "s6", ended, t0.Add(time.Second))
				dirty := sessionstate.Report{Written: written, Dirty: map[string]time.Time{"s6": t0.Add(time.Second)}}
				f.report(t, "b", dirty, 64, written)
				bound = 0
			}
			f.report(t, "a", clean, bound, written)
			checked := "a"
			if tt.dirtyLeftOut {
				checked = "b"
			}
			sess, err := f.Accept(context.Background(), sessionstate.ReportSessionID(checked))
			require.NoError(t, err)
			b, err := sess.(sbstate.StateAccessor).GetState(context.Background())
			require.NoError(t, err)
			decoded, err := sessionstate.DecodeReport(b)
			require.NoError(t, err)
			require.Equal(t, tt.wantIncomplete, decoded.Incomplete)

			_, _, err = w.Sweep(context.Background(), t0.Add(30*time.Second))
			require.NoError(t, err)
			_, stats, err := w.Sweep(context.Background(), t0.Add(60*time.Second))
			require.NoError(t, err)
			require.Equal(t, len(tt.wantExplained), stats.Explained)
			sessions := 5
			if tt.dirtyLeftOut {
				sessions = 6
			}
			require.Equal(t, sessions-len(tt.wantExplained), stats.Read, "those left out are read")
		})
	}
}

// TestWatchExpiryFindsWronglyExplained: the one change reports explain wrongly (a clean save by
// one replica, then a save needing the sweeper by a run whose replica crashed before reporting)
// is found by the tombstone expiry pass, which reads it once it has been unchanged for the TTL.
func TestWatchExpiryFindsWronglyExplained(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const ttl = time.Hour
	w := newReportWatch(f, ttl, false)
	_, _, err := w.Sweep(context.Background(), t0)
	require.NoError(t, err)
	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred[3] = 3, 33
	f.set(t, "hole", stranded, t0.Add(2*time.Second))
	f.report(t, "a", sessionstate.Report{Written: t0.Add(3 * time.Second), Clean: map[string]time.Time{"hole": t0.Add(time.Second)}}, 0, t0.Add(3*time.Second))
	now := t0
	for range 2 {
		now = now.Add(30 * time.Second)
		kept, _, err := w.Sweep(context.Background(), now)
		require.NoError(t, err)
		require.Empty(t, kept, "explained by the report")
	}
	var kept []sessionstate.Entry
	for now.Before(t0.Add(ttl + ttl/4 + 2*time.Minute)) {
		now = now.Add(30 * time.Second)
		kept, _, err = w.Sweep(context.Background(), now)
		require.NoError(t, err)
		if len(kept) > 0 {
			break
		}
	}
	require.Equal(t, []string{"hole"}, ids(kept))
	require.False(t, now.After(t0.Add(2*time.Second+ttl+ttl/4)), "within 1.25 × TTL of its change")
}

// TestWatchExpiryClearsStaleReports: the tombstone expiry pass clears a release report left
// unchanged for the TTL (a stopped replica's) within 1.25 × TTL, and keeps the report of a
// replica that goes on writing.
func TestWatchExpiryClearsStaleReports(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const ttl = time.Hour
	w := newReportWatch(f, ttl, true)
	state := func(replica string) []byte {
		sess, err := f.Accept(context.Background(), sessionstate.ReportSessionID(replica))
		require.NoError(t, err)
		b, err := sess.(sbstate.StateAccessor).GetState(context.Background())
		require.NoError(t, err)
		return b
	}
	write := func(replica string, at time.Time) {
		f.report(t, replica, sessionstate.Report{Written: at, Clean: map[string]time.Time{"s-" + replica: at}}, 0, at)
	}
	write("stopped", t0)
	write("live", t0)
	var cleared time.Time
	for now, wrote := t0, t0; now.Before(t0.Add(2 * ttl)); now = now.Add(30 * time.Second) {
		if now.Sub(wrote) >= ttl/3 {
			write("live", now)
			wrote = now
		}
		_, _, err := w.Sweep(context.Background(), now)
		require.NoError(t, err)
		if cleared.IsZero() && len(state("stopped")) == 0 {
			cleared = now
		}
		require.NotEmpty(t, state("live"), "at %s", now.Sub(t0))
	}
	require.False(t, cleared.IsZero(), "the stopped replica's report is cleared")
	require.False(t, cleared.Before(t0.Add(ttl)), "not before the TTL: %s", cleared.Sub(t0))
	require.False(t, cleared.After(t0.Add(ttl+ttl/4+time.Minute)), "within 1.25 × TTL: %s", cleared.Sub(t0))
}
