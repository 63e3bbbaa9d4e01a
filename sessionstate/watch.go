package sessionstate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// WatchConfig configures a Watch. IDs and Reader are required.
type WatchConfig struct {
	// ChangedIDs returns the ids of the sessions whose state was updated after the given time,
	// or of every session with state when it is zero (the SDK's list-sessions with
	// SessionStateUpdatedAfter: ids only, a page of 100 per management call).
	ChangedIDs func(ctx context.Context, after time.Time) ([]string, error)
	// Source locks a session to read its state from Store; Concurrency sessions are read at
	// once (default 1), each within PerSession (default 10s).
	Source      sequencer.SessionSource
	Store       sequencer.StateStore
	Concurrency int
	PerSession  time.Duration
	// Filter says which sessions the Watch keeps: those whose state needs a sweeper.
	Filter Filter
	// Margin is listed again before the last look, for the clocks of the broker and this process
	// (default 5s).
	Margin time.Duration
	// RescanPerSweep bounds the sessions a full rescan reads per Sweep (default 200), and so
	// the expired tombstones cleared per Sweep: both are spread over Sweeps, never all at once.
	RescanPerSweep int
	// ReadPerSweep bounds the states one Sweep reads (default 2,000); what is left is read at
	// the next Sweeps, before what changes meanwhile.
	ReadPerSweep int
	// TombstoneTTL, when positive, makes the Watch clear the state of a session that ended
	// longer ago than it (its tombstone), under the session lock through the version check, as
	// the engine does when such a session runs again. It finds them without remembering ended
	// sessions: once every ExpiryEvery (default TombstoneTTL/4) of tombstone age, it lists the
	// sessions updated since the last pass's window and those updated within TombstoneTTL; the
	// difference, last updated in between, are the candidates. A tombstone is so cleared between
	// TombstoneTTL and TombstoneTTL+ExpiryEvery after the session ended.
	TombstoneTTL time.Duration
	ExpiryEvery  time.Duration
	// ReadReport, when set, makes the Watch use the replicas' release reports (Report): it
	// returns the raw state of a report session the Watch has locked. A changed session is then
	// decided one Sweep after the one that lists it, and read only if no report explains its
	// change. Without it, every changed session is read by the Sweep that lists it.
	ReadReport func(ctx context.Context, sess sequencer.Session) ([]byte, error)
	// ClearReport, when set with a TombstoneTTL, clears the state of a report session the Watch
	// has locked. The tombstone expiry pass uses it on reports left unchanged for TombstoneTTL:
	// the reports of stopped replicas (a live one that saved nothing for that long loses
	// nothing and writes it again), which would otherwise stay in the full listings for good.
	ClearReport func(ctx context.Context, sess sequencer.Session) error
}

// Watch keeps the sweeper's view of the sessions that need it (Filter: parked, blocked, on a
// gap, stranded, retrying) for stores that keep the state in the session itself, where reading a state
// locks the session. Each Sweep reads only the sessions whose state changed since the last one
// (ChangedIDs), those busy the last time, and a bounded share of a full rescan while one runs;
// the sessions it keeps are answered from memory until they change again. An ended session
// costs nothing after its last change and is not kept. So a sweep's cost follows the sessions
// that changed, not the sessions that ever were.
//
// With ReadReport, the replicas' release reports (Report) explain most changes instead: a
// session listed as changed is decided at the next Sweep, once every live replica has reported
// (each reports every half interval), and read only when its last reported save in the listing's
// window needs a sweeper, or when no report has one (a run a crash cut short, an operator's
// command, a report that did not fit). So a session needing the sweeper after a crash is read at
// most two Sweeps after its change. One change goes unseen: a session saved cleanly by one
// replica and then, in the same window, saved needing a sweeper by a run that never reported (its
// replica crashed first). Its next change, a Watch that starts over without a snapshot (a full
// rescan) or, with a TombstoneTTL, the tombstone expiry pass, which reads every session left
// unchanged for TombstoneTTL, finds it: at most TombstoneTTL+ExpiryEvery after that change.
// Saves are compared by the replicas' clocks: Margin must cover their skew.
//
// A Watch is used by one sweeper at a time (the lease holder); it is not safe for concurrent
// use. Its Snapshot, kept where the next holder finds it, lets that holder go on from the same
// view without a full rescan.
type Watch struct {
	cfg WatchConfig

	// cursor is when the last Sweep began to list (zero: never, a full rescan starts).
	cursor time.Time
	// kept are the sessions that need the sweeper, as last read.
	kept map[string]Entry
	// again are sessions to read at the next Sweep: busy at the last read, or named by a
	// snapshot.
	again map[string]bool
	// rescan are the ids a full rescan has still to read.
	rescan []string
	// expiredUntil: the sessions last updated before it were looked at by a tombstone expiry
	// pass (zero: never); expiring are the candidates of the pass under way.
	expiredUntil time.Time
	expiring     []string

	// With ReadReport: pending are the sessions the last Sweep listed as changed (id → the start
	// of that listing), decided by the next; saves are the last reported save of each session
	// (the newest wins), kept while a pending session may need it; reportsAgain are report
	// sessions to read at the next Sweep (busy or failed); distrust counts the Sweeps that must
	// not explain anything (an incomplete report was read).
	pending      map[string]time.Time
	saves        map[string]reportedSave
	reportsAgain map[string]bool
	distrust     int
}

// reportedSave is one save a replica reported.
type reportedSave struct {
	at    time.Time
	clean bool
}

// NewWatch checks cfg and returns an empty Watch. Missing fields are a programmer error.
func NewWatch(cfg WatchConfig) *Watch {
	if cfg.ChangedIDs == nil || cfg.Source == nil || cfg.Store == nil {
		panic("sessionstate: WatchConfig needs ChangedIDs, Source and Store")
	}
	cfg.PerSession = cmp.Or(cfg.PerSession, 10*time.Second)
	cfg.Margin = cmp.Or(cfg.Margin, 5*time.Second)
	cfg.RescanPerSweep = cmp.Or(cfg.RescanPerSweep, 200)
	cfg.ReadPerSweep = cmp.Or(cfg.ReadPerSweep, 2000)
	cfg.ExpiryEvery = cmp.Or(cfg.ExpiryEvery, cfg.TombstoneTTL/4)
	return &Watch{cfg: cfg, kept: map[string]Entry{}, again: map[string]bool{},
		pending: map[string]time.Time{}, saves: map[string]reportedSave{}, reportsAgain: map[string]bool{}}
}

// SweepStats says what one Sweep cost.
type SweepStats struct {
	// Changed is how many sessions the broker listed as changed; Read how many states were read
	// (each a lock, a read and a release); Rescanning how many a full rescan has left.
	Changed, Read, Rescanning int
	// Listed is how many ids the listings returned in all (the broker pages them by 100).
	Listed int
	// Carried is how many sessions to read were left to the next Sweep (ReadPerSweep).
	Carried int
	// Expired is how many tombstones were cleared; Expiring how many candidates are left.
	Expired, Expiring int
	// Reports is how many release reports were read; Explained how many changed sessions they
	// spared a read.
	Reports, Explained int
}

// Sweep brings the view up to date as of now and returns the kept sessions, ordered by id. On an
// error the view is as before for what could not be read, and the next Sweep lists again from
// the same point.
func (w *Watch) Sweep(ctx context.Context, now time.Time) ([]Entry, SweepStats, error) {
	var stats SweepStats
	toRead := map[string]bool{}
	if w.cursor.IsZero() {
		// Nothing known: every session with state is read once, a share per Sweep; what changes
		// meanwhile is listed as changed.
		all, err := w.cfg.ChangedIDs(ctx, time.Time{})
		if err != nil {
			return w.entries(), stats, fmt.Errorf("sessionstate: watch: list the sessions with state: %w", err)
		}
		stats.Listed += len(all)
		w.rescan = all
		if w.rescan == nil {
			w.rescan = []string{}
		}
		w.cursor = now
	} else {
		since := w.cursor.Add(-w.cfg.Margin)
		changed, err := w.cfg.ChangedIDs(ctx, since)
		if err != nil {
			return w.entries(), stats, fmt.Errorf("sessionstate: watch: list the sessions changed since %s: %w", since.Format(time.RFC3339), err)
		}
		stats.Changed, stats.Listed = len(changed), len(changed)
		if w.cfg.ReadReport == nil {
			for _, id := range changed {
				toRead[id] = true
			}
		} else {
			w.explain(ctx, changed, since, &stats)
		}
	}
	for id := range w.again {
		toRead[id] = true
	}
	n := min(w.cfg.RescanPerSweep, len(w.rescan))
	for _, id := range w.rescan[:n] {
		toRead[id] = true
	}
	ids := w.bound(toRead, &stats)
	entries, err := readStates(ctx, ids, w.cfg.Concurrency, func(ctx context.Context, id string) (Entry, error) {
		return readState(ctx, w.cfg.Source, w.cfg.Store, w.cfg.PerSession, id)
	})
	stats.Read = len(entries)
	for _, e := range entries {
		delete(w.again, e.SessionID)
		switch {
		case e.Busy:
			w.again[e.SessionID] = true // a worker has it; it may not change it again: read it next time
		case e.Version != 0 && w.cfg.Filter.Match(e.State):
			w.kept[e.SessionID] = e
		default:
			delete(w.kept, e.SessionID) // no state, ended, or nothing for the sweeper
		}
	}
	if err != nil {
		return w.entries(), stats, fmt.Errorf("sessionstate: watch: %w", err)
	}
	w.rescan = w.rescan[n:]
	if len(w.rescan) == 0 {
		w.rescan = nil
	}
	stats.Rescanning = len(w.rescan)
	w.cursor = now
	if w.distrust > 0 {
		w.distrust--
	}
	if err := w.expire(ctx, now, &stats); err != nil {
		return w.entries(), stats, fmt.Errorf("sessionstate: watch: tombstone expiry: %w", err)
	}
	return w.entries(), stats, nil
}

// bound returns the ids of toRead to read in this Sweep: at most ReadPerSweep, those carried
// over from earlier Sweeps first, each part ordered by id. The rest are carried over (again), so
// that a burst of changes is read over several Sweeps while each Sweep still answers in about
// the same time: the sweeper goes on waking sessions and arming timers meanwhile.
func (w *Watch) bound(toRead map[string]bool, stats *SweepStats) []string {
	ids := slices.DeleteFunc(slices.Collect(maps.Keys(toRead)), Reserved)
	slices.SortFunc(ids, func(a, b string) int {
		if w.again[a] != w.again[b] {
			if w.again[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	if len(ids) > w.cfg.ReadPerSweep {
		for _, id := range ids[w.cfg.ReadPerSweep:] {
			w.again[id] = true
		}
		stats.Carried = len(ids) - w.cfg.ReadPerSweep
		ids = ids[:w.cfg.ReadPerSweep]
	}
	return ids
}

// expire starts a tombstone expiry pass when one is due and clears a share of its candidates.
func (w *Watch) expire(ctx context.Context, now time.Time, stats *SweepStats) error {
	ttl := w.cfg.TombstoneTTL
	if ttl <= 0 {
		return nil
	}
	upper := now.Add(-ttl)
	if len(w.expiring) == 0 && upper.Sub(w.expiredUntil) >= w.cfg.ExpiryEvery {
		var lower time.Time // the first pass looks at every session with state
		if !w.expiredUntil.IsZero() {
			lower = w.expiredUntil.Add(-w.cfg.Margin)
		}
		window, err := w.cfg.ChangedIDs(ctx, lower)
		if err != nil {
			return fmt.Errorf("list the sessions updated since %s: %w", lower.Format(time.RFC3339), err)
		}
		recent, err := w.cfg.ChangedIDs(ctx, upper)
		if err != nil {
			return fmt.Errorf("list the sessions updated since %s: %w", upper.Format(time.RFC3339), err)
		}
		stats.Listed += len(window) + len(recent)
		// Only the hashes of the recent ids are held, and only for this step.
		fresh := make(map[uint64]struct{}, len(recent))
		for _, id := range recent {
			fresh[idHash(id)] = struct{}{}
		}
		w.expiring = slices.DeleteFunc(window, func(id string) bool {
			_, ok := fresh[idHash(id)]
			return ok || id == LeaseSessionID || (IsReport(id) && w.cfg.ClearReport == nil)
		})
		w.expiredUntil = upper
	}
	n := min(w.cfg.RescanPerSweep, len(w.expiring))
	for _, id := range w.expiring[:n] {
		if IsReport(id) {
			// Unchanged for TombstoneTTL: a stopped replica's; busy: its live replica writes it.
			busy, err := withLock(ctx, w.cfg.Source, w.cfg.PerSession, id, w.cfg.ClearReport)
			if err != nil {
				return fmt.Errorf("clear the stale release report %q: %w", id, err)
			}
			if !busy {
				stats.Expired++
			}
			continue
		}
		cleared, err := w.clearIfExpired(ctx, id, now)
		if err != nil {
			return err
		}
		if cleared {
			stats.Expired++
			if w.cfg.ReadReport != nil {
				w.saw(id, reportedSave{at: now, clean: true}) // its deletion is listed as a change
			}
		}
	}
	w.expiring = w.expiring[n:]
	if len(w.expiring) == 0 {
		w.expiring = nil
	}
	stats.Expiring = len(w.expiring)
	return nil
}

// clearIfExpired locks session id and, if its state is a tombstone older than TombstoneTTL with
// nothing left to settle, deletes it through the version check; a state the Filter selects is
// kept. A session a worker holds is left to it.
func (w *Watch) clearIfExpired(ctx context.Context, id string, now time.Time) (bool, error) {
	cleared := false
	_, err := withLock(ctx, w.cfg.Source, w.cfg.PerSession, id, func(ctx context.Context, sess sequencer.Session) error {
		st, ver, err := w.cfg.Store.Load(ctx, sequencer.LoadParams{Session: sess})
		if err != nil {
			return fmt.Errorf("read the state of session %q: %w", id, err)
		}
		if ver == 0 || !st.TombstoneClearable(now, w.cfg.TombstoneTTL) {
			if ver != 0 && w.cfg.Filter.Match(st) {
				// Read anyway: a change the release reports explained wrongly shows here.
				w.kept[id] = Entry{SessionID: id, State: st, Version: ver}
			}
			return nil
		}
		err = w.cfg.Store.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: ver})
		switch {
		case errors.Is(err, sequencer.ErrVersionConflict):
			return nil // it changed meanwhile: not a tombstone to clear
		case err != nil:
			return fmt.Errorf("clear the expired tombstone of session %q: %w", id, err)
		}
		cleared = true
		return nil
	})
	return cleared, err
}

// idHash is a session id's 64-bit FNV-1a hash.
func idHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// entries returns the kept sessions ordered by id.
func (w *Watch) entries() []Entry {
	out := make([]Entry, 0, len(w.kept))
	for _, id := range slices.Sorted(maps.Keys(w.kept)) {
		out = append(out, w.kept[id])
	}
	return out
}

// Reset forgets the view (the sweeper lost its lease): the next Sweep starts over from a
// snapshot, or with a full rescan.
func (w *Watch) Reset() {
	w.cursor, w.rescan = time.Time{}, nil
	w.expiredUntil, w.expiring = time.Time{}, nil
	clear(w.kept)
	clear(w.again)
	clear(w.pending)
	clear(w.saves)
	clear(w.reportsAgain)
	w.distrust = 0
}

// snapshot is what a Watch hands to the next holder: where to list from, and which sessions to
// read again. Rescan holds the ids a full rescan had left.
type snapshot struct {
	Cursor       time.Time `json:"cursor"`
	IDs          []string  `json:"ids"`
	Rescan       []string  `json:"rescan,omitempty"`
	ExpiredUntil time.Time `json:"expired_until,omitzero"`
	Expiring     []string  `json:"expiring,omitempty"`
}

// Snapshot encodes the view compactly: the cursor and the ids it keeps or must read again (not
// their states, which the next holder reads afresh). maxBytes bounds it (the session state's
// size limit); a view too large returns nil, and the next holder rescans.
func (w *Watch) Snapshot(maxBytes int) []byte {
	if w.cursor.IsZero() {
		return nil
	}
	ids := slices.Collect(maps.Keys(w.kept))
	for id := range w.again {
		if _, ok := w.kept[id]; !ok {
			ids = append(ids, id)
		}
	}
	for id := range w.pending {
		if _, ok := w.kept[id]; !ok && !w.again[id] {
			ids = append(ids, id) // the next holder has no reports of them: it reads them
		}
	}
	slices.Sort(ids)
	b, err := json.Marshal(snapshot{Cursor: w.cursor, IDs: ids, Rescan: w.rescan, ExpiredUntil: w.expiredUntil, Expiring: w.expiring})
	if err != nil || (maxBytes > 0 && len(b) > maxBytes) {
		return nil
	}
	return b
}

// Restore takes up a view from a Snapshot: the next Sweep lists what changed since its cursor
// and reads its sessions again. It refuses a snapshot it cannot decode (the Watch stays empty,
// and rescans).
func (w *Watch) Restore(b []byte) error {
	var s snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("sessionstate: watch: decode a snapshot: %w", err)
	}
	if s.Cursor.IsZero() {
		return fmt.Errorf("sessionstate: watch: a snapshot without a cursor")
	}
	w.Reset()
	w.cursor = s.Cursor
	for _, id := range s.IDs {
		w.again[id] = true
	}
	w.rescan = s.Rescan
	w.expiredUntil, w.expiring = s.ExpiredUntil, s.Expiring
	return nil
}

// Reserved reports whether id is a session id seqbus keeps for itself (the sweeper's lease, the
// replicas' release reports), which carries no sequence state and is never listed.
func Reserved(id string) bool { return id == LeaseSessionID || IsReport(id) }

// LeaseSessionID is the session id whose lock is the sweeper's lease with Service Bus session
// state: every replica of an entity tries to lock it, the broker gives it to one at a time and
// frees it when the holder's link closes. Its own session state keeps the sweeper's Watch
// snapshot; it carries no messages.
const LeaseSessionID = "seqbus.sweeper-lease"

// explain reads the release reports among the changed ids (and those left from the last Sweep),
// decides about the sessions the last Sweep listed (those no report explains are read now, as
// again), and keeps the newly listed ones, changed since since, for the next Sweep.
func (w *Watch) explain(ctx context.Context, changed []string, since time.Time, stats *SweepStats) {
	for _, id := range changed {
		if IsReport(id) {
			w.reportsAgain[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.reportsAgain)) {
		r, ok := w.readReport(ctx, id)
		if !ok {
			continue // busy (its replica writes it) or failed: read it at the next Sweep
		}
		delete(w.reportsAgain, id)
		stats.Reports++
		if r.Incomplete {
			w.distrust = 2 // this Sweep's decisions and the next one's
		}
		for sid, at := range r.Clean {
			w.saw(sid, reportedSave{at: at, clean: true})
		}
		for sid, at := range r.Dirty {
			w.saw(sid, reportedSave{at: at})
		}
	}
	for id, listed := range w.pending {
		s, ok := w.saves[id]
		if ok && s.clean && !s.at.Before(listed) && w.distrust == 0 {
			delete(w.kept, id) // as a read would: its last state needs no sweeper
			stats.Explained++
			continue
		}
		w.again[id] = true
	}
	clear(w.pending)
	for _, id := range changed {
		if !Reserved(id) && !w.again[id] {
			w.pending[id] = since
		}
	}
	// A save older than since explains no listing left to decide.
	maps.DeleteFunc(w.saves, func(_ string, s reportedSave) bool { return s.at.Before(since) })
}

// saw records a reported save of session id: the newest wins; at the same time, a dirty one.
func (w *Watch) saw(id string, s reportedSave) {
	old, ok := w.saves[id]
	if ok && (old.at.After(s.at) || (old.at.Equal(s.at) && !old.clean)) {
		return
	}
	w.saves[id] = s
}

// readReport locks the report session id and decodes its report. ok is false when the session
// is busy or could not be read; a report that does not decode is dropped (ok, empty): the
// changes it would explain are read.
func (w *Watch) readReport(ctx context.Context, id string) (Report, bool) {
	var b []byte
	busy, err := withLock(ctx, w.cfg.Source, w.cfg.PerSession, id, func(ctx context.Context, sess sequencer.Session) error {
		var err error
		b, err = w.cfg.ReadReport(ctx, sess)
		return err
	})
	if busy || err != nil {
		return Report{}, false
	}
	if len(b) == 0 {
		return Report{}, true
	}
	r, err := DecodeReport(b)
	if err != nil {
		return Report{}, true
	}
	return r, true
}
