package sequencer

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqbus/seqbus/contract"
)

// The decisions, without I/O: a message read against the contract (msg), the window, and what
// the state, the window, a message and the time say (view).

// msg is a received message, read against the message contract once, when it arrives.
type msg struct {
	raw *Message
	// seq is the application sequence (0 when invalid), bs the broker sequence number.
	seq, bs int64
	// invalid says why the message breaks the contract ("" when it does not).
	invalid string
	// last: the message ends the sequence (false when invalid).
	last bool
	// deferred: not an active message of the broker: received by broker sequence number (it was
	// deferred) or, with stored, read from the store (it was held).
	deferred bool
	// stored: the held copy read from the store (EarlyStore); its settlement is the store's.
	stored bool
	// unsequenced: the message has no sequence property and UnsequencedPassThrough hands it over
	// as it comes.
	unsequenced bool
}

// read parses the messages of one receive. It sets Message.Sequence and Message.IsLast for the
// handler; the engine itself goes by the msg values only.
func (e *Engine) read(raw []*Message, deferred bool) []msg {
	if len(raw) == 0 {
		return nil
	}
	out := make([]msg, len(raw))
	for i, m := range raw {
		if e.cfg.Unsequenced == UnsequencedPassThrough && !e.sequenced(m) {
			m.Sequence, m.IsLast = 0, false
			out[i] = msg{raw: m, bs: m.BrokerSequence, deferred: deferred, unsequenced: true}
			continue
		}
		seq, last, invalid := e.parse(m)
		m.Sequence, m.IsLast = seq, last
		out[i] = msg{raw: m, seq: seq, last: last, invalid: invalid, bs: m.BrokerSequence, deferred: deferred}
	}
	return out
}

// sequenced reports whether m carries the sequence property at all (a value that is not a valid
// sequence still counts: such a message is invalid, not unsequenced).
func (e *Engine) sequenced(m *Message) bool {
	v, ok := m.Properties[e.cfg.SequenceProperty]
	return ok && v != nil
}

// redelivered reports whether the broker delivered m before (DeliveryCount above 1).
func (m *msg) redelivered() bool { return m.raw.DeliveryCount > 1 }

// parse reads the application sequence and the last mark of m by the contract's one reader
// (contract.Parse). A non-empty desc means the message is invalid; desc names the property and
// the value.
func (e *Engine) parse(m *Message) (seq int64, last bool, desc string) {
	seq, last, err := contract.Parse(m.Properties, e.cfg.SequenceProperty, e.cfg.LastProperty)
	if err != nil {
		return 0, false, err.Error()
	}
	return seq, last, ""
}

// window is what a run holds in memory besides the state: early messages kept unsettled (the
// reorder window proper), deferred messages received by broker sequence number and not yet
// decided, and deferred entries the broker did not return.
type window struct {
	// held maps application sequence → early message, unsettled (its lock is the session lock).
	held map[int64]*msg
	// bytes is the size of the bodies held.
	bytes int
	// fetched maps application sequence → deferred message received and not yet decided.
	fetched map[int64]*msg
	// missing marks deferred entries the broker did not return.
	missing map[int64]bool
	// refused: the store refused to hold more this run (a bound of EngineConfig.Held): what is
	// early stays here, up to WindowBytes (trimWindow).
	refused bool
}

func newWindow() window {
	return window{held: map[int64]*msg{}, fetched: map[int64]*msg{}, missing: map[int64]bool{}}
}

func (w *window) put(m *msg) {
	w.held[m.seq] = m
	w.bytes += len(m.raw.Body)
}

func (w *window) unhold(seq int64) *msg {
	m := w.held[seq]
	delete(w.held, seq)
	w.bytes -= len(m.raw.Body)
	return m
}

// actionKind is what the session loop does with a message.
type actionKind int

const (
	// actHandle: the message is in order: hand it to the handler, advance, settle.
	actHandle actionKind = iota
	// actHold: the message is early: keep it in the reorder window (deferred at the broker
	// when the window overflows or the session is released, see view.overflow).
	actHold
	// actSettle: settle the message without handing it over (action.settle says how).
	actSettle
	// actPassThrough: the message has no sequence (UnsequencedPassThrough): hand it over at
	// once, outside the session's order and state.
	actPassThrough
)

var actionNames = [...]string{"handle", "hold", "settle", "pass-through"}

func (k actionKind) String() string {
	if k < 0 || int(k) >= len(actionNames) {
		return "unknown"
	}
	return actionNames[k]
}

// action is a decision about one message.
type action struct {
	kind actionKind
	// settle says how an actSettle message is settled.
	settle settleDecision
	// learnsLast: the message marks the last sequence, which the state did not know; the loop
	// records it (and dead-letters the held messages beyond it) before handling or holding it.
	learnsLast bool
	// unparks: the message is the missing sequence a gap timeout parked the session on (GapPark);
	// it arrived after all, so the loop clears the parked mark and handles it.
	unparks bool
}

// settleKind is how a message that is not handed over is settled.
type settleKind int

const (
	// settleDuplicate: the sequence was handled, or another copy is held or deferred: complete
	// the message without the handler.
	settleDuplicate settleKind = iota
	// settleInvalid: the message breaks the contract: dead-letter it (InvalidSequence).
	settleInvalid
	// settleFinishPark: the message the session is parked on, back after a crash came between
	// the parked save and its dead-lettering: dead-letter it now.
	settleFinishPark
	// settleFinishSkip: a poison message PoisonSkip skipped, back after a crash came between the
	// skip's save and its dead-lettering: dead-letter it now, not as a duplicate.
	settleFinishSkip
)

// settleDecision is a decision that only settles a message; the settle-only paths take this
// type, so they cannot be given a message to hand over.
type settleDecision struct {
	kind settleKind
	// desc is the dead-letter description of an invalid message.
	desc string
}

// view is what the decisions look at: the configuration, the session's state, the window, and
// whether the state's run record (State.InFlight) is an inherited one not yet resolved.
type view struct {
	cfg       *EngineConfig
	st        *State
	w         *window
	resolving bool
	// cooling: the message for Next waits for a released retry (State.Retrying) that is not due,
	// or that this run has just planned: nothing is handed over, what arrives is held.
	cooling bool
}

// decide returns what to do with m, checking in the order of "What happens to a message" in the
// package documentation.
func (v view) decide(m *msg) action {
	if m.unsequenced {
		return action{kind: actPassThrough}
	}
	if d, ok := v.leftover(m); ok {
		return settle(d)
	}
	st, prop := v.st, v.cfg.SequenceProperty
	switch {
	case m.last && st.Last != 0 && st.Last != m.seq:
		return settle(settleDecision{kind: settleInvalid,
			desc: fmt.Sprintf("application property %q = %d is marked last but %d already was", prop, m.seq, st.Last)})
	case m.seq-st.Next > v.cfg.MaxGap:
		return settle(settleDecision{kind: settleInvalid, desc: fmt.Sprintf("application property %q = %d is %d ahead of the next expected sequence %d (max gap %d)",
			prop, m.seq, m.seq-st.Next, st.Next, v.cfg.MaxGap)})
	}
	duplicate := settle(settleDecision{kind: settleDuplicate})
	// The message the parked mark names is dead-lettered whatever other copy is in hand: a copy
	// delivered ahead of it (out of broker order) must not make it a duplicate, which would
	// complete the failing message instead of dead-lettering it. Once it is in the store's dead
	// letters (Parked.Held), every copy of it is a duplicate.
	if p := st.Parked; p != nil && m.seq == p.Sequence && m.bs == p.BrokerSequence {
		if p.Held {
			return duplicate
		}
		return settle(settleDecision{kind: settleFinishPark})
	}
	if h, ok := v.w.held[m.seq]; ok && h.bs != m.bs {
		return duplicate
	}
	if f, ok := v.w.fetched[m.seq]; ok && f.bs != m.bs {
		return duplicate
	}
	// Another copy is deferred: only if the broker no longer has it does this copy count.
	if bs, ok := st.Deferred[m.seq]; ok && bs != m.bs && (m.seq != st.Next || !v.w.missing[m.seq]) {
		return duplicate
	}
	a := action{kind: actHold, learnsLast: m.last && st.Last == 0}
	gapParked := st.Parked != nil && st.Parked.OnGap() && st.Parked.Sequence == m.seq
	if m.seq == st.Next && (st.Parked == nil || gapParked) && !v.awaitsRecord(m) && !v.recorded(m) && !v.cooling {
		a.kind, a.unparks = actHandle, gapParked
	}
	return a
}

func settle(d settleDecision) action { return action{kind: actSettle, settle: d} }

// leftover decides a sequenced message that is settled whatever the window holds: invalid,
// handled already, or beyond the known last. ok is false for any other message. It is the first
// part of decide, and what the loop asks about messages below Next or beyond the last.
func (v view) leftover(m *msg) (d settleDecision, ok bool) {
	st := v.st
	switch {
	case m.unsequenced:
		return settleDecision{}, false
	case m.invalid != "":
		return settleDecision{kind: settleInvalid, desc: m.invalid}, true
	case m.seq < st.Next:
		if bs, ok := st.SkippedPoison[m.seq]; ok && bs == m.bs {
			return settleDecision{kind: settleFinishSkip}, true
		}
		return settleDecision{kind: settleDuplicate}, true
	case st.Last != 0 && m.seq > st.Last:
		return settleDecision{kind: settleInvalid,
			desc: fmt.Sprintf("application property %q = %d is after the last sequence %d", v.cfg.SequenceProperty, m.seq, st.Last)}, true
	}
	return settleDecision{}, false
}

// poisonAction is what happens to a message whose handler failed on every attempt.
type poisonAction int

const (
	// poisonPark: save(Parked) → dead-letter; the session waits for an operator (PoisonPark).
	poisonPark poisonAction = iota
	// poisonSkip: save(Next+1, SkippedPoison) → dead-letter, or keep it as the drain's anchor
	// (PoisonSkip).
	poisonSkip
	// poisonBlock: save(Blocked) → abandon, and release the session (PoisonBlock).
	poisonBlock
	// poisonDeadLetter: an unsequenced message is dead-lettered whatever the policy, the state
	// untouched: it never parks or blocks the ordered messages.
	poisonDeadLetter
)

// poisonOf returns what the poison policy does with m, whose handler kept failing.
func (v view) poisonOf(m *msg) poisonAction {
	switch {
	case m.unsequenced:
		return poisonDeadLetter
	case v.cfg.Poison == PoisonBlock:
		return poisonBlock
	case v.cfg.Poison == PoisonSkip:
		return poisonSkip
	}
	return poisonPark
}

// gapAction is what the gap policy does about a missing sequence.
type gapAction int

const (
	// gapNone: nothing (yet): no gap, GapWait, or not waited for GapTimeout.
	gapNone gapAction = iota
	// gapSkip: skip to the lowest waiting sequence (GapSkip).
	gapSkip
	// gapPark: park the session on the missing sequence (GapPark).
	gapPark
)

// gapPolicy returns what the gap policy does at now: once later messages have waited
// GapTimeout for Next (State.GapExpired, the rule the worker's sweeper applies too), GapSkip
// skips and GapPark parks; GapWait never acts.
func (v view) gapPolicy(now time.Time) gapAction {
	if v.cfg.GapPolicy == GapWait || !v.gapWaiting() || !v.st.GapExpired(now, v.cfg.GapTimeout) {
		return gapNone
	}
	if v.cfg.GapPolicy == GapPark {
		return gapPark
	}
	return gapSkip
}

// recorded reports whether m is an entry of the inherited, unresolved record: such a message is
// held, never deferred, until the record is settled (deferring it would hide it from the next
// run's resolution).
func (v view) recorded(m *msg) bool {
	if !v.resolving {
		return false
	}
	bs, ok := v.st.InFlight[m.seq]
	return ok && bs == m.bs
}

// awaitsRecord reports whether m must wait for the inherited record to be resolved: another copy
// of its sequence is an entry whose fate is not known yet.
func (v view) awaitsRecord(m *msg) bool {
	if !v.resolving {
		return false
	}
	bs, ok := v.st.InFlight[m.seq]
	return ok && bs != m.bs
}

// needsAnchor reports whether a handled active message must stay unsettled because the message
// for Next is deferred: until it is handled, the active message is what makes the broker offer
// the session again after a crash.
func (v view) needsAnchor() bool {
	_, due := v.st.Deferred[v.st.Next]
	// A released retry is woken at its time by a sweeper: no active message needs to wait for it.
	return due && !v.w.missing[v.st.Next] && v.st.Parked == nil && v.st.Retrying == nil
}

// gapWaiting reports whether later messages wait while Next is missing.
func (v view) gapWaiting() bool {
	st := v.st
	// A released retry is no gap: the message for Next is here, deferred until its attempt.
	if st.Parked != nil || !st.EndedAt.IsZero() || v.resolving || st.Retrying != nil {
		return false
	}
	if len(v.w.held) > 0 {
		return true
	}
	for k := range st.Deferred {
		if k > st.Next {
			return true
		}
	}
	return false
}

// lowestWaiting returns the lowest sequence after Next that is held or deferred (0: none), where
// a gap timeout moves Next.
func (v view) lowestWaiting() int64 {
	lowest := int64(0)
	consider := func(k int64) {
		if k > v.st.Next && (lowest == 0 || k < lowest) {
			lowest = k
		}
	}
	for k := range v.w.held {
		consider(k)
	}
	for k := range v.st.Deferred {
		consider(k)
	}
	return lowest
}

// overflow returns the held messages to defer so that at most limit messages and WindowBytes of
// bodies stay in the window, those furthest ahead first. It never picks the message for Next
// (deferred, it would strand the session until a sweeper came by) nor an entry of an inherited
// record, and while such a record is unresolved one held message stays as the anchor.
func (v view) overflow(limit int) []*msg {
	floor := 0
	if v.resolving {
		floor = 1
	}
	limit = max(limit, floor)
	n, bytes, maxBytes := len(v.w.held), v.w.bytes, v.cfg.WindowBytes
	over := func() bool { return n > limit || (bytes > maxBytes && n > floor) }
	if !over() {
		return nil
	}
	keys := slices.Sorted(maps.Keys(v.w.held))
	var evict []*msg
	for i := len(keys) - 1; i >= 0 && over(); i-- {
		m := v.w.held[keys[i]]
		if v.recorded(m) || (m.seq == v.st.Next && v.st.Parked == nil && !v.cooling) {
			continue
		}
		evict = append(evict, m)
		n, bytes = n-1, bytes-len(m.raw.Body)
	}
	return evict
}

// settlement says how a handled in-order message is made durable and settled.
type settlement int

const (
	// saveThenComplete: handler → save(Next+1) → complete (or keep it unsettled as the anchor of
	// a drain; a deferred message is completed at once and its index entry goes in a later save).
	saveThenComplete settlement = iota
	// completeInRun: an entry of the run recorded in the state (State.InFlight): handler →
	// complete; the record stands for the save until the next save records the new Next.
	completeInRun
)

// maxRun bounds the entries of one recorded run (State.InFlight).
const maxRun = 256

// settlementOf says how a strategy that records runs settles the in-order message m: as an entry
// of the record, as the first entry of a new run whose entries it returns, or with a save of its
// own. Runs hold only active messages nothing else depends on (runnable), and none while an
// inherited record is unresolved.
func (v view) settlementOf(m *msg, record map[int64]int64, upcoming []msg) (settlement, map[int64]int64) {
	if m.deferred || v.resolving || !runnable(v.st, m.seq, m.last) {
		return saveThenComplete, nil
	}
	if bs, ok := record[m.seq]; ok && bs == m.bs {
		return completeInRun, nil
	}
	if m.redelivered() {
		return saveThenComplete, nil // see lookahead
	}
	entries := v.lookahead(m, upcoming)
	if len(entries) < 2 {
		return saveThenComplete, nil // a run of one saves as often as handler → save → complete
	}
	return completeInRun, entries
}

// runnable reports whether the message for sequence seq may be an entry of a run.
func runnable(st *State, seq int64, last bool) bool {
	if st.Parked != nil || last || (st.Last != 0 && seq >= st.Last) {
		return false
	}
	_, deferred := st.Deferred[seq]
	_, anchor := st.Deferred[seq+1]
	return !deferred && !anchor
}

// inHand returns the message for sequence seq held in the window or, failing that, the first
// valid one in upcoming; nil when neither has it.
func (v view) inHand(seq int64, upcoming []msg) *msg {
	if x := v.w.held[seq]; x != nil {
		return x
	}
	for i := range upcoming {
		if x := &upcoming[i]; x.invalid == "" && x.seq == seq {
			return x
		}
	}
	return nil
}

// lookahead returns the run starting at m: the following sequences held or later in upcoming;
// nil when no other message would join m. A redelivered message never joins: once the broker
// dead-letters a message that keeps crashing the process, a record holding it would make the
// next run take it as handled.
func (v view) lookahead(m *msg, upcoming []msg) map[int64]int64 {
	var later map[int64]*msg // the rest of the batch by sequence, on first need
	next := func(seq int64) *msg {
		if x := v.w.held[seq]; x != nil { // a held copy is handled before any copy later in the batch
			return x
		}
		if later == nil {
			later = make(map[int64]*msg, len(upcoming))
			for i := range upcoming {
				x := &upcoming[i]
				if _, seen := later[x.seq]; x.invalid == "" && !seen {
					later[x.seq] = x
				}
			}
		}
		return later[seq]
	}
	var entries map[int64]int64
	for seq := m.seq + 1; len(entries) < maxRun; seq++ {
		c := next(seq)
		if c == nil || c.redelivered() || !runnable(v.st, seq, c.last) {
			break
		}
		if entries == nil {
			entries = map[int64]int64{m.seq: m.bs}
		}
		entries[seq] = c.bs
	}
	return entries
}

// pipelining is what tailsRun looks at besides the view: what pipelined runs have stored, handed
// over and not yet completed.
type pipelining struct {
	// recordStored: the run's own record is what the store holds, with no save in flight.
	recordStored bool
	// pending counts the messages handed over and not completed: those handled since the last
	// save and the completions in flight.
	pending int
}

// goesAhead reports whether the in-order message m, with one save each, pipelined, may be handed
// over ahead of its save: an active message that no index entry names and that does not end the
// session.
func (v view) goesAhead(m *msg) bool {
	if m.last || m.deferred || (v.st.Last != 0 && m.seq >= v.st.Last) {
		return false
	}
	bs, indexed := v.st.Deferred[m.seq]
	return !indexed || bs != m.bs
}

// tailsRun reports whether the in-order message m, settled as how and entries say, is part of
// the tail of the stored record ("The tail of a run" in the package documentation).
func (v view) tailsRun(m *msg, how settlement, entries map[int64]int64, upcoming []msg, f pipelining) bool {
	if !f.recordStored || v.resolving {
		return false
	}
	if how == completeInRun && entries == nil {
		return false // an entry of the record
	}
	if m.deferred || m.redelivered() || !runnable(v.st, m.seq, m.last) || f.pending+1 > v.cfg.MaxPendingSettlements {
		return false
	}
	if bs, indexed := v.st.Deferred[m.seq]; indexed && bs == m.bs {
		return false
	}
	// entries, when m starts a run, are the sequences from m on in hand; the one after them
	// must be the last message.
	end := m.seq + max(int64(len(entries)), 1)
	x := v.inHand(end, upcoming)
	return x != nil && x.last
}

// extensionStep is what an in-order message does about an extension of the run in flight.
type extensionStep int

const (
	// extensionNone: m is an entry of the record that has landed, or no extension is in flight.
	extensionNone extensionStep = iota
	// extensionEarly: m is an entry of the extension in flight and is handed over before it
	// lands; its completion waits for the extension.
	extensionEarly
	// extensionWait: the extension must land before m is handed over.
	extensionWait
)

// extensionOf says whether the in-order message m may be handed over before the extension in
// flight lands: an entry of the extension may while pending stays within MaxPendingSettlements.
func (v view) extensionOf(m *msg, record, extension map[int64]int64, pending int) extensionStep {
	if bs, ok := record[m.seq]; ok && bs == m.bs {
		return extensionNone
	}
	if bs, ok := extension[m.seq]; ok && bs == m.bs && pending+1 <= v.cfg.MaxPendingSettlements {
		return extensionEarly
	}
	return extensionWait
}

// savesForReplay reports whether the entries refused as busy since the last save (still at the
// broker, as after a crash) and the completions in flight reach ReplayWindow: then the run saves.
func (v view) savesForReplay(refused int64, inFlight int) bool {
	return refused > 0 && int(refused)+inFlight >= v.cfg.ReplayWindow()
}

// asksNextBatch reports whether the run asks for its next batch while it handles batch:
// Pipelined, while it receives, unless the session may well end with what is in hand.
func (v view) asksNextBatch(batch []msg) bool {
	if v.cfg.Pipelining != Pipelined || v.resolving || v.cooling {
		return false
	}
	if last := v.st.Last; last != 0 && last-v.st.Next+1 <= int64(len(v.w.held)+len(v.st.Deferred)+len(batch)) {
		return false
	}
	for i := range batch {
		if batch[i].last {
			return false
		}
	}
	return true
}

// aheadGather is, in quarters of MaxPendingSettlements, how many handled messages a background
// save of one save each waits for while more are in hand (gathersAhead).
const aheadGather = 3

// gathersAhead reports whether the next background save of one save each waits for more handled
// messages: Ahead is stored, more of the batch is in hand, and fewer than aheadGather quarters of
// MaxPendingSettlements wait for a save.
func (v view) gathersAhead(storedAhead bool, upcoming, unsaved int) bool {
	return storedAhead && upcoming > 0 && unsaved < v.cfg.MaxPendingSettlements*aheadGather/4
}
