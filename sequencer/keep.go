package sequencer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// keeper is where early messages wait once the window does not keep them, chosen once per
// engine (EngineConfig.EarlyMessages): deferred at the broker (deferral) or held in the store
// (holding). Either way the deferred index (State.Deferred) lists them by application sequence
// with the broker sequence number of their copy, so the decisions, the drain, the gap clock and
// the wake rule (State.NeedsWake) are the same for both.
type keeper interface {
	// setAside records ms in the index and sets them aside, durably: what a crash leaves is
	// either the message at the broker or the index entry with its copy kept. early: ms are
	// early messages of the window (counted and observed as such), not the message for Next
	// of a released retry. The holding keeper may refuse (window.refused), setting aside
	// nothing.
	setAside(r *run, ms []*msg, early bool) error
	// fetch brings back the kept copies of entries (application sequence → broker sequence);
	// an entry whose copy is gone is left out.
	fetch(r *run, entries map[int64]int64) ([]msg, error)
}

// keeperOf returns the keeper of mode; held is the engine's store as a HeldStore (nil if it is
// not one, which EarlyStore refuses).
func keeperOf(mode EarlyMessages, held HeldStore) keeper {
	if mode == EarlyStore {
		return &holding{store: held}
	}
	return deferral{held: held}
}

// deferral defers early messages at the broker: save(index) → defer each. A crash in between
// leaves an entry whose message is still active; it is redelivered and recognised by its broker
// sequence number.
type deferral struct {
	// held, when the store is a HeldStore, is asked for what the broker does not return: messages
	// held before a switch from EarlyStore.
	held HeldStore
}

func (deferral) setAside(r *run, ms []*msg, early bool) error {
	for _, m := range ms {
		r.st.recordDeferral(m.seq, m.bs)
	}
	if err := r.save(); err != nil {
		return err
	}
	for _, m := range ms {
		if err := r.s.deferMsg(m); err != nil {
			return err
		}
		if !early {
			continue
		}
		r.e.stats.deferred.Add(1)
		r.e.observe(Event{Kind: EventDeferred, SessionID: r.s.id, Sequence: m.seq})
	}
	return nil
}

func (d deferral) fetch(r *run, entries map[int64]int64) ([]msg, error) {
	got, err := r.receiveDeferred(inSequenceOrder(entries))
	if err != nil {
		return nil, err
	}
	if d.held == nil {
		return got, nil
	}
	rest := missingOf(entries, got)
	if len(rest) == 0 {
		return got, nil
	}
	more, err := r.heldCopies(d.held, rest)
	return append(got, more...), err
}

// holding holds early messages in the store: Hold(index, messages) → complete each at the broker.
// A crash before the hold leaves the message at the broker; after it, the message is held and
// perhaps still at the broker too: the copy delivered again has the entry's broker sequence
// number and is taken as that message (handed over, or held again, which keeps the first copy).
type holding struct {
	store HeldStore
	// totals caches what the store holds for the entity (HeldLimits.TotalBytes), read at most
	// once per second.
	mu       sync.Mutex
	totals   HeldTotals
	totalsAt time.Time
}

func (h *holding) setAside(r *run, ms []*msg, early bool) error {
	var copies []*HeldMessage
	now := r.now()
	for _, m := range ms {
		if !m.stored {
			copies = append(copies, NewHeldMessage(m.raw, now))
		}
	}
	if r.w.refused && early {
		return nil // refused once this run: the window keeps them (trimWindow)
	}
	for _, c := range copies {
		if _, err := MarshalProperties(c.Properties); err != nil {
			// The store cannot keep it as it is: the broker keeps it, as past a bound.
			h.release(r, fmt.Sprintf("sequence %d cannot be held: %v", c.Sequence, err), len(copies))
			return nil
		}
	}
	if len(copies) > 0 && early {
		// The message for Next of a released retry is not bounded: it is what the session
		// goes on with.
		if full, err := h.full(r, copies); err != nil || full {
			return err
		}
	}
	for _, m := range ms {
		r.st.recordDeferral(m.seq, m.bs)
	}
	res, err := r.holdCopies(h.store, copies)
	if err != nil {
		return err
	}
	r.held = heldCount{stats: res.Stats, known: true}
	for _, m := range ms {
		if early {
			r.e.stats.heldInStore.Add(1)
			r.e.observe(Event{Kind: EventHeldInStore, SessionID: r.s.id, Sequence: m.seq})
		}
		if m.stored {
			continue
		}
		// Held: nothing depends on the broker's copy any more. A completion refused as busy
		// leaves it active; delivered again, it is the held message's copy.
		if err := r.s.completeLater(m, nil); err != nil {
			return err
		}
	}
	return nil
}

// full reports whether holding copies would pass a bound of EngineConfig.Held; the window then
// keeps them (window.refused).
func (h *holding) full(r *run, copies []*HeldMessage) (bool, error) {
	lim := r.e.cfg.Held
	if lim == (HeldLimits{}) {
		return false, nil
	}
	var bytes int64
	for _, c := range copies {
		bytes += HeldSize(c)
	}
	if (lim.SessionMessages > 0 || lim.SessionBytes > 0) && !r.held.known {
		r.e.stats.storeCalls.Add(1)
		st, err := h.store.HeldStats(r.ctx, HeldStatsParams{Session: r.s.sess})
		if err != nil {
			return false, fmt.Errorf("sequencer: session %s: reading what the session holds: %w", r.s.id, err)
		}
		r.held = heldCount{stats: st, known: true}
	}
	var over string
	switch {
	case lim.SessionMessages > 0 && r.held.stats.Messages+len(copies) > lim.SessionMessages:
		over = fmt.Sprintf("the session would hold %d messages (limit %d)", r.held.stats.Messages+len(copies), lim.SessionMessages)
	case lim.SessionBytes > 0 && r.held.stats.Bytes+bytes > lim.SessionBytes:
		over = fmt.Sprintf("the session would hold %d bytes (limit %d)", r.held.stats.Bytes+bytes, lim.SessionBytes)
	case lim.TotalBytes > 0:
		totals, err := h.entityTotals(r)
		if err != nil {
			return false, err
		}
		if totals.Held.Bytes+bytes > lim.TotalBytes {
			over = fmt.Sprintf("the store would hold %d bytes for the entity (limit %d)", totals.Held.Bytes+bytes, lim.TotalBytes)
		}
	}
	if over == "" {
		return false, nil
	}
	h.release(r, over, len(copies))
	return true, nil
}

// release leaves n early messages unheld, saying why, once a run: the window keeps them
// unsettled while the run looks further for the message for Next (trimWindow), and they go back
// to the broker with the session if it does not come.
func (h *holding) release(r *run, why string, n int) {
	if r.w.refused {
		return
	}
	r.w.refused = true
	r.e.stats.heldFull.Add(1)
	r.log().WarnContext(r.ctx, "sequencer: early messages not held in the store: "+why+"; they wait unsettled in the window",
		slog.Int("messages", n), slog.Int64("next", r.st.Next))
	r.e.observe(Event{Kind: EventHeldFull, SessionID: r.s.id, Sequence: r.st.Next})
}

// entityTotals returns what the store holds for the entity, read again when a second has passed.
func (h *holding) entityTotals(r *run) (HeldTotals, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := r.now()
	if !h.totalsAt.IsZero() && now.Sub(h.totalsAt) < time.Second {
		return h.totals, nil
	}
	r.e.stats.storeCalls.Add(1)
	t, err := h.store.HeldTotals(r.ctx, HeldTotalsParams{})
	if err != nil {
		return HeldTotals{}, fmt.Errorf("sequencer: session %s: reading what the store holds: %w", r.s.id, err)
	}
	h.totals, h.totalsAt = t, now
	return t, nil
}

func (h *holding) fetch(r *run, entries map[int64]int64) ([]msg, error) {
	got, err := r.heldCopies(h.store, entries)
	if err != nil {
		return nil, err
	}
	rest := missingOf(entries, got)
	for seq := range rest {
		if seq < r.st.Next {
			// Handled: a held copy went with the advance past it. (A copy deferred before a
			// switch to EarlyStore whose completion a crash cut off stays deferred.)
			delete(rest, seq)
		}
	}
	if _, ok := r.s.sess.(DeferringSession); !ok || len(rest) == 0 {
		return got, nil
	}
	// A holder that lost the session without knowing may find a copy gone that another holder
	// handed over since: only a run whose state is still the stored one asks the broker.
	if err := r.way.flush(r); err != nil { // the version compared is the one last saved
		return nil, err
	}
	r.e.stats.storeCalls.Add(1)
	if _, ver, err := r.e.store.Load(r.ctx, LoadParams{Session: r.s.sess}); err != nil {
		return nil, fmt.Errorf("sequencer: session %s: checking the state before asking the broker for held sequences: %w", r.s.id, err)
	} else if ver != r.saved.ver {
		return nil, fmt.Errorf("sequencer: session %s: the stored state changed (version %d, this run's %d): %w", r.s.id, ver, r.saved.ver, ErrVersionConflict)
	}
	// Deferred at the broker before a switch to EarlyStore: drained from there.
	more, err := r.receiveDeferred(inSequenceOrder(rest))
	return append(got, more...), err
}

// inSequenceOrder returns the broker sequence numbers of entries in application sequence order.
func inSequenceOrder(entries map[int64]int64) []int64 {
	out := make([]int64, 0, len(entries))
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		out = append(out, entries[k])
	}
	return out
}

// advance records in st that the handler took m, as State.handled does. A copy read from the
// store loses its index entry in the same write that removes it from the store (the advance
// past it), so no entry outlives its copy.
func advance(st *State, m *msg, now time.Time) time.Duration {
	wait := st.handled(m.seq, m.bs, now)
	if m.stored && st.Deferred[m.seq] == m.bs {
		delete(st.Deferred, m.seq)
	}
	return wait
}

// missingOf returns the entries no message of got answers.
func missingOf(entries map[int64]int64, got []msg) map[int64]int64 {
	found := make(map[int64]bool, len(got))
	for i := range got {
		found[got[i].bs] = true
	}
	rest := map[int64]int64{}
	for seq, bs := range entries {
		if !found[bs] {
			rest[seq] = bs
		}
	}
	return rest
}

// heldCopies reads the held copies of entries from store, read against the contract like a
// received message. The store keeps one copy per sequence (the first held): whatever copy it
// kept is the entry's message, and is given the entry's broker sequence number.
func (r *run) heldCopies(store HeldStore, entries map[int64]int64) ([]msg, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	seqs := slices.Sorted(maps.Keys(entries))
	from, to := seqs[0], seqs[len(seqs)-1]
	r.e.stats.storeCalls.Add(1)
	held, err := store.Held(r.ctx, HeldParams{Session: r.s.sess, From: from, Limit: int(to - from + 1)})
	if err != nil {
		return nil, fmt.Errorf("sequencer: session %s: reading held messages from %d: %w", r.s.id, from, err)
	}
	var raw []*Message
	for _, h := range held {
		if _, ok := entries[h.Sequence]; ok {
			raw = append(raw, h.Message(r.s.id))
		}
	}
	out := r.e.read(raw, true)
	for i := range out {
		m := &out[i]
		m.stored = true
		if bs, ok := entries[m.seq]; ok && m.invalid == "" {
			m.bs = bs
		}
	}
	return out, nil
}

// holdCopies stores the state with copies (the Hold of a HeldStore), as save does a state alone.
func (r *run) holdCopies(store HeldStore, copies []*HeldMessage) (HoldResult, error) {
	var res HoldResult
	err := r.storeState("holding early messages", func(p SaveParams) (int64, error) {
		var err error
		res, err = store.Hold(r.ctx, HoldParams{Session: p.Session, State: p.State, ExpectedVersion: p.ExpectedVersion, Messages: copies})
		return res.Version, err
	})
	return res, err
}

// deadLetterHeld moves m, a message handed over from the store, to the store's dead letters with
// the state (parked on it, passed by PoisonSkip, or with its invalid entry gone), in one step: no
// crash leaves the one without the other.
func (r *run) deadLetterHeld(m *msg, reason, desc string) error {
	store, ok := r.e.store.(HeldStore)
	if !ok {
		return fmt.Errorf("sequencer: session %s: sequence %d was handed over from a store that holds no messages", r.s.id, m.seq)
	}
	if r.st.Deferred[m.seq] == m.bs {
		delete(r.st.Deferred, m.seq)
	}
	if r.st.SkippedPoison[m.seq] == m.bs {
		delete(r.st.SkippedPoison, m.seq) // dead-lettered with this save: nothing to finish later
	}
	err := r.storeState("dead-lettering a held message", func(p SaveParams) (int64, error) {
		return store.DeadLetterHeld(r.ctx, DeadLetterHeldParams{Session: p.Session, State: p.State,
			ExpectedVersion: p.ExpectedVersion, Sequence: m.seq, Reason: reason, Description: desc, At: p.State.UpdatedAt})
	})
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w (the held message of sequence %d is gone)", err, m.seq)
	}
	return err
}
