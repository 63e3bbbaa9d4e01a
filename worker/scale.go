package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// The scaling signal: how many replicas the entity's work needs, from the sessions that have
// messages ready to handle, not from the message count (a session is handled by one replica at
// a time, however many messages it holds).
//
// What the broker lets us ask cheaply, and what it costs per evaluation:
//
//   - The entity's runtime properties (the ATOM management API, Manage rights) count its active
//     messages, deferred and locked ones included: one call. None means no session is ready,
//     however many sessions have state, so an idle entity costs this one call; the listings
//     below are made only when it counts some (or cannot be read).
//   - list-sessions without SessionStateUpdatedAfter names every session that has messages
//     (active or deferred) or session state: one management call per 100 ids.
//   - list-sessions with SessionStateUpdatedAfter (the epoch) names the sessions with session
//     state (Service Bus state store only): one call per 100 ids.
//   - The state store says what each session's state is: parked, blocked, ended (a tombstone),
//     waiting on a gap, stranded on deferred messages, or in progress. With Postgres that is a
//     query per 500 states and no broker call.
//   - Nothing cheaper tells a session's active messages from its deferred ones, or a session
//     with state and messages from one with state alone: that takes the session's lock and a
//     peek (accept, peek per 100 messages, close; and a state read with the Service Bus store).
//     Only the sessions the listing and the state leave in doubt are peeked, and no more of them
//     than SEQBUS_SCALE_CREDITS_PER_SECOND pays for in 10 s (about 3 credits a peek):
//     when more are in doubt, a uniform sample of that many is peeked and stands for the rest. With
//     the Service Bus store a session whose state rules it out (ended, parked, blocked) is read
//     once and not again until its state changes, which a listing of the states changed since
//     the last evaluation tells (one more call per 100 changed ids).

// Scale is one evaluation of the scaling signal, as GET /scale answers it.
type Scale struct {
	// ReplicasWanted is ceil(SessionsReady / SessionsPerReplica), at most the maximum
	// (SEQBUS_SCALE_MAX_REPLICAS); 0 when nothing waits.
	ReplicasWanted int `json:"replicas_wanted"`
	// SessionsReady counts the sessions with messages ready to handle (those a worker is
	// handling now included, while they still have messages).
	SessionsReady int `json:"sessions_ready"`
	// SessionsPerReplica is SEQBUS_MAX_CONCURRENT_SESSIONS.
	SessionsPerReplica int `json:"sessions_per_replica"`
	// EvaluatedAt is when the evaluation began (RFC 3339, UTC).
	EvaluatedAt time.Time `json:"evaluated_at"`
}

// replicasWanted is the scaling rule: ceil(ready / perReplica), bounded by maxReplicas.
func replicasWanted(ready, perReplica, maxReplicas int) int {
	if ready <= 0 || perReplica <= 0 {
		return 0
	}
	return min(maxReplicas, (ready+perReplica-1)/perReplica)
}

// readiness is what a listed session's stored state says of its work.
type readiness int

const (
	// notReady: parked, blocked or ended, whatever messages it holds.
	notReady readiness = iota
	// ready: it has messages to handle.
	ready
	// peekToKnow: ready only if it holds an active message (not only deferred ones, not only
	// state).
	peekToKnow
)

// classify says what a session's stored state st (nil: none) tells of a session the broker
// listed. listedMeansMessages: the listing names only sessions with messages (the Postgres store
// keeps no session state at the broker); otherwise a session with state may have no message at
// all.
func classify(st *sequencer.State, listedMeansMessages bool) readiness {
	switch {
	case st == nil:
		return ready // messages and no state: a session not handled yet
	case st.EndedAt.IsZero() && st.Parked != nil && st.Parked.OnGap():
		return peekToKnow // parked on a missing sequence: its arrival lets the session go on
	case !st.EndedAt.IsZero(), st.Parked != nil, st.Blocked != nil:
		return notReady // a tombstone, or waiting for an operator or the broker's dead-lettering
	case st.NeedsWake():
		return ready // stranded on a due deferred message: the sweeper hands it to a runner
	case !st.GapSince.IsZero():
		return peekToKnow // its deferred messages wait on a gap; a new message makes it ready
	case listedMeansMessages:
		return ready
	default:
		return peekToKnow
	}
}

// peekPage is how many messages one peek asks for while looking for an active one.
const peekPage = 100

// readyCounter counts an entity's sessions with messages ready to handle: the listing, less what
// the stored states rule out, with a peek where they leave it open.
type readyCounter struct {
	// active, when set, counts the entity's active messages (deferred and locked ones
	// included): none, and no session is ready. log says once that it is refused.
	active func(ctx context.Context) (int64, error)
	log    *slog.Logger
	// listed lists the sessions with messages or state (list-sessions, default mode).
	listed func(ctx context.Context) ([]string, error)
	// stated lists the sessions with Service Bus session state (nil with the Postgres store).
	stated func(ctx context.Context) ([]string, error)
	// states returns the stored states of the entity (Postgres; nil with Service Bus).
	states func(ctx context.Context) (map[string]*sequencer.State, error)
	// changed lists the sessions whose Service Bus session state changed after a time (nil with
	// the Postgres store); now is the clock it is compared with.
	changed func(ctx context.Context, after time.Time) ([]string, error)
	now     func() time.Time
	// source locks a session to peek it; store reads its state under that lock (Service Bus).
	source sequencer.SessionSource
	store  sequencer.StateStore
	// concurrency sessions are peeked at once, each within perSession.
	concurrency int
	perSession  time.Duration
	calls       func(op string, n int)
	// maxPeeks bounds the sessions one evaluation peeks (0: no bound); when more are in doubt a
	// uniform sample of that many is peeked and the share of it found ready stands for the
	// rest. sample picks it (rand.Perm; a fixed source in tests).
	maxPeeks int
	sample   func(n int) []int
	// known is the entity's message count as the evaluation read it (-1: not read).
	known int64

	// With the Service Bus store: ruledOut are the sessions whose state, as last read, rules them
	// out (ended, parked, blocked), as of cursor (when the last complete evaluation began).
	mu       sync.Mutex
	ruledOut map[string]bool
	cursor   time.Time
}

// stateMargin is listed again before the cursor, for the clocks of the broker and this process.
const stateMargin = 5 * time.Second

// count evaluates once and returns the sessions ready.
func (c *readyCounter) count(ctx context.Context) (int, error) {
	n, err := c.countListed(ctx)
	if c.known >= 0 {
		// Every ready session holds at least one message the count includes: a bound that
		// matters when a sample stands for many sessions in doubt and few messages wait.
		n = min(n, int(min(c.known, math.MaxInt32)))
	}
	return n, err
}

// countListed is count without the bound of the message count: the listing, the states and the
// peeks.
func (c *readyCounter) countListed(ctx context.Context) (int, error) {
	c.known = -1
	if c.active != nil {
		n, err := c.active(ctx)
		c.calls("runtime_properties", 1)
		if err == nil {
			c.known = n
		}
		switch {
		case err == nil && n == 0:
			return 0, nil
		case denied(err):
			// Without Manage rights every evaluation lists; say so once, not every interval.
			c.active = nil
			c.log.WarnContext(ctx, "worker: scaling signal: the entity's message counts are refused, so every evaluation lists the sessions, idle or not (grant Manage rights, or the Azure Service Bus Data Owner role, to make an idle evaluation one call)", slog.Any("error", err))
		case err != nil:
			c.log.DebugContext(ctx, "worker: scaling signal: the entity's message counts could not be read; listing the sessions", slog.Any("error", err))
		}
	}
	ids, err := c.listed(ctx)
	c.calls("list_sessions", pages(len(ids), 100))
	if err != nil {
		return 0, fmt.Errorf("list sessions: %w", err)
	}
	ids = slices.DeleteFunc(ids, sessionstate.Reserved)
	if len(ids) == 0 {
		return 0, nil
	}
	n := 0
	var doubt []string
	switch {
	case c.states != nil:
		states, err := c.states(ctx)
		if err != nil {
			return 0, fmt.Errorf("read the stored states: %w", err)
		}
		for _, id := range ids {
			switch classify(states[id], true) {
			case ready:
				n++
			case peekToKnow:
				doubt = append(doubt, id)
			}
		}
	default:
		at := c.now()
		withState, err := c.stated(ctx)
		c.calls("list_sessions", pages(len(withState), 100))
		if err != nil {
			return 0, fmt.Errorf("list sessions with state: %w", err)
		}
		has := make(map[string]bool, len(withState))
		for _, id := range withState {
			has[id] = true
		}
		if err := c.forgetChanged(ctx, has); err != nil {
			return 0, err
		}
		c.mu.Lock()
		for _, id := range ids {
			switch {
			case !has[id]:
				n++
			case !c.ruledOut[id]:
				doubt = append(doubt, id) // its state is read under the lock of the peek
			}
		}
		c.mu.Unlock()
		m, err := c.estimate(ctx, doubt)
		if err == nil || errors.Is(err, errPartial) {
			c.cursor = at
		}
		return n + m, err
	}
	m, err := c.estimate(ctx, doubt)
	return n + m, err
}

// forgetChanged drops from ruledOut the sessions whose state changed since the cursor, or is gone
// (not in has), so that they are read again.
func (c *readyCounter) forgetChanged(ctx context.Context, has map[string]bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ruledOut == nil {
		c.ruledOut = map[string]bool{}
	}
	for id := range c.ruledOut {
		if !has[id] {
			delete(c.ruledOut, id)
		}
	}
	if c.cursor.IsZero() || len(c.ruledOut) == 0 {
		return nil
	}
	since := c.cursor.Add(-stateMargin)
	changed, err := c.changed(ctx, since)
	c.calls("list_sessions", pages(len(changed), 100))
	if err != nil {
		return fmt.Errorf("list sessions with state changed since %s: %w", since.Format(time.RFC3339), err)
	}
	for _, id := range changed {
		delete(c.ruledOut, id)
	}
	return nil
}

// denied reports whether err is the management API refusing the credentials' rights.
func denied(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}

// activeMessages reads entity e's ActiveMessageCount (deferred and locked messages included)
// from its runtime properties with ac: one management call.
func activeMessages(ac *admin.Client, e sbadapter.Entity) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		var (
			n     int32
			found bool
			err   error
		)
		if e.Queue != "" {
			var r *admin.GetQueueRuntimePropertiesResponse
			if r, err = ac.GetQueueRuntimeProperties(ctx, e.Queue, nil); r != nil {
				n, found = r.ActiveMessageCount, true
			}
		} else {
			var r *admin.GetSubscriptionRuntimePropertiesResponse
			if r, err = ac.GetSubscriptionRuntimeProperties(ctx, e.Topic, e.Subscription, nil); r != nil {
				n, found = r.ActiveMessageCount, true
			}
		}
		switch {
		case err != nil:
			return 0, fmt.Errorf("runtime properties of %s: %w", e, err)
		case !found:
			return 0, fmt.Errorf("runtime properties of %s: not found", e)
		}
		return int64(n), nil
	}
}

// pages is how many calls the SDK's pager made for a listing of n ids, a page of size per call:
// it stops on a page shorter than size, so a full last page costs one more, empty, call.
func pages(n, size int) int { return n/size + 1 }

// estimate counts the sessions of doubt that are ready: all of them peeked, or, when they are more
// than maxPeeks, a uniform sample of maxPeeks, the count scaled up to the whole (rounded up: the
// signal would rather keep a replica than strand work). An evaluation's peeks, and so its
// burst of calls at the broker, stay bounded however many sessions rest with state; the ruled-out
// sessions each sample finds are not peeked again (Service Bus store), so later samples are drawn
// from fewer.
func (c *readyCounter) estimate(ctx context.Context, doubt []string) (int, error) {
	if c.maxPeeks <= 0 || len(doubt) <= c.maxPeeks {
		return c.peekAll(ctx, doubt)
	}
	picked := make([]string, 0, c.maxPeeks)
	for _, i := range c.sample(len(doubt))[:c.maxPeeks] {
		picked = append(picked, doubt[i])
	}
	m, err := c.peekAll(ctx, picked)
	if err != nil && !errors.Is(err, errPartial) {
		return 0, err
	}
	c.log.DebugContext(ctx, "worker: scaling signal: sessions in doubt sampled", slog.Int("in_doubt", len(doubt)), slog.Int("peeked", len(picked)), slog.Int("ready", m))
	return (m*len(doubt) + len(picked) - 1) / len(picked), err
}

// peekAll counts the sessions of ids that are ready, concurrency at once. A session it cannot
// look into counts as ready: the signal would rather keep a replica than strand work.
func (c *readyCounter) peekAll(ctx context.Context, ids []string) (int, error) {
	var (
		n    atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, max(1, c.concurrency))
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ok, err := c.peek(ctx, id)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				ok = true
			}
			if ok {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(errs) > 0 {
		return int(n.Load()), fmt.Errorf("%w: %d of %d sessions could not be peeked (counted as ready): %w", errPartial, len(errs), len(ids), errors.Join(errs[:min(3, len(errs))]...))
	}
	return int(n.Load()), nil
}

// peeker is a locked session whose messages can be peeked (sbadapter.Session).
type peeker interface {
	Peek(ctx context.Context, from int64, max int) ([]*azservicebus.ReceivedMessage, error)
}

// peek reports whether session id is ready: locked by another receiver (a worker handles it),
// or, under its lock, ready by its state (read first with the Service Bus store) or holding an
// active message where the state leaves that open.
func (c *readyCounter) peek(ctx context.Context, id string) (bool, error) {
	c.calls("accept", 1)
	var ok bool
	busy, err := sessionstate.WithLock(ctx, c.source, c.perSession, id, func(ctx context.Context, sess sequencer.Session) error {
		defer c.calls("close", 1)
		if c.states == nil {
			c.calls("get_state", 1)
			st, version, err := c.store.Load(ctx, sequencer.LoadParams{Session: sess})
			if err != nil {
				return fmt.Errorf("read the state of session %q: %w", id, err)
			}
			// The state alone can settle it; otherwise (no state any more, or one that
			// leaves it open) a peek tells.
			if r := classify(st, false); version != 0 && r != peekToKnow {
				if ok = r == ready; !ok {
					c.mu.Lock()
					c.ruledOut[id] = true // until its state changes
					c.mu.Unlock()
				}
				return nil
			}
		}
		p, isPeeker := sess.(peeker)
		if !isPeeker {
			return fmt.Errorf("session %q (%T) cannot be peeked", id, sess)
		}
		active, err := c.hasActive(ctx, p)
		if errors.Is(err, sequencer.ErrNoPeek) {
			// A partitioned entity: the SDK cannot peek a session there. In doubt it counts as
			// ready, as a session a worker holds does.
			ok = true
			return nil
		}
		ok = active
		return err
	})
	if busy {
		return true, nil
	}
	return ok, err
}

// hasActive peeks a session's messages until it finds an active one (neither deferred nor
// scheduled).
func (c *readyCounter) hasActive(ctx context.Context, p peeker) (bool, error) {
	from := int64(0)
	for {
		c.calls("peek", 1)
		msgs, err := p.Peek(ctx, from, peekPage)
		if err != nil {
			return false, err
		}
		for _, m := range msgs {
			if m.State == azservicebus.MessageStateActive {
				return true, nil
			}
		}
		if len(msgs) < peekPage || msgs[len(msgs)-1].SequenceNumber == nil {
			return false, nil
		}
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
}

// listerStates reads every stored state of the entity (tombstones included) with a Lister, a
// page of pageSize per query.
func listerStates(l sessionstate.Lister) func(ctx context.Context) (map[string]*sequencer.State, error) {
	return func(ctx context.Context) (map[string]*sequencer.State, error) {
		out := map[string]*sequencer.State{}
		after := ""
		for {
			page, err := l.List(ctx, sessionstate.ListParams{Filter: sessionstate.Filter{Ended: true}, After: after, Limit: pageSize})
			if err != nil {
				return nil, err
			}
			for _, e := range page {
				out[e.SessionID] = e.State
			}
			if len(page) < pageSize {
				return out, nil
			}
			after = page[len(page)-1].SessionID
		}
	}
}
