package sessionstate_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// fakeEntity keeps session states in the sessions themselves, as Service Bus does: a state is
// read by locking its session, and the broker lists the ids whose state changed after a time.
type fakeEntity struct {
	mu       sync.Mutex
	sessions map[string]*storetest.Session
	updated  map[string]time.Time
	busy     map[string]bool
	accepts  int
	listings []time.Time
}

func newFakeEntity() *fakeEntity {
	return &fakeEntity{sessions: map[string]*storetest.Session{}, updated: map[string]time.Time{}, busy: map[string]bool{}}
}

func (f *fakeEntity) Accept(_ context.Context, id string) (sequencer.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accepts++
	if f.busy[id] {
		return nil, sequencer.ErrSessionLocked
	}
	s := f.sessions[id]
	if s == nil {
		s = storetest.NewSession(id)
		f.sessions[id] = s
	}
	return s, nil
}

func (f *fakeEntity) AcceptNext(context.Context) (sequencer.Session, error) {
	panic("not used")
}

func (f *fakeEntity) changedIDs(_ context.Context, after time.Time) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listings = append(f.listings, after)
	var ids []string
	for id, at := range f.updated {
		if after.IsZero() || at.After(after) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// set stores st as session id's state at time at.
func (f *fakeEntity) set(t *testing.T, id string, st *sequencer.State, at time.Time) {
	t.Helper()
	sess, err := f.Accept(context.Background(), id)
	require.NoError(t, err)
	store := sbstate.New(nil)
	_, ver, err := store.Load(context.Background(), sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	_, err = store.Save(context.Background(), sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: ver})
	require.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated[id] = at
}

func (f *fakeEntity) acceptCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.accepts
	f.accepts = 0
	return n
}

func ids(entries []sessionstate.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.SessionID)
	}
	return out
}

var attentionFilter = sessionstate.Filter{Parked: true, Blocked: true, Gap: true, Stranded: true}

func newWatch(f *fakeEntity, rescanPerSweep int) *sessionstate.Watch {
	return sessionstate.NewWatch(sessionstate.WatchConfig{
		ChangedIDs: f.changedIDs, Source: f, Store: sbstate.New(nil), Filter: attentionFilter,
		Concurrency: 4, RescanPerSweep: rescanPerSweep,
	})
}

// TestWatchReadsOnlyWhatChanged: after one rescan (spread over sweeps), a sweep reads only the
// sessions whose state changed and those busy at the last read; ended sessions cost nothing
// after their last change, however many there are.
func TestWatchReadsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 50 {
		ended := sequencer.NewState()
		ended.Next, ended.Last, ended.EndedAt = 4, 3, t0
		f.set(t, "ended-"+string(rune('a'+i/26))+string(rune('a'+i%26)), ended, t0)
	}
	parked := sequencer.NewState()
	parked.Parked = &sequencer.Parked{Sequence: 1, BrokerSequence: 3, Reason: "boom"}
	f.set(t, "parked", parked, t0)
	gap := sequencer.NewState()
	gap.Next, gap.Deferred[3], gap.GapSince = 2, 30, t0
	f.set(t, "gap", gap, t0)

	w := newWatch(f, 20)
	now := t0.Add(time.Minute)
	var kept []sessionstate.Entry
	var rounds int
	for {
		rounds++
		var stats sessionstate.SweepStats
		var err error
		kept, stats, err = w.Sweep(context.Background(), now)
		require.NoError(t, err)
		require.LessOrEqual(t, stats.Read, 20, "a rescan is spread: at most RescanPerSweep reads a sweep")
		if stats.Rescanning == 0 {
			break
		}
		now = now.Add(30 * time.Second)
	}
	require.Equal(t, 3, rounds, "52 sessions at 20 a sweep")
	require.Equal(t, []string{"gap", "parked"}, ids(kept))
	f.acceptCount()

	// Nothing changed: no session is read.
	now = now.Add(30 * time.Second)
	kept, stats, err := w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Zero(t, stats.Read)
	require.Zero(t, f.acceptCount(), "ended and unchanged sessions cost no lock")
	require.Equal(t, []string{"gap", "parked"}, ids(kept), "kept sessions are answered from memory")

	// A stranded session appears, the parked one is resumed and the gap closes: only those three
	// are read. One more is busy: it is read again at the next sweep.
	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred[3] = 3, 33
	f.set(t, "stranded", stranded, now.Add(time.Second))
	parked.Parked = nil
	f.set(t, "parked", parked, now.Add(time.Second))
	gap.Next, gap.GapSince = 4, time.Time{}
	delete(gap.Deferred, 3)
	f.set(t, "gap", gap, now.Add(time.Second))
	held := sequencer.NewState()
	held.Next, held.Deferred[5], held.GapSince = 4, 50, now
	f.set(t, "held", held, now.Add(time.Second))
	f.busy["held"] = true
	now = now.Add(30 * time.Second)
	kept, stats, err = w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 4, stats.Changed)
	require.Equal(t, 4, stats.Read)
	require.Equal(t, []string{"stranded"}, ids(kept))

	f.busy["held"] = false
	now = now.Add(30 * time.Second)
	kept, stats, err = w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Read, "the session busy last time, and nothing else")
	require.Equal(t, []string{"held", "stranded"}, ids(kept))
	last := f.listings[len(f.listings)-1]
	require.Equal(t, now.Add(-30*time.Second-5*time.Second), last, "listed from the last sweep, less the margin")
}

// TestWatchSnapshotHandsOver: a new holder restored from the last one's snapshot reads the
// sessions it kept and what changed since, not every session again.
func TestWatchSnapshotHandsOver(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		ended := sequencer.NewState()
		ended.EndedAt = t0
		f.set(t, id, ended, t0)
	}
	parked := sequencer.NewState()
	parked.Parked = &sequencer.Parked{Sequence: 1, BrokerSequence: 3}
	f.set(t, "parked", parked, t0)
	f.set(t, sessionstate.LeaseSessionID, sequencer.NewState(), t0)

	first := newWatch(f, 100)
	_, _, err := first.Sweep(context.Background(), t0.Add(time.Minute))
	require.NoError(t, err)
	require.Nil(t, first.Snapshot(10), "a snapshot over its bound is not made")
	snap := first.Snapshot(1 << 16)
	require.NotNil(t, snap)
	_, ok := f.sessions[sessionstate.LeaseSessionID]
	require.True(t, ok)

	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred[3] = 3, 33
	f.set(t, "stranded", stranded, t0.Add(90*time.Second))
	f.acceptCount()

	next := newWatch(f, 100)
	require.NoError(t, next.Restore(snap))
	kept, stats, err := next.Sweep(context.Background(), t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, []string{"parked", "stranded"}, ids(kept))
	require.Equal(t, 2, stats.Read, "the kept session and the changed one; no ended session, not the lease session")
	require.Equal(t, 2, f.acceptCount())
	require.Error(t, next.Restore([]byte("{")), "a snapshot it cannot read is refused")
}

// TestWatchExpiresTombstones: a tombstone older than the TTL is cleared (under the lock, through
// the version check), found by two listings without the Watch remembering ended sessions; a
// younger one, an open session and a session a worker holds are left; the next pass looks only
// at what was updated since the last one's window.
func TestWatchExpiresTombstones(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const ttl = time.Hour
	ended := func(at time.Time) *sequencer.State {
		st := sequencer.NewState()
		st.Next, st.Last, st.EndedAt = 4, 3, at
		return st
	}
	f.set(t, "old", ended(t0), t0)
	f.set(t, "old-held", ended(t0), t0)
	f.busy["old-held"] = true
	f.set(t, "young", ended(t0.Add(50*time.Minute)), t0.Add(50*time.Minute))
	open := sequencer.NewState()
	open.Next = 2
	f.set(t, "open", open, t0)

	w := sessionstate.NewWatch(sessionstate.WatchConfig{
		ChangedIDs: f.changedIDs, Source: f, Store: sbstate.New(nil), Filter: attentionFilter, TombstoneTTL: ttl,
	})
	now := t0.Add(ttl + time.Minute)
	_, stats, err := w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Expired)
	version := func(id string) int64 {
		_, ver, err := sbstate.New(nil).Load(context.Background(), sequencer.LoadParams{Session: f.sessions[id]})
		require.NoError(t, err)
		return ver
	}
	require.Zero(t, version("old"), "the expired tombstone is cleared")
	require.NotZero(t, version("young"))
	require.NotZero(t, version("old-held"), "a session a worker holds is left to the worker")
	require.NotZero(t, version("open"))

	// The next pass is due once the window has grown by TTL/4; it lists from the last window.
	f.listings = nil
	_, _, err = w.Sweep(context.Background(), now.Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, f.listings, 1, "not due yet: only the changed sessions are listed")
	_, stats, err = w.Sweep(context.Background(), now.Add(60*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, stats.Expired, "young has expired by now")
	require.Zero(t, version("young"))
	require.Len(t, f.listings, 4)
	require.Equal(t, t0.Add(time.Minute-5*time.Second), f.listings[2], "the window starts where the last pass ended, less the margin")
}

// TestWatchBoundsReadsPerSweep: a burst of changes is read over several sweeps, at most
// ReadPerSweep a sweep, what was carried over before what changed since; nothing is lost.
func TestWatchBoundsReadsPerSweep(t *testing.T) {
	t.Parallel()
	f := newFakeEntity()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	w := sessionstate.NewWatch(sessionstate.WatchConfig{
		ChangedIDs: f.changedIDs, Source: f, Store: sbstate.New(nil), Filter: attentionFilter,
		Concurrency: 4, ReadPerSweep: 10,
	})
	now := t0
	_, _, err := w.Sweep(context.Background(), now) // nothing yet: the cursor starts here
	require.NoError(t, err)

	ended := sequencer.NewState()
	ended.Next, ended.Last, ended.EndedAt = 4, 3, t0
	for i := range 24 {
		f.set(t, "m-"+string(rune('a'+i)), ended, now.Add(time.Second))
	}
	gap := sequencer.NewState()
	gap.Next, gap.Deferred[3], gap.GapSince = 2, 30, t0
	f.set(t, "z-gap", gap, now.Add(time.Second))
	f.acceptCount()

	now = now.Add(30 * time.Second)
	kept, stats, err := w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 25, stats.Changed)
	require.Equal(t, 10, stats.Read)
	require.Equal(t, 15, stats.Carried)
	require.Equal(t, 10, f.acceptCount(), "one lock per read, no more")
	require.Empty(t, kept)

	// A session changed since sorts before the carried ones by id, but is read after them.
	f.set(t, "a-new", gap, now.Add(time.Second))
	now = now.Add(30 * time.Second)
	kept, stats, err = w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 10, stats.Read)
	require.Equal(t, 6, stats.Carried)
	require.Empty(t, kept, "the carried ones come first; z-gap is the last of them")

	now = now.Add(30 * time.Second)
	kept, stats, err = w.Sweep(context.Background(), now)
	require.NoError(t, err)
	require.Equal(t, 6, stats.Read)
	require.Zero(t, stats.Carried)
	require.Equal(t, []string{"a-new", "z-gap"}, ids(kept))
}
