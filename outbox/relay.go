package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/publisher"
)

// Defaults of RelayConfig.
const (
	DefaultBatchSize      = 100
	DefaultConcurrency    = 4
	DefaultPollInterval   = 5 * time.Second
	DefaultMinBackoff     = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultSendTimeout    = 30 * time.Second
	DefaultEndedRetention = 7 * 24 * time.Hour
	DefaultPurgeInterval  = time.Minute
	// NoPurge as RelayConfig.EndedRetention switches the purge off: ended sessions are
	// kept, and refuse further messages, forever.
	NoPurge time.Duration = -1
	// DiagnosticIDProperty is the application property that carries a message's
	// traceparent, as the Azure SDKs name it.
	DiagnosticIDProperty = "Diagnostic-Id"
)

// lockClass is the first key of the relay's two-key advisory locks (the bytes "sbox"):
// a session's lock is (lockClass, hashtext(schema/entity/session_key)).
const lockClass int32 = 0x73626f78

// RelayConfig configures a Relay. Zero values take the defaults.
type RelayConfig struct {
	// Pool is the database holding the outbox (required). The relay holds up to
	// Concurrency of its connections while it sends, plus short ones for scans and the
	// purge; LISTEN uses a connection of its own, opened with the pool's ConnConfig.
	Pool *pgxpool.Pool
	// Client sends to Service Bus. Required unless NewSender is set.
	Client *azservicebus.Client
	// NewSender opens the Sender of an entity; the relay keeps one per entity until Run
	// returns. Default: ClientSenders(Client).
	NewSender func(ctx context.Context, entity string) (Sender, error)
	// Entities restricts the relay to these queues and topics (default: every entity in
	// the outbox). Relays with disjoint Entities can serve different namespaces.
	Entities []string
	// Logger receives the relay's events. Default: discard.
	Logger *slog.Logger
	// BatchSize is the most messages of one session claimed and sent at once (default
	// 100); they go out in as few SendMessageBatch calls as fit. A relay killed
	// mid-send sends at most one batch per session again.
	BatchSize int
	// Concurrency is how many sessions the relay sends at once (default 4).
	Concurrency int
	// PollInterval is how often the relay looks for work when no notification comes, a
	// safety net behind LISTEN/NOTIFY (default 5s).
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the pause of a session after a failed send:
	// MinBackoff after the first failure, doubling up to MaxBackoff, with jitter
	// (defaults 1s and 1m). They also pace retries after database errors.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// SendTimeout bounds one session's send (default 30s).
	SendTimeout time.Duration
	// SequenceProperty and LastProperty name the application properties the worker reads
	// (defaults "Sequence" and "IsLast", as the worker's SEQBUS_SEQUENCE_PROPERTY and
	// SEQBUS_LAST_PROPERTY).
	SequenceProperty string
	LastProperty     string
	// EndedRetention is how long an ended session is remembered after its last message
	// was sent: until then it refuses further messages (ErrSessionEnded), afterwards
	// the purge forgets it and its id starts again at 1. Keep it well above the
	// worker's tombstone TTL (24h by default), during which the worker drops messages
	// of an ended session as duplicates. Default 7 days; NoPurge keeps everything.
	EndedRetention time.Duration
	// PurgeInterval is how often the relay purges (default 1 minute).
	PurgeInterval time.Duration
	// Clock times the relay's waits (default: the wall clock).
	Clock clock.Clock
}

func (c RelayConfig) withDefaults() RelayConfig {
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.MinBackoff = cmp.Or(c.MinBackoff, DefaultMinBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, max(DefaultMaxBackoff, c.MinBackoff))
	c.SendTimeout = cmp.Or(c.SendTimeout, DefaultSendTimeout)
	c.SequenceProperty = cmp.Or(c.SequenceProperty, contract.SequenceProperty)
	c.LastProperty = cmp.Or(c.LastProperty, contract.LastProperty)
	c.EndedRetention = cmp.Or(c.EndedRetention, DefaultEndedRetention)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, DefaultPurgeInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.NewSender == nil && c.Client != nil {
		c.NewSender = ClientSenders(c.Client)
	}
	return c
}

func (c RelayConfig) validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("Pool is required"))
	}
	if c.NewSender == nil {
		errs = append(errs, errors.New("Client or NewSender is required"))
	}
	for _, e := range c.Entities {
		if err := checkEntity(e); err != nil {
			errs = append(errs, fmt.Errorf("Entities: %w", err))
		}
	}
	for name, v := range map[string]int{"BatchSize": c.BatchSize, "Concurrency": c.Concurrency} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s %d must be at least 1", name, v))
		}
	}
	for name, d := range map[string]time.Duration{"PollInterval": c.PollInterval, "MinBackoff": c.MinBackoff,
		"MaxBackoff": c.MaxBackoff, "SendTimeout": c.SendTimeout, "PurgeInterval": c.PurgeInterval} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be positive", name, d))
		}
	}
	if c.MaxBackoff < c.MinBackoff {
		errs = append(errs, fmt.Errorf("MaxBackoff %s is below MinBackoff %s", c.MaxBackoff, c.MinBackoff))
	}
	if c.EndedRetention < NoPurge {
		errs = append(errs, fmt.Errorf("EndedRetention %s must not be negative (NoPurge switches the purge off)", c.EndedRetention))
	}
	if c.SequenceProperty == c.LastProperty {
		errs = append(errs, fmt.Errorf("SequenceProperty and LastProperty are both %q", c.SequenceProperty))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// RelayStats are a relay's counters since NewRelay, for metrics. None is per session.
type RelayStats struct {
	// Sent counts messages the broker accepted (a message sent again after a crash or a
	// failed commit counts again; duplicate detection on the entity absorbs it).
	Sent int64
	// Batches counts successful sends of a session's claimed messages.
	Batches int64
	// Failures counts failed sends; each paused its session.
	Failures int64
	// PausedSessions is how many sessions of the relay's entities were paused after a
	// failed send (by any relay) at the relay's last scan.
	PausedSessions int64
	// Purged counts messages and sessions the relay's purges forgot.
	Purged int64
	// Scans counts the relay's completed looks for sessions with pending messages.
	Scans int64
	// Listening reports whether the relay listens for notifications now (LISTEN is active);
	// while it does not, it finds new messages by polling only.
	Listening bool
}

// Relay sends the outbox's messages to Service Bus: each session's in sequence order,
// batched per session, several sessions at once; several relays may run on one outbox.
// See the package documentation for how it stays ordered and crash-safe.
type Relay struct {
	cfg      RelayConfig
	entities []string // lower-cased Entities
	log      *slog.Logger
	started  atomic.Bool

	sent, batches, failures, paused, purged, scans atomic.Int64
	listening                                      atomic.Bool

	sendersMu sync.Mutex
	senders   map[string]Sender
}

// NewRelay checks cfg and returns a Relay; nothing runs until Run.
func NewRelay(cfg *RelayConfig) (*Relay, error) {
	if cfg == nil {
		cfg = &RelayConfig{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("outbox relay: RelayConfig: %w", err)
	}
	ents := make([]string, len(c.Entities))
	for i, e := range c.Entities {
		ents[i] = strings.ToLower(e)
	}
	return &Relay{cfg: c, entities: ents, log: c.Logger, senders: map[string]Sender{}}, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Sent:           r.sent.Load(),
		Batches:        r.batches.Load(),
		Failures:       r.failures.Load(),
		PausedSessions: r.paused.Load(),
		Purged:         r.purged.Load(),
		Scans:          r.scans.Load(),
		Listening:      r.listening.Load(),
	}
}

// Run relays until ctx ends, then returns nil once every send in flight has finished
// and the senders are closed. It returns an error at once if the outbox's tables are
// missing; database and broker failures later are logged and retried. Run may be
// called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("outbox relay: Run called twice")
	}
	var ok bool
	if err := r.cfg.Pool.QueryRow(ctx, sqlCheckSchema).Scan(&ok); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return interpretError("relay: checking the schema", err)
	}
	if !ok {
		return errors.New("outbox relay: the outbox tables are missing (is migration 003_outbox applied?)")
	}
	r.log.InfoContext(ctx, "outbox relay: started", slog.Any("entities", r.entities),
		slog.Int("concurrency", r.cfg.Concurrency), slog.Int("batch_size", r.cfg.BatchSize))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(ctx, wake) })
	if r.cfg.EndedRetention != NoPurge {
		wg.Go(func() { r.purgeLoop(ctx) })
	}
	r.dispatch(ctx, wake)
	cancel()
	wg.Wait()
	r.closeSenders()
	r.log.Info("outbox relay: stopped", slog.Int64("sent", r.sent.Load()), slog.Int64("failures", r.failures.Load()))
	return nil
}

// sessionKey names a session as the outbox keys it.
type sessionKey struct{ entity, key string }

// outcome is how a session's turn ended.
type outcome int

const (
	outcomeIdle   outcome = iota // nothing (more) to send now
	outcomeBusy                  // another relay holds the session
	outcomeFailed                // the send failed: the session is paused
	outcomeError                 // a database error: try again later
)

type result struct {
	key     sessionKey
	outcome outcome
}

// maxTurnBatches bounds how many batches one session sends before the relay looks at
// other sessions again.
const maxTurnBatches = 10

// dispatch finds sessions with pending messages and sends up to Concurrency of them at
// once, until ctx ends and the sends in flight are done.
func (r *Relay) dispatch(ctx context.Context, wake <-chan struct{}) {
	inflight := map[sessionKey]bool{}
	skip := map[sessionKey]time.Time{} // sessions to leave alone until then
	results := make(chan result)
	timer := r.cfg.Clock.NewTimer(0)
	defer func() { timer.Stop() }()
	scan, scanFailures := true, 0
	for {
		if scan && len(inflight) < r.cfg.Concurrency && ctx.Err() == nil {
			scan = false
			next := r.cfg.PollInterval
			now := r.cfg.Clock.Now()
			for k, until := range skip {
				if !now.Before(until) {
					delete(skip, k)
				} else {
					next = min(next, until.Sub(now))
				}
			}
			found, due, err := r.scan(ctx, inflight, skip)
			switch {
			case err != nil && ctx.Err() == nil:
				scanFailures++
				next = min(next, r.backoff(scanFailures))
				r.log.WarnContext(ctx, "outbox relay: scan failed", slog.Int("attempts", scanFailures),
					slog.Duration("retry_in", next), slog.Any("error", err))
			case err == nil:
				r.scans.Add(1)
				scanFailures = 0
				if due >= 0 {
					next = min(next, max(due, 10*time.Millisecond))
				}
				// In random order, so that relays scanning the same oldest messages rarely
				// reach for the same sessions.
				rand.Shuffle(len(found), func(i, j int) { found[i], found[j] = found[j], found[i] })
				for _, k := range found {
					if len(inflight) == r.cfg.Concurrency {
						break
					}
					inflight[k] = true
					go func() { results <- r.turn(ctx, k) }()
				}
			}
			timer.Stop()
			timer = r.cfg.Clock.NewTimer(next)
		}
		select {
		case <-ctx.Done():
			for len(inflight) > 0 {
				delete(inflight, (<-results).key)
			}
			return
		case <-wake:
			scan = true
		case <-timer.C():
			scan = true
		case res := <-results:
			delete(inflight, res.key)
			switch res.outcome {
			case outcomeBusy:
				skip[res.key] = r.cfg.Clock.Now().Add(min(time.Second, r.cfg.PollInterval))
			case outcomeError:
				skip[res.key] = r.cfg.Clock.Now().Add(r.cfg.MinBackoff)
			}
			scan = true
		}
	}
}

// scan returns sessions with pending messages that are not paused, in flight or skipped,
// oldest first, and in how long the first paused session is due (-1: none is paused).
func (r *Relay) scan(ctx context.Context, inflight map[sessionKey]bool, skip map[sessionKey]time.Time) ([]sessionKey, time.Duration, error) {
	exEntities := make([]string, 0, len(inflight)+len(skip))
	exKeys := make([]string, 0, len(inflight)+len(skip))
	for k := range inflight {
		exEntities, exKeys = append(exEntities, k.entity), append(exKeys, k.key)
	}
	for k := range skip {
		exEntities, exKeys = append(exEntities, k.entity), append(exKeys, k.key)
	}
	limit := 4 * r.cfg.Concurrency * r.cfg.BatchSize
	rows, err := r.cfg.Pool.Query(ctx, sqlScan, r.entities, exEntities, exKeys, limit)
	if err != nil {
		return nil, 0, interpretError("relay: scan", err)
	}
	var (
		found []sessionKey
		seen  = map[sessionKey]bool{}
		k     sessionKey
	)
	_, err = pgx.ForEachRow(rows, []any{&k.entity, &k.key}, func() error {
		if !seen[k] {
			seen[k] = true
			found = append(found, k)
		}
		return nil
	})
	if err != nil {
		return nil, 0, interpretError("relay: scan", err)
	}
	var (
		n   int64
		due *float64
	)
	if err := r.cfg.Pool.QueryRow(ctx, sqlPausedSummary, r.entities).Scan(&n, &due); err != nil {
		return nil, 0, interpretError("relay: counting paused sessions", err)
	}
	r.paused.Store(n)
	if due == nil {
		return found, -1, nil
	}
	return found, time.Duration(max(*due, 0) * float64(time.Second)), nil
}

// turn sends batches of one session until it has nothing more, fails, or has had
// maxTurnBatches batches.
func (r *Relay) turn(ctx context.Context, k sessionKey) result {
	for range maxTurnBatches {
		out, more := r.sendBatch(ctx, k)
		if !more || out != outcomeIdle || ctx.Err() != nil {
			return result{key: k, outcome: out}
		}
	}
	return result{key: k, outcome: outcomeIdle}
}

// pendingRow is a message as sqlPending reads it.
type pendingRow struct {
	seq         int64
	sessionID   string
	body        []byte
	properties  string
	last        bool
	traceparent string
}

// sendBatch claims the session, sends its first pending messages and records the
// outcome, in one transaction: the session's advisory lock, held until the commit,
// keeps every other relay off the session, and the rows are deleted only once the
// broker has them. more reports that the session may have further messages.
func (r *Relay) sendBatch(ctx context.Context, k sessionKey) (out outcome, more bool) {
	log := r.log.With(slog.String("entity", k.entity), slog.String("session_key", k.key))
	fail := func(what string, err error) (outcome, bool) {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "outbox relay: "+what, slog.Any("error", err))
		}
		return outcomeError, false
	}
	conn, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fail("acquiring a connection", err)
	}
	defer conn.Release()
	// Read committed whatever the database's default: the read after the lock must see
	// what the lock's previous holder committed.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fail("beginning a transaction", err)
	}
	// After a commit this does nothing; otherwise nothing of the turn is kept.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	idle := strconv.FormatInt((r.cfg.SendTimeout + 30*time.Second).Milliseconds(), 10)
	var (
		locked bool
		setTo  string
	)
	if err := tx.QueryRow(ctx, sqlClaim, lockClass, k.entity, k.key, idle).Scan(&locked, &setTo); err != nil {
		return fail("claiming the session", err)
	}
	if !locked {
		return outcomeBusy, false
	}
	rows, err := tx.Query(ctx, sqlPending, k.entity, k.key, r.cfg.BatchSize)
	if err != nil {
		return fail("reading pending messages", err)
	}
	var (
		pending []pendingRow
		p       pendingRow
	)
	if _, err := pgx.ForEachRow(rows, []any{&p.seq, &p.sessionID, &p.body, &p.properties, &p.last, &p.traceparent}, func() error {
		pending = append(pending, p)
		return nil
	}); err != nil {
		return fail("reading pending messages", err)
	}
	if len(pending) == 0 {
		return outcomeIdle, false
	}
	// One SessionId per batch: a session enqueued under several casings of its id (one
	// session at the broker) goes out in several batches.
	full := len(pending) == r.cfg.BatchSize
	for i, p := range pending {
		if p.sessionID != pending[0].sessionID {
			pending, full = pending[:i], true
			break
		}
	}

	sent, sendErr := r.send(ctx, k.entity, pending)

	// From here on the broker has the first sent messages: record that even if ctx ends.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if sent > 0 {
		var n int64
		if err := tx.QueryRow(dctx, sqlMarkSent, k.entity, k.key, pending[sent-1].seq).Scan(&n); err != nil {
			return fail("marking messages sent (they will be sent again)", err)
		}
		if n != int64(sent) {
			log.ErrorContext(ctx, "outbox relay: marked a different number of messages sent than were sent",
				slog.Int("sent", sent), slog.Int64("marked", n))
		}
	}
	out = outcomeIdle
	if sendErr != nil {
		if ctx.Err() != nil && sent == 0 {
			return outcomeIdle, false // stopping: not a failure of the session
		}
		if ctx.Err() == nil {
			if err := r.pause(dctx, tx, k, pending[sent], sendErr); err != nil {
				return fail("pausing the session", err)
			}
			out = outcomeFailed
			// Counted before the pause commits, so that whoever sees the pause recorded (its
			// attempts) sees the failed send counted too.
			r.failures.Add(1)
		}
	}
	if err := tx.Commit(dctx); err != nil {
		return fail("committing the sent messages (they will be sent again)", err)
	}
	if sent > 0 {
		r.sent.Add(int64(sent))
		r.batches.Add(1)
		log.DebugContext(ctx, "outbox relay: sent", slog.Int64("from_sequence", pending[0].seq),
			slog.Int64("to_sequence", pending[sent-1].seq))
	}
	return out, out == outcomeIdle && full
}

// send builds the messages and sends them; it returns how many of the leading ones the
// broker accepted.
func (r *Relay) send(ctx context.Context, entity string, pending []pendingRow) (int, error) {
	msgs := make([]*azservicebus.Message, len(pending))
	for i, p := range pending {
		m, err := r.message(p)
		if err != nil {
			return 0, fmt.Errorf("sequence %d: %w", p.seq, err)
		}
		msgs[i] = m
	}
	s, err := r.sender(ctx, entity)
	if err != nil {
		return 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	defer cancel()
	sent, err := s.SendMessages(sctx, msgs)
	sent = min(max(sent, 0), len(msgs))
	if err != nil && sent < len(msgs) {
		return sent, fmt.Errorf("send from sequence %d: %w", pending[sent].seq, err)
	}
	return len(msgs), nil
}

// message is the Service Bus message of a stored row.
func (r *Relay) message(p pendingRow) (*azservicebus.Message, error) {
	props, err := decodeProperties(p.properties)
	if err != nil {
		return nil, err
	}
	props[r.cfg.SequenceProperty] = p.seq
	if p.last {
		props[r.cfg.LastProperty] = true
	} else {
		delete(props, r.cfg.LastProperty)
	}
	if p.traceparent != "" {
		props[DiagnosticIDProperty] = p.traceparent
	}
	sid, mid := p.sessionID, publisher.MessageID(p.sessionID, p.seq)
	return &azservicebus.Message{Body: p.body, SessionID: &sid, MessageID: &mid, ApplicationProperties: props}, nil
}

// pause records a failed send of the session from row p on: no relay sends the session
// before the backoff has passed.
func (r *Relay) pause(ctx context.Context, tx pgx.Tx, k sessionKey, p pendingRow, sendErr error) error {
	var attempts int
	if err := tx.QueryRow(ctx, sqlPauseAttempts, k.entity, k.key).Scan(&attempts); err != nil {
		return err
	}
	attempts++
	wait := r.backoff(attempts)
	if _, err := tx.Exec(ctx, sqlPause, k.entity, k.key, p.sessionID, attempts, wait.Microseconds(), sendErr.Error()); err != nil {
		return err
	}
	r.log.WarnContext(ctx, "outbox relay: send failed, session paused",
		slog.String("entity", k.entity), slog.String("session_id", p.sessionID), slog.Int64("from_sequence", p.seq),
		slog.Int("attempts", attempts), slog.Duration("retry_in", wait), slog.Any("error", sendErr))
	return nil
}

// backoff is the wait after the given number of consecutive failures: MinBackoff
// doubling up to MaxBackoff, of which a random half is taken off (equal jitter).
func (r *Relay) backoff(attempts int) time.Duration {
	return backoff.Policy{Base: r.cfg.MinBackoff, Max: r.cfg.MaxBackoff, Jitter: 0.5}.Delay(attempts)
}

// sender returns the entity's Sender, opening it on first use.
func (r *Relay) sender(ctx context.Context, entity string) (Sender, error) {
	r.sendersMu.Lock()
	defer r.sendersMu.Unlock()
	if s, ok := r.senders[entity]; ok {
		return s, nil
	}
	s, err := r.cfg.NewSender(ctx, entity)
	if err != nil {
		return nil, err
	}
	r.senders[entity] = s
	return s, nil
}

func (r *Relay) closeSenders() {
	r.sendersMu.Lock()
	defer r.sendersMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for e, s := range r.senders {
		if err := s.Close(ctx); err != nil {
			r.log.Warn("outbox relay: closing sender", slog.String("entity", e), slog.Any("error", err))
		}
		delete(r.senders, e)
	}
}

// listen wakes the dispatcher on every notification for the relay's entities, and
// once after each (re)connection, which may have missed some.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	failures := 0
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, func() { failures = 0; signal() }, signal)
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := r.backoff(failures)
		r.log.WarnContext(ctx, "outbox relay: listening for notifications failed; polling meanwhile",
			slog.Int("attempts", failures), slog.Duration("retry_in", wait), slog.Any("error", err))
		_ = clock.Sleep(ctx, r.cfg.Clock, wait)
	}
}

func (r *Relay) listenOnce(ctx context.Context, listening, signal func()) error {
	conn, err := pgx.ConnectConfig(ctx, r.cfg.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	r.listening.Store(true)
	defer r.listening.Store(false)
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if len(r.entities) == 0 || slices.Contains(r.entities, n.Payload) {
			signal()
		}
	}
}

// purgeLoop purges every PurgeInterval.
func (r *Relay) purgeLoop(ctx context.Context) {
	for clock.Sleep(ctx, r.cfg.Clock, r.cfg.PurgeInterval) == nil {
		res, err := Purge(ctx, r.cfg.Pool, PurgeParams{Retention: r.cfg.EndedRetention})
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.WarnContext(ctx, "outbox relay: purge failed", slog.Any("error", err))
		case err == nil && res != (PurgeResult{}):
			r.purged.Add(res.Messages + res.Sessions)
			r.log.InfoContext(ctx, "outbox relay: purged", slog.Int64("messages", res.Messages),
				slog.Int64("sessions", res.Sessions), slog.Int64("pauses", res.Pauses))
		}
	}
}
