package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
)

// sessionReceiver is the part of *azservicebus.SessionReceiver the adapter uses, so tests can
// replace it.
type sessionReceiver interface {
	SessionID() string
	LockedUntil() time.Time
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	ReceiveDeferredMessages(ctx context.Context, sequenceNumbers []int64, options *azservicebus.ReceiveDeferredMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
	DeferMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.DeferMessageOptions) error
	DeadLetterMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.DeadLetterOptions) error
	RenewSessionLock(ctx context.Context, options *azservicebus.RenewSessionLockOptions) error
	GetSessionState(ctx context.Context, options *azservicebus.GetSessionStateOptions) ([]byte, error)
	SetSessionState(ctx context.Context, state []byte, options *azservicebus.SetSessionStateOptions) error
	PeekMessages(ctx context.Context, maxMessageCount int, options *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	Close(ctx context.Context) error
}

var _ sessionReceiver = (*azservicebus.SessionReceiver)(nil)

var _ sequencer.HoldingSession = (*Session)(nil)

// Session is a Service Bus session locked by this process. It implements sequencer.Session and
// the GetState/SetState pair the Service Bus state store uses.
type Session struct {
	r      sessionReceiver
	id     string
	logger *slog.Logger
	// noPeek: the entity is partitioned (Source.MarkPartitioned): Holding answers ErrNoPeek.
	noPeek bool

	// settleTimeout bounds one settlement attempt (Config.SettleTimeout).
	settleTimeout time.Duration
	// limit paces the calls of the source's sessions (Config.Limiter; nil: no pacing).
	limit *Limiter
	// receive is passed to each receive (Config.ReceiveWait; nil: the SDK's defaults).
	receive *azservicebus.ReceiveMessagesOptions
	// settleRefusals counts the settlements the SDK logged as refused as busy (the process's
	// count, sdklog.go; tests give a session one of its own).
	settleRefusals *atomic.Uint64
	// busy is how calls refused with server-busy are retried (Config.BusyRetry).
	busy         backoff.Policy
	busyAttempts int

	// lockDuration is the entity's lock duration as seen at accept (LockedUntil minus the time
	// the accept returned), used to compute the expiry after a renewal.
	lockDuration time.Duration

	mu sync.Mutex
	// settled holds the lock tokens of messages settled through this session. The SDK treats a
	// second settlement of the same delivery as a silent no-op; the contract wants ErrLockLost.
	settled map[[16]byte]struct{}
	// lost is set by the first call that showed the session lock gone (lock lost, link or
	// connection failure): every later call fails without reaching the SDK, whose next call
	// would otherwise lock the session again, silently, for a holder whose view may be stale.
	lost error
	// lockedUntil is the session lock's expiry. The SDK's SessionReceiver.LockedUntil is not safe
	// to call while another call on the receiver runs (the SDK rewrites the field unguarded when
	// it recovers the link), and the engine asks for it from its lock-renewal goroutine while
	// receiving and settling; so the SDK value is read once, at accept, and kept here.
	lockedUntil time.Time
	// stateVersion is the state version the Service Bus state store last read or wrote through
	// this session (stateKnown false: none); see KnownStateVersion.
	stateVersion int64
	stateKnown   bool

	// watches watches the settlements in flight (settlewatch.go).
	watches settleWatches
}

// errAlreadySettled is wrapped with sequencer.ErrLockLost when a message is settled twice.
var errAlreadySettled = errors.New("message already settled through this session")

var _ sequencer.Session = (*Session)(nil)

// newSession wraps a receiver that was just accepted: nothing else may be using it yet.
func newSession(r sessionReceiver, logger *slog.Logger) *Session {
	until := r.LockedUntil()
	return &Session{
		r: r, id: r.SessionID(), logger: logger, settled: map[[16]byte]struct{}{},
		lockedUntil: until, lockDuration: time.Until(until), settleTimeout: DefaultSettleTimeout,
		busy: DefaultBusyRetry, busyAttempts: DefaultBusyAttempts, settleRefusals: &sdkLog.settleRefusals,
	}
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// LockedUntil returns when the session lock expires unless renewed.
func (s *Session) LockedUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lockedUntil
}

// Receive waits for up to max messages. When ctx ends before anything arrived it returns an empty
// slice and a nil error.
func (s *Session) Receive(ctx context.Context, max int) ([]*sequencer.Message, error) {
	if max <= 0 {
		max = 1
	}
	if err := s.usable("receive"); err != nil {
		return nil, err
	}
	msgs, err := s.r.ReceiveMessages(ctx, max, s.receive)
	s.limit.Charge(float64(len(msgs))) // each delivery costs the namespace a credit
	if err != nil {
		if ctx.Err() != nil && len(msgs) == 0 {
			return []*sequencer.Message{}, nil
		}
		return nil, s.mapErr("receive", err)
	}
	if len(msgs) == 0 && ctx.Err() == nil {
		// The SDK returns nothing and no error before ctx ends only when the link or connection
		// failed (it recovers them on the next call). A session link that went down released
		// the session lock at the broker: another receiver may have taken the session, and the
		// SDK may silently re-lock it later. Carrying on would save and settle on a lock we lost.
		return nil, s.markLost(fmt.Errorf("receive session %q: the link failed and its session lock went with it: %w", s.id, sequencer.ErrLockLost))
	}
	return s.convert(msgs), nil
}

// ReceiveDeferred fetches deferred messages by broker sequence number. A number is left out
// only when the broker answers not found for it and a peek confirms that the session holds no
// message at that number; any other failure is returned, naming the session and the broker's
// answer, and counted (DeferredFetchFailures).
func (s *Session) ReceiveDeferred(ctx context.Context, brokerSequences []int64) ([]*sequencer.Message, error) {
	if len(brokerSequences) == 0 {
		return []*sequencer.Message{}, nil
	}
	msgs, err := s.fetchDeferred(ctx, brokerSequences)
	switch {
	case err == nil:
		return s.convert(msgs), nil
	case isNotFound(err):
		return s.receiveDeferredOneByOne(ctx, brokerSequences)
	}
	return nil, deferredFetchFailed(ctx, s.mapErr("receive deferred", err))
}

// Complete removes m from the broker. Like every settlement it is bounded by
// Config.SettleTimeout; a settlement the broker does not answer in time, or one that fails
// because the link went down, reports sequencer.ErrLockLost.
func (s *Session) Complete(ctx context.Context, m *sequencer.Message) error {
	return s.settle(ctx, "complete", m, func(ctx context.Context, rm *azservicebus.ReceivedMessage) error {
		return s.r.CompleteMessage(ctx, rm, nil)
	})
}

// Defer sets m aside at the broker; it comes back only through ReceiveDeferred.
func (s *Session) Defer(ctx context.Context, m *sequencer.Message) error {
	return s.settle(ctx, "defer", m, func(ctx context.Context, rm *azservicebus.ReceivedMessage) error {
		return s.r.DeferMessage(ctx, rm, nil)
	})
}

// DeadLetter moves m to the dead-letter sub-queue with a reason and description.
func (s *Session) DeadLetter(ctx context.Context, m *sequencer.Message, p sequencer.DeadLetterParams) error {
	opts := &azservicebus.DeadLetterOptions{}
	if p.Reason != "" {
		opts.Reason = &p.Reason
	}
	if p.Description != "" {
		opts.ErrorDescription = &p.Description
	}
	return s.settle(ctx, "dead-letter", m, func(ctx context.Context, rm *azservicebus.ReceivedMessage) error {
		return s.r.DeadLetterMessage(ctx, rm, opts)
	})
}

// Abandon releases m's lock; the broker delivers it again (with a higher delivery count).
func (s *Session) Abandon(ctx context.Context, m *sequencer.Message) error {
	return s.settle(ctx, "abandon", m, func(ctx context.Context, rm *azservicebus.ReceivedMessage) error {
		return s.r.AbandonMessage(ctx, rm, nil)
	})
}

// settle runs one settlement of m within settleTimeout, refusing a second settlement of the
// same delivery.
//
// The SDK retries a failed settlement with its default backoff (about 45s in all), whatever the
// client's retry options. A settlement that fails because the link or connection went down can
// never succeed on a session: the lock went with the link. So a settlement that outlives
// settleTimeout while the caller's ctx is still alive reports ErrLockLost, and the engine stops
// working on the session instead of holding it for the SDK's retries.
//
// It runs for every message, on the engine's completion goroutines: what is rare (a refusal, a
// failure, its log line and error text) is kept out of line, so that the frames on the way to
// the SDK stay small and those goroutines' stacks do not grow.
func (s *Session) settle(ctx context.Context, what string, m *sequencer.Message, fn func(context.Context, *azservicebus.ReceivedMessage) error) error {
	rm, err := raw(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	_, done := s.settled[rm.LockToken]
	s.mu.Unlock()
	if done {
		return s.alreadySettled(what, m)
	}
	var timedOut, refused bool
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		err, timedOut, refused = s.settleOnce(ctx, what, rm, fn)
		return err
	})
	if err != nil {
		return s.settleFailed(what, m, err, timedOut)
	}
	// Refused or not, the SDK counts the delivery settled: it sends nothing more for it.
	s.mu.Lock()
	s.settled[rm.LockToken] = struct{}{}
	s.mu.Unlock()
	if refused {
		return s.refusedErr(what, m)
	}
	return nil
}

// settleOnce makes one attempt of a settlement under its watch (settlewatch.go). refused says
// the broker refused it as busy (err is nil then: the SDK will not send it again); timedOut says
// the watch's settleTimeout ended it.
func (s *Session) settleOnce(ctx context.Context, what string, rm *azservicebus.ReceivedMessage, fn func(context.Context, *azservicebus.ReceivedMessage) error) (err error, timedOut, refused bool) {
	sctx, slot := s.watchSettlement(ctx)
	defer s.watches.remove(slot)
	start := time.Now()
	err = fn(sctx, rm)
	if err == nil {
		if time.Since(start) >= refusedSettlementHint {
			// The SDK hides a settlement the broker refused as busy: it waits its fixed retry
			// delay and then reports success (see refusedSettlementHint). Tell the limiter.
			s.noteRefused(ctx, what, "sbadapter: settlement refused as busy, hidden by the SDK", start)
			return nil, false, true
		}
		return nil, false, false
	}
	if ctx.Err() != nil {
		return err, false, false
	}
	cause := context.Cause(sctx)
	if errors.Is(cause, errSettleRefused) {
		// Presumed refused: the SDK would report it settled after its retry delay anyway
		// without sending it again (see refusedSettlementHint), so say so now rather than
		// stall the session.
		s.noteRefused(ctx, what, "sbadapter: settlement presumed refused as busy", start)
		return nil, false, true
	}
	return err, errors.Is(cause, errSettleTimeout), false
}

// refusedErr is the error of a settlement refused (or presumed refused) as busy.
//
//go:noinline
func (s *Session) refusedErr(what string, m *sequencer.Message) error {
	return fmt.Errorf("%s session %q broker sequence %d: %w", what, s.id, m.BrokerSequence, sequencer.ErrSettlementRefused)
}

// noteRefused tells the limiter of a settlement refused as busy and logs it (msg) at debug level.
//
//go:noinline
func (s *Session) noteRefused(ctx context.Context, what, msg string, start time.Time) {
	s.limit.Busy()
	s.logger.DebugContext(ctx, msg, slog.String("session_id", s.id), slog.String("settlement", what),
		slog.Duration("took", time.Since(start)))
}

// alreadySettled is the error of a second settlement of the same delivery.
//
//go:noinline
func (s *Session) alreadySettled(what string, m *sequencer.Message) error {
	return fmt.Errorf("%s session %q broker sequence %d: %w: %w", what, s.id, m.BrokerSequence, sequencer.ErrLockLost, errAlreadySettled)
}

// settleFailed is the error of a failed settlement: a lost lock when it timed out (the link is
// presumably gone), otherwise err mapped.
//
//go:noinline
func (s *Session) settleFailed(what string, m *sequencer.Message, err error, timedOut bool) error {
	if timedOut {
		return s.markLost(fmt.Errorf("%s session %q broker sequence %d: no answer within %s, the link is presumably gone: %w: %w",
			what, s.id, m.BrokerSequence, s.settleTimeout, sequencer.ErrLockLost, err))
	}
	return s.mapMsgErr(what, m, err)
}

// refusedSettlementHint is how long a successful settlement must have taken to count as one the
// broker refused as busy. The SDK (azservicebus v1.11.0) settles through links.Retry with
// RetryOptions{} whatever the client's options (messageSettler.go:39-45), so a refused
// disposition is retried after the default first delay of 4 s ± 20 % (internal/utils/retrier.go:
// 100-116, calcDelay); go-amqp treats a rejected disposition as settled (receiver.go:795-809,
// message.go:315-316), so that retry sends nothing and returns nil (receiver.go:324-326). The
// message stays locked with the session until it is closed, and is delivered again then. No
// settlement that was answered takes 3 s otherwise; one that was not answered ends in
// Config.SettleTimeout.
const refusedSettlementHint = 3 * time.Second

// RenewLock renews the session lock and returns the new expiry: the lock duration from the
// moment the renewal was sent, which is never later than the broker's own expiry.
func (s *Session) RenewLock(ctx context.Context) (time.Time, error) {
	start := time.Now()
	if err := s.call(ctx, func(ctx context.Context) error { return s.r.RenewSessionLock(ctx, nil) }); err != nil {
		return time.Time{}, s.mapErr("renew session lock", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lockDuration > 0 {
		s.lockedUntil = start.Add(s.lockDuration)
	}
	return s.lockedUntil, nil
}

// GetState returns the session state stored at the broker (nil when none).
func (s *Session) GetState(ctx context.Context) ([]byte, error) {
	var b []byte
	err := s.call(ctx, func(ctx context.Context) (err error) {
		b, err = s.r.GetSessionState(ctx, nil)
		return err
	})
	if err != nil {
		return nil, s.mapErr("get session state", err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	return b, nil
}

// SetState stores the session state at the broker; nil or empty clears it.
func (s *Session) SetState(ctx context.Context, state []byte) error {
	return s.mapErr("set session state", s.call(ctx, func(ctx context.Context) error {
		return s.r.SetSessionState(ctx, state, nil)
	}))
}

// KnownStateVersion returns the state version the Service Bus state store noted last through
// this session (sessionstate/servicebus.VersionKeeper). A Session never regains a lock it lost
// (see "Lock tenure" in the package documentation), so while it holds its lock nobody else
// writes the state and the store need not read the version again before each write.
func (s *Session) KnownStateVersion() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateVersion, s.stateKnown
}

// NoteStateVersion records the stored state version for KnownStateVersion; ok false forgets it.
func (s *Session) NoteStateVersion(v int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stateVersion, s.stateKnown = v, ok
}

// Peek returns up to max of the session's messages at the broker whose broker sequence number is
// at least from, without locking or settling them: active, deferred and scheduled ones
// (ReceivedMessage.State tells them apart). Operator tools use it to show a session; the engine
// peeks through Holding.
func (s *Session) Peek(ctx context.Context, from int64, max int) ([]*azservicebus.ReceivedMessage, error) {
	if s.noPeek {
		return nil, fmt.Errorf("sbadapter: session %s: the entity is partitioned: %w", s.id, sequencer.ErrNoPeek)
	}
	var msgs []*azservicebus.ReceivedMessage
	err := s.call(ctx, func(ctx context.Context) (err error) {
		msgs, err = s.r.PeekMessages(ctx, max, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		return err
	})
	if err != nil {
		return nil, s.mapErr("peek", err)
	}
	return msgs, nil
}

// holdingPage is how many messages one peek of Holding asks for: the numbers asked about are a
// run's entries, so one page covers them but for messages of the session deferred between them.
const holdingPage = 64

// Holding implements sequencer.HoldingSession: it peeks the session from the lowest of
// brokerSequences on, page by page, until past the highest, and returns those it finds active
// (a message this receiver holds locked is active too).
func (s *Session) Holding(ctx context.Context, brokerSequences []int64) ([]int64, error) {
	if len(brokerSequences) == 0 {
		return nil, nil
	}
	want := slices.Sorted(slices.Values(brokerSequences))
	from, last := want[0], want[len(want)-1]
	var held []int64
	for from <= last {
		msgs, err := s.Peek(ctx, from, holdingPage)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.SequenceNumber == nil {
				return nil, fmt.Errorf("sbadapter: session %s: peek: a message without a sequence number", s.id)
			}
			bs := *m.SequenceNumber
			if _, ok := slices.BinarySearch(want, bs); ok && m.State == azservicebus.MessageStateActive {
				held = append(held, bs)
			}
			from = max(from, bs+1)
		}
		if len(msgs) < holdingPage {
			break
		}
	}
	return held, nil
}

// Close releases the session lock. Closing twice is not an error, nor is closing a session
// whose lock is already known lost (its link is gone; closing only frees the receiver).
func (s *Session) Close(ctx context.Context) error {
	err := s.r.Close(ctx)
	if err == nil || s.usable("close") != nil {
		return nil
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeClosed {
		return nil
	}
	return s.mapErr("close", err)
}

func (s *Session) mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return s.noteErr(mapError(opSession, fmt.Sprintf("%s session %q", what, s.id), err))
}

func (s *Session) mapMsgErr(what string, m *sequencer.Message, err error) error {
	if err == nil {
		return nil
	}
	return s.noteErr(mapError(opSession, fmt.Sprintf("%s session %q broker sequence %d", what, s.id, m.BrokerSequence), err))
}

// noteErr marks the session lost when err shows the lock is gone, and returns err.
func (s *Session) noteErr(err error) error {
	if errors.Is(err, errLostEarlier) {
		return err
	}
	if c := Classify(err); c == ClassLockLost || c == ClassReconnect {
		s.markLost(err)
	}
	return err
}

// markLost records that the session lock is gone and returns err.
func (s *Session) markLost(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = err
	}
	return err
}

// errLostEarlier is wrapped (with sequencer.ErrLockLost) by calls refused because an earlier
// call showed the lock gone.
var errLostEarlier = errors.New("the session lock was lost earlier; no call reaches the broker on it any more")

// usable refuses a call once the session is known lost: the SDK would lock the session again
// on a new link, silently, and the caller's view of the session may no longer be true.
func (s *Session) usable(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		return nil
	}
	return fmt.Errorf("%s session %q: %w: %w (first failure: %v)", what, s.id, sequencer.ErrLockLost, errLostEarlier, s.lost)
}

// logBusy logs a call refused as busy, out of line (see settle).
//
//go:noinline
func (s *Session) logBusy(ctx context.Context, attempt int) {
	s.logger.DebugContext(ctx, "sbadapter: call refused as busy", slog.String("session_id", s.id), slog.Int("attempt", attempt))
}

// call runs one SDK call on the session: refused once the session is lost, retried while the
// broker answers server-busy (nothing was done; the link is intact, so a retry cannot re-lock
// the session), within ctx.
func (s *Session) call(ctx context.Context, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		if err := s.usable("use"); err != nil {
			return err
		}
		if err := s.limit.Wait(ctx, 1); err != nil {
			return err
		}
		err := fn(ctx)
		s.limit.Observe(err)
		if err == nil {
			return nil
		}
		if !IsServerBusy(err) {
			return err
		}
		s.logBusy(ctx, attempt)
		if attempt >= s.busyAttempts {
			return err
		}
		if clock.Sleep(ctx, clock.Real(), s.busy.Delay(attempt)) != nil {
			return err
		}
	}
}

func (s *Session) convert(msgs []*azservicebus.ReceivedMessage) []*sequencer.Message {
	out := make([]*sequencer.Message, 0, len(msgs))
	for _, rm := range msgs {
		m := ToMessage(rm)
		if m.SessionID == "" {
			m.SessionID = s.id
		}
		out = append(out, m)
	}
	return out
}

func raw(m *sequencer.Message) (*azservicebus.ReceivedMessage, error) {
	if m == nil {
		return nil, errors.New("sbadapter: nil message")
	}
	rm, ok := m.Raw.(*azservicebus.ReceivedMessage)
	if !ok || rm == nil {
		return nil, fmt.Errorf("sbadapter: message %q was not received through this adapter (Raw is %T)", m.MessageID, m.Raw)
	}
	return rm, nil
}

// ToMessage converts an SDK message into the sequencer's view of it. Raw keeps rm for settlement.
func ToMessage(rm *azservicebus.ReceivedMessage) *sequencer.Message {
	m := &sequencer.Message{
		MessageID:     rm.MessageID,
		DeliveryCount: rm.DeliveryCount,
		Properties:    rm.ApplicationProperties,
		Body:          rm.Body,
		Raw:           rm,
	}
	if rm.SessionID != nil {
		m.SessionID = *rm.SessionID
	}
	if rm.SequenceNumber != nil {
		m.BrokerSequence = *rm.SequenceNumber
	}
	if rm.EnqueuedTime != nil {
		m.EnqueuedTime = *rm.EnqueuedTime
	}
	if rm.ContentType != nil {
		m.ContentType = *rm.ContentType
	}
	if m.Properties == nil {
		m.Properties = map[string]any{}
	}
	return m
}
