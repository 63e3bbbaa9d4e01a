package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// SessionInfo is one session as its stored state describes it.
type SessionInfo struct {
	SessionID string `json:"session_id"`
	// Busy: a worker holds the session, so its state could not be read (Service Bus session
	// state is read under the session lock); the other fields are empty.
	Busy bool `json:"busy,omitempty"`
	// Version is the store's version of the state.
	Version int64 `json:"version,omitempty"`
	// Next is the next expected sequence; Last the last sequence once known (0 while unknown).
	Next int64 `json:"next,omitempty"`
	Last int64 `json:"last,omitempty"`
	// Deferred counts the messages deferred at the broker; LowestDeferred is the lowest of their
	// sequences (0 when none).
	Deferred       int   `json:"deferred"`
	LowestDeferred int64 `json:"lowest_deferred,omitempty"`
	// Parked is set while the poison policy or the gap policy has parked the session.
	Parked *ParkedInfo `json:"parked,omitempty"`
	// Blocked is set while the poison policy block holds the session on a failing message.
	Blocked *BlockedInfo `json:"blocked,omitempty"`
	// GapSince is when the session started waiting for a missing Next while later sequences wait.
	GapSince *time.Time `json:"gap_since,omitempty"`
	// RetryAt, Attempts and LastError are set while the handler of the message for Next keeps
	// failing and the session is released until its next attempt (SEQBUS_RETRY_RELEASE_AFTER):
	// when that attempt is due, how many handler calls were made so far, and the last error.
	RetryAt   *time.Time `json:"retry_at,omitempty"`
	Attempts  uint64     `json:"attempts,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	// Stranded: the session needs a run the broker will not start (State.NeedsWake); the
	// workers' sweeper wakes it.
	Stranded bool `json:"stranded,omitempty"`
	// EndedAt is when the last message was handled (the state is a tombstone).
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// UpdatedAt is when the state last changed: the last message handled, deferred or settled.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Counters  Counters   `json:"counters"`
}

// ParkedInfo is why and where a session is parked.
type ParkedInfo struct {
	Sequence int64 `json:"sequence"`
	// BrokerSequence is the dead-lettered message's (0 when OnGap).
	BrokerSequence int64 `json:"broker_sequence"`
	// OnGap: the gap policy parked the session on a missing sequence; there is no dead letter.
	OnGap  bool      `json:"on_gap,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// BlockedInfo is the message the poison policy block holds a session on.
type BlockedInfo struct {
	Sequence       int64  `json:"sequence"`
	BrokerSequence int64  `json:"broker_sequence"`
	Reason         string `json:"reason"`
	// Since is when the policy first gave the message back, Times how often it has.
	Since time.Time `json:"since"`
	Times uint64    `json:"times"`
}

// Counters are a session's running totals (sequencer.Counters).
type Counters struct {
	Handled      uint64 `json:"handled"`
	Deferred     uint64 `json:"deferred"`
	Duplicates   uint64 `json:"duplicates"`
	Invalid      uint64 `json:"invalid"`
	DeadLettered uint64 `json:"dead_lettered"`
	Retries      uint64 `json:"retries"`
	Skipped      uint64 `json:"skipped"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func parkedInfo(p *sequencer.Parked) *ParkedInfo {
	if p == nil {
		return nil
	}
	return &ParkedInfo{Sequence: p.Sequence, BrokerSequence: p.BrokerSequence, OnGap: p.OnGap(), Reason: p.Reason, At: p.At}
}

func blockedInfo(b *sequencer.Blocked) *BlockedInfo {
	if b == nil {
		return nil
	}
	return &BlockedInfo{Sequence: b.Sequence, BrokerSequence: b.BrokerSequence, Reason: b.Reason, Since: b.Since, Times: b.Times}
}

// sessionInfo describes a stored state.
func sessionInfo(id string, st *sequencer.State, version int64) SessionInfo {
	c := st.Counters
	info := SessionInfo{
		SessionID: id, Version: version, Next: st.Next, Last: st.Last,
		Deferred: len(st.Deferred), Parked: parkedInfo(st.Parked), Blocked: blockedInfo(st.Blocked),
		GapSince: timePtr(st.GapSince), Stranded: st.NeedsWake(),
		EndedAt: timePtr(st.EndedAt), UpdatedAt: timePtr(st.UpdatedAt),
		Counters: Counters{Handled: c.Handled, Deferred: c.Deferred, Duplicates: c.Duplicates, Invalid: c.Invalid,
			DeadLettered: c.DeadLettered, Retries: c.Retries, Skipped: c.Skipped},
	}
	info.LowestDeferred = st.LowestDeferredAbove(0)
	if rt := st.Retrying; rt != nil {
		info.RetryAt, info.Attempts, info.LastError = timePtr(rt.At), rt.Attempts, rt.Reason
	}
	return info
}

// ListParams select the sessions List returns. The selections are alternatives: a session is
// listed when it matches any; none set lists every session with state.
type ListParams struct {
	Parked, Gap, Stranded bool
	// Blocked selects sessions the poison policy block holds on a failing message.
	Blocked bool
	// Retrying selects sessions released until the next attempt of a failing message.
	Retrying bool
	// Ended includes the tombstones of ended sessions.
	Ended bool
	// After starts the list after this session id (the NextAfter of the page before).
	After string
	// Limit bounds the sessions returned, and so the memory a page takes (0: all).
	Limit int
}

// match reports whether st passes p. A parked session waits for its parked sequence with its
// later messages deferred, so its state records a gap as well (State.GapSince); Gap leaves it
// out, as the workers' gap warnings do: it waits for an operator, not for a missing message.
func (p ListParams) match(st *sequencer.State) bool {
	if !p.Parked && !p.Gap && !p.Stranded && !p.Blocked && !p.Retrying {
		return true
	}
	return (p.Parked && st.Parked != nil) || (p.Gap && !st.GapSince.IsZero() && st.Parked == nil) || (p.Stranded && st.NeedsWake()) ||
		(p.Blocked && st.Blocked != nil) || (p.Retrying && st.Retrying != nil)
}

// ListResult is what List found, ordered by session id.
type ListResult struct {
	Sessions []SessionInfo `json:"sessions"`
	// Truncated: Limit was reached; more sessions may match, listed from NextAfter on.
	Truncated bool `json:"truncated,omitempty"`
	// NextAfter is the After of the next page when Truncated: the last session id listed.
	NextAfter string `json:"next_after,omitempty"`
}

// listPage bounds one Lister call. It is large because a ScanLister lists the entity's session
// ids again on every call.
const listPage = 5000

// List returns the sessions whose state matches p, read through the store's Lister: a query on
// Postgres, a brief lock of each session with Service Bus session state (a session a worker holds
// is listed as Busy whatever p selects, since its state is unknown).
func (o *Operator) List(ctx context.Context, p ListParams) (*ListResult, error) {
	if p.Limit < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative, got %d", ErrInvalidInput, p.Limit)
	}
	f := sessionstate.Filter{Parked: p.Parked, Gap: p.Gap, Stranded: p.Stranded, Blocked: p.Blocked, Retrying: p.Retrying, Ended: p.Ended}
	res := &ListResult{Sessions: []SessionInfo{}}
	after := p.After
	for {
		page := listPage
		if p.Limit > 0 {
			page = min(page, p.Limit-len(res.Sessions)+1) // one more tells whether the limit cut the list
		}
		entries, err := o.cfg.Lister.List(ctx, sessionstate.ListParams{Filter: f, After: after, Limit: page})
		if err != nil {
			return nil, fmt.Errorf("list the sessions of %s: %w", o.cfg.Entity, err)
		}
		for _, e := range entries {
			var info SessionInfo
			switch {
			case e.Busy:
				info = SessionInfo{SessionID: e.SessionID, Busy: true}
			case p.match(e.State):
				info = sessionInfo(e.SessionID, e.State, e.Version)
			default:
				continue
			}
			if p.Limit > 0 && len(res.Sessions) == p.Limit {
				res.Truncated = true
				res.NextAfter = res.Sessions[len(res.Sessions)-1].SessionID
				return res, nil
			}
			res.Sessions = append(res.Sessions, info)
		}
		if len(entries) < page {
			return res, nil
		}
		after = entries[len(entries)-1].SessionID
	}
}

// BrokerMessage is a message as a peek shows it.
type BrokerMessage struct {
	BrokerSequence int64  `json:"broker_sequence"`
	SessionID      string `json:"session_id"`
	// Sequence is the application sequence (0 when the property is missing or not a positive
	// integer); Last reports the last mark.
	Sequence int64  `json:"sequence"`
	Last     bool   `json:"last,omitempty"`
	State    string `json:"state"` // active, deferred or scheduled
	// MessageID, EnqueuedAt and DeliveryCount are the broker's.
	MessageID     string    `json:"message_id"`
	EnqueuedAt    time.Time `json:"enqueued_at"`
	DeliveryCount uint32    `json:"delivery_count"`
	// Reason and Description are set on dead-lettered messages.
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
}

// ShowParams name the session Show describes.
type ShowParams struct {
	SessionID string
	// Wait bounds the wait for a worker to release the session, whose lock Show needs to peek
	// its messages (and, with Service Bus session state, to read its state). 0 tries once.
	Wait time.Duration
	// MaxMessages bounds the messages peeked at the broker and in the dead-letter queue each
	// (default 100).
	MaxMessages int
}

// ShowResult is a session's whole state and its messages.
type ShowResult struct {
	Session SessionInfo `json:"session"`
	// Unknown: the store holds no state for the session (and Session is empty but for its id).
	Unknown bool `json:"unknown,omitempty"`
	// DeferredIndex maps application sequence → broker sequence number of the deferred messages;
	// InFlight and SkippedPoison are the engine's other records (see sequencer.State).
	DeferredIndex map[int64]int64 `json:"deferred_index"`
	InFlight      map[int64]int64 `json:"in_flight,omitempty"`
	SkippedPoison map[int64]int64 `json:"skipped_poison,omitempty"`
	// Messages are the session's messages at the broker (active, deferred, scheduled), nil with
	// MessagesUnavailable saying why when the session could not be locked to peek, or the
	// broker refused the peek.
	Messages            []BrokerMessage `json:"messages"`
	MessagesUnavailable string          `json:"messages_unavailable,omitempty"`
	// DeadLetters are the session's messages in the dead-letter queue.
	DeadLetters []BrokerMessage `json:"dead_letters"`
	// Held is what the state store holds for the session (early messages kept by the store, and
	// their dead letters); nil with a store that holds no messages.
	Held *HeldSummary `json:"held,omitempty"`
}

// peeker is the part of sbadapter.Session that Show uses.
type peeker interface {
	Peek(ctx context.Context, from int64, max int) ([]*azservicebus.ReceivedMessage, error)
}

// Show returns the session's whole state, its messages at the broker and its dead letters. It
// locks the session briefly to peek; while a worker holds it, the state still comes from a
// store that can be read without the lock (Postgres), and Messages stays empty.
func (o *Operator) Show(ctx context.Context, p ShowParams) (*ShowResult, error) {
	if err := checkSessionID(p.SessionID); err != nil {
		return nil, err
	}
	if p.MaxMessages <= 0 {
		p.MaxMessages = 100
	}
	res := &ShowResult{Session: SessionInfo{SessionID: p.SessionID}}
	sess, err := o.lock(ctx, p.SessionID, o.waitUntil(p.Wait))
	switch {
	case errors.Is(err, ErrSessionBusy):
		res.MessagesUnavailable = "a worker holds the session"
		res.Session.Busy = true
		// The lock is not needed to read a store keyed by id; the Service Bus store refuses.
		if st, ver, lerr := o.cfg.Store.Load(ctx, sequencer.LoadParams{Session: unlocked(p.SessionID)}); lerr == nil {
			o.describe(res, st, ver)
		}
	case err != nil:
		return nil, err
	default:
		defer release(ctx, sess)
		st, ver, err := o.cfg.Store.Load(ctx, sequencer.LoadParams{Session: sess})
		if err != nil {
			return nil, fmt.Errorf("load the state of session %q: %w", p.SessionID, err)
		}
		o.describe(res, st, ver)
		pk, ok := sess.(peeker)
		if !ok && o.cfg.DeadLetters != nil {
			// SQS has no peek: a message group's messages can be read only by receiving them.
			res.MessagesUnavailable = "the broker cannot list a session's messages (SQS has no peek); its dead letters and what the state store holds are listed"
			break
		}
		if !ok {
			return nil, fmt.Errorf("peek session %q: the session source's sessions (%T) cannot peek", p.SessionID, sess)
		}
		msgs, err := pk.Peek(ctx, 0, p.MaxMessages)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("peek the messages of session %q: %w", p.SessionID, err)
			}
			// The state is shown all the same: a broker that refuses the SDK's peek (a
			// partitioned entity wants a session-id it does not send) hides only the messages.
			res.MessagesUnavailable = fmt.Sprintf("the broker refused to list them: %v", err)
			break
		}
		res.Messages = []BrokerMessage{}
		for _, m := range msgs {
			res.Messages = append(res.Messages, o.brokerMessage(m))
		}
	}
	if res.Held, err = o.held(ctx, p.SessionID, p.MaxMessages); err != nil {
		return nil, err
	}
	dl, err := o.DLQList(ctx, DLQListParams{SessionID: p.SessionID, Limit: p.MaxMessages})
	if err != nil {
		return nil, err
	}
	res.DeadLetters = dl.Messages
	return res, nil
}

// describe fills res from a loaded state.
func (o *Operator) describe(res *ShowResult, st *sequencer.State, ver int64) {
	if ver == 0 {
		res.Unknown = true
		res.DeferredIndex = map[int64]int64{}
		return
	}
	busy := res.Session.Busy
	res.Session = sessionInfo(res.Session.SessionID, st, ver)
	res.Session.Busy = busy
	res.DeferredIndex = maps.Clone(st.Deferred)
	if res.DeferredIndex == nil {
		res.DeferredIndex = map[int64]int64{}
	}
	res.InFlight = st.InFlight
	res.SkippedPoison = st.SkippedPoison
}

// ResumeParams name the sessions Resume resumes: SessionID, or every parked session.
type ResumeParams struct {
	SessionID string
	AllParked bool
	// Wait bounds the wait for a worker to release a session (0 tries once). With AllParked it is
	// one deadline shared by every session, waited for concurrently.
	Wait time.Duration
}

// Resumed is one resumed session.
type Resumed struct {
	SessionID string `json:"session_id"`
	// Parked and Blocked are the marks that were cleared; the session now waits for its
	// sequence again.
	Parked  *ParkedInfo  `json:"parked,omitempty"`
	Blocked *BlockedInfo `json:"blocked,omitempty"`
	// Next is the sequence the session waits for (the parked one).
	Next int64 `json:"next"`
	// Wakes: the message for Next is already deferred at the broker (a replayed copy that arrived
	// while the session was parked), so the workers' sweeper wakes the session; otherwise the
	// session continues when the message arrives (replay it from the dead-letter queue).
	Wakes bool `json:"wakes"`
}

// Failure is a session a command could not change, and why.
type Failure struct {
	SessionID string `json:"session_id"`
	Error     string `json:"error"`
}

// ResumeResult lists the sessions resumed and, with AllParked, those that failed and those
// passed over.
type ResumeResult struct {
	Resumed []Resumed `json:"resumed"`
	Failed  []Failure `json:"failed,omitempty"`
	// PassedOver are sessions listed as candidates (parked, or held by a worker so that their
	// state was unknown) that turned out to need no resume once locked: not parked or blocked,
	// ended, or without state. Nothing was changed on them.
	PassedOver []Failure `json:"passed_over,omitempty"`
}

// resumeConcurrency bounds the sessions a bulk resume locks and changes at once.
const resumeConcurrency = 16

// Resume clears the parked mark of a session (or of every parked session) while holding its
// lock: the session continues from where it stopped, with the parked sequence, once its message
// is back at the broker (dlq replay). A single session that cannot be resumed is an error; with
// AllParked each failure is listed in the result and the others go on.
//
// With AllParked, a session a worker holds is a candidate too, since its state cannot be read
// until the worker releases it (Service Bus session state is read under the lock): a parked
// session is held for a moment whenever the broker offers it, for example when its replayed copy
// arrives. Every candidate is waited for as a single resume waits, concurrently, up to one shared
// deadline (Wait from now); a candidate found not parked is passed over, and one still held at
// the deadline is a failure.
func (o *Operator) Resume(ctx context.Context, p ResumeParams) (*ResumeResult, error) {
	res := &ResumeResult{Resumed: []Resumed{}}
	if !p.AllParked {
		if err := checkSessionID(p.SessionID); err != nil {
			return nil, err
		}
		r, err := o.resumeOne(ctx, p.SessionID, o.waitUntil(p.Wait), false)
		if err != nil {
			return nil, err
		}
		res.Resumed = append(res.Resumed, *r)
		return res, nil
	}
	if p.SessionID != "" {
		return nil, fmt.Errorf("%w: give a session id or all parked sessions, not both", ErrInvalidInput)
	}
	deadline := o.waitUntil(p.Wait)
	candidates, err := o.List(ctx, ListParams{Parked: true})
	if err != nil {
		return nil, err
	}
	type result struct {
		r   *Resumed
		err error
	}
	results := make([]result, len(candidates.Sessions))
	sem := make(chan struct{}, resumeConcurrency)
	var wg sync.WaitGroup
	for i, s := range candidates.Sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := o.resumeOne(ctx, s.SessionID, deadline, true)
			results[i] = result{r, err}
		})
	}
	wg.Wait()
	for i, s := range candidates.Sessions {
		r, err := results[i].r, results[i].err
		switch {
		case err == nil:
			res.Resumed = append(res.Resumed, *r)
		case errors.Is(err, ErrNotParked), errors.Is(err, ErrSessionEnded), errors.Is(err, ErrUnknownSession):
			// Parked when listed (or of unknown state), no longer: a worker unparked it (the
			// missing message of a gap arrived) or it was never parked.
			res.PassedOver = append(res.PassedOver, Failure{SessionID: s.SessionID, Error: err.Error()})
		default:
			res.Failed = append(res.Failed, Failure{SessionID: s.SessionID, Error: err.Error()})
		}
	}
	return res, nil
}

// resumeOne resumes one session; parkedOnly passes over a session that is blocked but not parked
// (a bulk resume of parked sessions leaves the poison policy block to its own course).
func (o *Operator) resumeOne(ctx context.Context, id string, deadline time.Time, parkedOnly bool) (*Resumed, error) {
	var r *Resumed
	_, err := o.change(ctx, id, deadline, func(st *sequencer.State, _ int64) error {
		if parkedOnly && st.Parked == nil && st.EndedAt.IsZero() {
			return fmt.Errorf("session %q: %w (next expected sequence %d)", id, ErrNotParked, st.Next)
		}
		p, b, err := resumeState(id, st, o.cfg.Clock.Now())
		if err != nil {
			return err
		}
		r = &Resumed{SessionID: id, Parked: parkedInfo(p), Blocked: blockedInfo(b), Next: st.Next, Wakes: st.NeedsWake()}
		return nil
	})
	if err != nil {
		return nil, err
	}
	attrs := []any{slog.String("session_id", id), slog.Int64("sequence", r.Next), slog.Bool("wakes", r.Wakes)}
	if r.Parked != nil {
		attrs = append(attrs, slog.String("parked_reason", r.Parked.Reason), slog.Bool("parked_on_gap", r.Parked.OnGap))
	}
	if r.Blocked != nil {
		attrs = append(attrs, slog.String("blocked_reason", r.Blocked.Reason), slog.Uint64("blocked_times", r.Blocked.Times))
	}
	o.log.InfoContext(ctx, "operator: resumed session", attrs...)
	return r, nil
}

// SkipParams name the session Skip moves on and how far.
type SkipParams struct {
	SessionID string
	// To is the new next expected sequence: everything below it is given up. 0 skips the parked
	// sequence, or the missing sequences of a gap (up to the lowest deferred one).
	To int64
	// Wait bounds the wait for a worker to release the session (0 tries once).
	Wait time.Duration
}

// SkipResult is what Skip gave up.
type SkipResult struct {
	SessionID string `json:"session_id"`
	// SkippedFrom..SkippedTo (inclusive) are the sequences given up; Next is the new next
	// expected sequence (SkippedTo+1).
	SkippedFrom int64 `json:"skipped_from"`
	SkippedTo   int64 `json:"skipped_to"`
	Next        int64 `json:"next"`
	// DroppedDeferred lists the skipped sequences whose messages are deferred at the broker: the
	// next run completes them without handling them.
	DroppedDeferred []int64 `json:"dropped_deferred,omitempty"`
	// DroppedHeld lists the skipped sequences whose messages the state store held: removed from
	// the store with the skip, never handled.
	DroppedHeld []int64 `json:"dropped_held,omitempty"`
	// Unparked and Unblocked are the marks the skip cleared.
	Unparked  *ParkedInfo  `json:"unparked,omitempty"`
	Unblocked *BlockedInfo `json:"unblocked,omitempty"`
	// Ended: the skip went past the last sequence, so the session has ended.
	Ended bool `json:"ended,omitempty"`
}

// Skip gives up the session's parked sequence, the missing sequences of its gap, or everything
// below p.To, while holding the session lock, and says which sequences it gave up. The session
// continues with the next one: at once when it is deferred (the workers' sweeper wakes it), or
// when it arrives.
func (o *Operator) Skip(ctx context.Context, p SkipParams) (*SkipResult, error) {
	if err := checkSessionID(p.SessionID); err != nil {
		return nil, err
	}
	if p.To < 0 {
		return nil, fmt.Errorf("%w: --to must be a positive sequence, got %d", ErrInvalidInput, p.To)
	}
	var res *SkipResult
	_, err := o.change(ctx, p.SessionID, o.waitUntil(p.Wait), func(st *sequencer.State, _ int64) error {
		plan, err := skipState(p.SessionID, st, p.To, o.cfg.Clock.Now())
		if err != nil {
			return err
		}
		res = &SkipResult{SessionID: p.SessionID, SkippedFrom: plan.From, SkippedTo: plan.To - 1, Next: plan.To,
			DroppedDeferred: plan.Dropped, Unparked: parkedInfo(plan.Unparked), Unblocked: blockedInfo(plan.Unblocked), Ended: plan.Ends}
		res.DroppedHeld, err = o.heldBelow(ctx, p.SessionID, plan.From, plan.To)
		return err
	})
	if err != nil {
		return nil, err
	}
	o.log.WarnContext(ctx, "operator: skipped sequences", slog.String("session_id", p.SessionID),
		slog.Int64("from", res.SkippedFrom), slog.Int64("to", res.SkippedTo),
		slog.Any("dropped_deferred", res.DroppedDeferred), slog.Any("dropped_held", res.DroppedHeld), slog.Bool("was_parked", res.Unparked != nil),
		slog.Bool("was_blocked", res.Unblocked != nil), slog.Bool("ended", res.Ended))
	return res, nil
}

// RetryNowParams name the session RetryNow makes retry at once.
type RetryNowParams struct {
	SessionID string
	// Wait bounds the wait for a worker to release the session (0 tries once).
	Wait time.Duration
}

// RetryNowResult is the released retry RetryNow brought forward.
type RetryNowResult struct {
	SessionID string `json:"session_id"`
	// Sequence is the message whose next attempt is now due; Attempts the handler calls made so
	// far and LastError the last one's error.
	Sequence  int64  `json:"sequence"`
	Attempts  uint64 `json:"attempts"`
	LastError string `json:"last_error"`
	// WasDue is when the attempt was planned; RetryAt when it is due now.
	WasDue  time.Time `json:"was_due"`
	RetryAt time.Time `json:"retry_at"`
}

// RetryNow ends the wait of a session released until the next attempt of a failing message
// (SEQBUS_RETRY_RELEASE_AFTER): while holding the session lock it makes the attempt due now,
// through the store's version check; the workers' sweeper then wakes the session at its next
// sweep. The attempt still counts against SEQBUS_MAX_HANDLER_ATTEMPTS.
func (o *Operator) RetryNow(ctx context.Context, p RetryNowParams) (*RetryNowResult, error) {
	if err := checkSessionID(p.SessionID); err != nil {
		return nil, err
	}
	var res *RetryNowResult
	_, err := o.change(ctx, p.SessionID, o.waitUntil(p.Wait), func(st *sequencer.State, _ int64) error {
		if !st.EndedAt.IsZero() {
			return fmt.Errorf("session %q: %w (at %s)", p.SessionID, ErrSessionEnded, st.EndedAt.UTC().Format(time.RFC3339))
		}
		rt := st.Retrying
		if rt == nil {
			return fmt.Errorf("session %q: %w (next expected sequence %d); nothing to retry", p.SessionID, ErrNotRetrying, st.Next)
		}
		res = &RetryNowResult{SessionID: p.SessionID, Sequence: rt.Sequence, Attempts: rt.Attempts, LastError: rt.Reason, WasDue: rt.At}
		st.RetryNow(o.cfg.Clock.Now())
		res.RetryAt = st.Retrying.At
		return nil
	})
	if err != nil {
		return nil, err
	}
	o.log.InfoContext(ctx, "operator: retry now", slog.String("session_id", p.SessionID), slog.Int64("sequence", res.Sequence),
		slog.Uint64("attempts", res.Attempts), slog.Time("was_due", res.WasDue))
	return res, nil
}

// unlocked is a session handle that is not locked: Show reads a store keyed by id with it while
// a worker holds the session. Every call but ID fails.
type unlocked string

var errUnlocked = errors.New("operator: the session is not locked by this process")

func (u unlocked) ID() string                  { return string(u) }
func (u unlocked) LockedUntil() time.Time      { return time.Time{} }
func (u unlocked) Close(context.Context) error { return nil }
func (u unlocked) Receive(context.Context, int) ([]*sequencer.Message, error) {
	return nil, errUnlocked
}
func (u unlocked) ReceiveDeferred(context.Context, []int64) ([]*sequencer.Message, error) {
	return nil, errUnlocked
}
func (u unlocked) Complete(context.Context, *sequencer.Message) error { return errUnlocked }
func (u unlocked) Defer(context.Context, *sequencer.Message) error    { return errUnlocked }
func (u unlocked) DeadLetter(context.Context, *sequencer.Message, sequencer.DeadLetterParams) error {
	return errUnlocked
}
func (u unlocked) Abandon(context.Context, *sequencer.Message) error { return errUnlocked }
func (u unlocked) RenewLock(context.Context) (time.Time, error)      { return time.Time{}, errUnlocked }

var _ sequencer.Session = unlocked("")
