package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/sequencer"
)

// Entity names a session-enabled queue, or a topic subscription. Exactly one of Queue and
// Topic+Subscription is set.
type Entity struct {
	Queue        string `envconfig:"QUEUE" desc:"Session-enabled queue to consume; or the topic and subscription."`
	Topic        string `envconfig:"TOPIC" desc:"Topic whose subscription is consumed (with the subscription)."`
	Subscription string `envconfig:"SUBSCRIPTION" desc:"Session-enabled subscription of the topic."`
}

// Validate reports whether e names exactly one entity.
func (e Entity) Validate() error {
	switch {
	case e.Queue != "" && (e.Topic != "" || e.Subscription != ""):
		return errors.New("sbadapter: set either a queue or a topic with a subscription, not both")
	case e.Queue != "":
		return nil
	case e.Topic != "" && e.Subscription != "":
		return nil
	case e.Topic != "" || e.Subscription != "":
		return errors.New("sbadapter: a topic needs a subscription and a subscription needs a topic")
	default:
		return errors.New("sbadapter: no queue or topic subscription given")
	}
}

// String returns the entity path, "queue" or "topic/Subscriptions/sub".
func (e Entity) String() string {
	if e.Queue != "" {
		return e.Queue
	}
	return e.Topic + "/Subscriptions/" + e.Subscription
}

// Config configures a Source.
type Config struct {
	Entity Entity
	// AcceptNextWait bounds how long AcceptNext waits for a session when ctx has no deadline
	// (default 30s; Service Bus itself gives up after about 60s).
	AcceptNextWait time.Duration
	// SettleTimeout bounds one settlement (complete, defer, dead-letter, abandon) of a session
	// message (default DefaultSettleTimeout). A settlement still unanswered then reports
	// sequencer.ErrLockLost: see Session.Complete.
	SettleTimeout time.Duration
	// BusyRetry spaces the retries of a session call the broker refuses as busy (throttled),
	// up to BusyAttempts calls in all: the SDK's own retries are off (see ClientOptions), and
	// server-busy is the one refusal that is safe to retry on the same link. Defaults
	// DefaultBusyRetry and DefaultBusyAttempts.
	BusyRetry    backoff.Policy
	BusyAttempts int
	// Limiter paces the calls of the source's sessions (receives, settlements, state, lock
	// renewals) and learns a throttled namespace's rate from its server-busy answers (default:
	// a NewLimiter of the source's own, shared by all its sessions; one per replica in the
	// worker). Sources given the same Limiter share it.
	Limiter *Limiter
	// AcceptClients are further clients, each on a connection of its own, that the source locks
	// sessions on in turn with the client given to NewSource (listings use that one). The SDK
	// negotiates each accept's two claims one at a time per connection (azservicebus v1.11.0,
	// internal/namespace.go, negotiateClaimMu: one $cbs link per connection), so on one
	// connection accepts queue behind each other; on several they overlap. The same rules as for
	// NewSource's client apply (the SDK's retries off).
	AcceptClients []*azservicebus.Client
	// ReceiveWait is how long a receive waits for more messages once the first one arrived before
	// it returns what it has: the SDK's ReceiveMessagesOptions.TimeAfterFirstMessage (default
	// DefaultReceiveWait, the SDK's own 20ms). The engine asks for its next batch while it
	// handles one, so a shorter wait ends a session's last receive sooner (e2e cells 2–4 % faster
	// at 5ms, within their noise); but a receive that returns early leaves credits on the link,
	// and the SDK releases what lands on them before the next receive (each such message crosses
	// the link twice, and out of broker order: sequencer.HoldingSession), and under load a batch
	// comes in parts: at 2ms a broker 5ms away lost 6 % of its rate. Must not be negative.
	ReceiveWait time.Duration
	// Logger receives debug events (default: discard).
	Logger *slog.Logger
}

// DefaultReceiveWait is the default Config.ReceiveWait.
const DefaultReceiveWait = 20 * time.Millisecond

// DefaultBusyRetry and DefaultBusyAttempts retry a busy session call up to 6 times in all,
// waiting 250ms, 500ms, … up to 8s.
var DefaultBusyRetry = backoff.Policy{Base: 250 * time.Millisecond, Max: 8 * time.Second}

// DefaultBusyAttempts is the default Config.BusyAttempts.
const DefaultBusyAttempts = 6

// DefaultSettleTimeout is the default Config.SettleTimeout: far above a settlement's normal
// round trip, far below the SDK's own retries of a settlement on a dead link (about 45s).
const DefaultSettleTimeout = 10 * time.Second

// accepter locks sessions; *azservicebus.Client through clientAccepter in production.
type accepter interface {
	acceptNext(ctx context.Context) (sessionReceiver, error)
	accept(ctx context.Context, sessionID string) (sessionReceiver, error)
	// listSessions lists session ids; limit > 0 stops after the page that reaches it. With
	// stateAfter set, it lists only sessions whose state was updated after that time.
	listSessions(ctx context.Context, limit int, stateAfter *time.Time) ([]string, error)
}

// Source hands out locked Service Bus sessions of one entity. It implements
// sequencer.SessionSource.
type Source struct {
	a      accepter
	cfg    Config
	logger *slog.Logger
	// partitioned: the entity is partitioned (MarkPartitioned); its sessions do not peek.
	partitioned atomic.Bool
	// receive is what its sessions' receives pass to the SDK (Config.ReceiveWait), which only
	// reads it.
	receive *azservicebus.ReceiveMessagesOptions
}

var _ sequencer.SessionSource = (*Source)(nil)

// NewSource returns a source for cfg.Entity on client. The client stays owned by the caller. It
// must have the SDK's retries off, as NewClient, NewClientFromConnectionString and ClientOptions
// make it: see "Lock tenure" in the package documentation.
func NewSource(client *azservicebus.Client, cfg Config) (*Source, error) {
	if client == nil {
		return nil, errors.New("sbadapter: nil client")
	}
	if err := cfg.Entity.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReceiveWait < 0 {
		return nil, fmt.Errorf("sbadapter: Config.ReceiveWait must not be negative, got %s", cfg.ReceiveWait)
	}
	if cfg.Logger != nil {
		sdkLog.logger.CompareAndSwap(nil, cfg.Logger) // the SDK's retry lines, at debug level
	}
	var a accepter = clientAccepter{c: client, e: cfg.Entity}
	if len(cfg.AcceptClients) > 0 {
		rr := &roundRobin{accepters: []accepter{a}}
		for _, c := range cfg.AcceptClients {
			if c == nil {
				return nil, errors.New("sbadapter: nil client in Config.AcceptClients")
			}
			rr.accepters = append(rr.accepters, clientAccepter{c: c, e: cfg.Entity})
		}
		a = rr
	}
	return newSource(a, cfg), nil
}

// roundRobin locks sessions on its accepters in turn (Config.AcceptClients) and lists them on
// the first.
type roundRobin struct {
	accepters []accepter
	n         atomic.Uint64
}

func (r *roundRobin) next() accepter {
	return r.accepters[(r.n.Add(1)-1)%uint64(len(r.accepters))]
}

func (r *roundRobin) acceptNext(ctx context.Context) (sessionReceiver, error) {
	return r.next().acceptNext(ctx)
}

func (r *roundRobin) accept(ctx context.Context, sessionID string) (sessionReceiver, error) {
	return r.next().accept(ctx, sessionID)
}

func (r *roundRobin) listSessions(ctx context.Context, limit int, stateAfter *time.Time) ([]string, error) {
	return r.accepters[0].listSessions(ctx, limit, stateAfter)
}

func newSource(a accepter, cfg Config) *Source {
	if cfg.AcceptNextWait <= 0 {
		cfg.AcceptNextWait = 30 * time.Second
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.BusyRetry == (backoff.Policy{}) {
		cfg.BusyRetry = DefaultBusyRetry
	}
	if cfg.BusyAttempts <= 0 {
		cfg.BusyAttempts = DefaultBusyAttempts
	}
	if cfg.Limiter == nil {
		cfg.Limiter = NewLimiter(nil)
	}
	if cfg.ReceiveWait <= 0 {
		cfg.ReceiveWait = DefaultReceiveWait
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{a: a, cfg: cfg, logger: logger, receive: &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: cfg.ReceiveWait}}
}

// Limiter returns the limiter of the source's sessions (Config.Limiter).
func (s *Source) Limiter() *Limiter { return s.cfg.Limiter }

// Entity returns the entity the source reads.
func (s *Source) Entity() Entity { return s.cfg.Entity }

// AcceptNext locks the next available session. It returns an error matching
// sequencer.ErrNoSession when none became available before ctx ended (or before AcceptNextWait
// when ctx has no deadline).
func (s *Source) AcceptNext(ctx context.Context) (sequencer.Session, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.AcceptNextWait)
		defer cancel()
	}
	r, err := s.a.acceptNext(ctx)
	if err != nil {
		return nil, mapError(opAcceptNext, fmt.Sprintf("accept next session on %s", s.cfg.Entity), err)
	}
	sess := s.newSession(r)
	s.logger.DebugContext(ctx, "sbadapter: accepted session", slog.String("session_id", sess.ID()), slog.Time("locked_until", sess.LockedUntil()))
	return sess, nil
}

// Accept locks the named session. It returns an error matching sequencer.ErrSessionLocked when
// another receiver holds it.
func (s *Source) Accept(ctx context.Context, sessionID string) (sequencer.Session, error) {
	r, err := s.a.accept(ctx, sessionID)
	if err != nil {
		return nil, mapError(opAccept, fmt.Sprintf("accept session %q on %s", sessionID, s.cfg.Entity), err)
	}
	return s.newSession(r), nil
}

func (s *Source) newSession(r sessionReceiver) *Session {
	sess := newSession(r, s.logger)
	sess.settleTimeout = s.cfg.SettleTimeout
	sess.busy, sess.busyAttempts = s.cfg.BusyRetry, s.cfg.BusyAttempts
	sess.limit = s.cfg.Limiter
	sess.receive = s.receive
	sess.noPeek = s.partitioned.Load()
	return sess
}

var _ sequencer.CapableSource = (*Source)(nil)

// Capabilities implements sequencer.CapableSource: Service Bus sessions defer, keep a session
// state and are locked as a whole; they peek unless the entity is partitioned (MarkPartitioned).
func (s *Source) Capabilities() sequencer.Capabilities {
	return sequencer.Capabilities{Deferral: true, Peek: !s.partitioned.Load(), SessionState: true, SessionLock: true}
}

// MarkPartitioned tells the source its entity is partitioned, as its properties say (the worker
// reads them at start). Service Bus refuses a session's $management requests without the
// session id there, and the SDK's peek sends none: the sessions locked from now on answer
// Peek and Holding with sequencer.ErrNoPeek instead of a peek the broker refuses.
func (s *Source) MarkPartitioned() { s.partitioned.Store(true) }

// ListSessions returns the ids of the entity's sessions that have active messages or stored
// session state (the SDK's list-sessions pager).
func (s *Source) ListSessions(ctx context.Context) ([]string, error) {
	ids, err := s.a.listSessions(ctx, 0, nil)
	if err != nil {
		return nil, mapError(opList, fmt.Sprintf("list sessions on %s", s.cfg.Entity), err)
	}
	return ids, nil
}

// ListSessionsWithState returns the ids of the entity's sessions that have stored session
// state, whatever their messages (the operator's listing in Service Bus mode).
func (s *Source) ListSessionsWithState(ctx context.Context) ([]string, error) {
	return s.ListSessionsWithStateAfter(ctx, time.Time{})
}

// ListSessionsWithStateAfter returns the ids of the entity's sessions whose session state was
// updated after the given time (zero: every session with state), the SDK's list-sessions with
// SessionStateUpdatedAfter: a management call per 100 ids, whatever the number of sessions whose
// state did not change.
func (s *Source) ListSessionsWithStateAfter(ctx context.Context, after time.Time) ([]string, error) {
	if after.IsZero() {
		after = time.Unix(0, 0).UTC()
	}
	ids, err := s.a.listSessions(ctx, 0, &after)
	if err != nil {
		return nil, mapError(opList, fmt.Sprintf("list sessions with state updated after %s on %s", after.Format(time.RFC3339), s.cfg.Entity), err)
	}
	return ids, nil
}

// Probe checks that the entity exists and the credentials may read it, with one management
// call (the first page of the session list). Workers call it at start to fail fast on a wrong
// name or key: Classify gives ClassFatal for those.
func (s *Source) Probe(ctx context.Context) error {
	if _, err := s.a.listSessions(ctx, 1, nil); err != nil {
		return mapError(opList, fmt.Sprintf("probe %s", s.cfg.Entity), err)
	}
	return nil
}

type clientAccepter struct {
	c *azservicebus.Client
	e Entity
}

func (a clientAccepter) acceptNext(ctx context.Context) (sessionReceiver, error) {
	if a.e.Queue != "" {
		return a.c.AcceptNextSessionForQueue(ctx, a.e.Queue, nil)
	}
	return a.c.AcceptNextSessionForSubscription(ctx, a.e.Topic, a.e.Subscription, nil)
}

func (a clientAccepter) accept(ctx context.Context, sessionID string) (sessionReceiver, error) {
	if a.e.Queue != "" {
		return a.c.AcceptSessionForQueue(ctx, a.e.Queue, sessionID, nil)
	}
	return a.c.AcceptSessionForSubscription(ctx, a.e.Topic, a.e.Subscription, sessionID, nil)
}

func (a clientAccepter) listSessions(ctx context.Context, limit int, stateAfter *time.Time) ([]string, error) {
	var ids []string
	var pager interface {
		More() bool
		NextPage(ctx context.Context) (azservicebus.ListSessionsResponse, error)
	}
	opts := &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: stateAfter}
	if a.e.Queue != "" {
		pager = a.c.NewListSessionsForQueuePager(a.e.Queue, opts)
	} else {
		pager = a.c.NewListSessionsForSubscriptionPager(a.e.Topic, a.e.Subscription, opts)
	}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		ids = append(ids, page.Sessions...)
		if limit > 0 && len(ids) >= limit {
			break
		}
	}
	return ids, nil
}
