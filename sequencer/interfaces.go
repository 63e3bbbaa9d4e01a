package sequencer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Message is one received message as the engine sees it. Adapters fill every field they know;
// the engine never looks at Raw.
type Message struct {
	// MessageID is the broker message id (may be empty).
	MessageID string
	// SessionID is the session the message belongs to.
	SessionID string
	// BrokerSequence is the broker-assigned sequence number, the key for receive-deferred.
	BrokerSequence int64
	// DeliveryCount is how often the broker has delivered the message.
	DeliveryCount uint32
	// EnqueuedTime is when the broker accepted the message.
	EnqueuedTime time.Time
	// Properties holds the application properties with the types the adapter decoded.
	Properties map[string]any
	// Body is the message payload.
	Body []byte
	// ContentType is the content type set by the publisher, if any.
	ContentType string

	// Sequence is the application sequence, set by the engine once it has parsed the message.
	Sequence int64
	// IsLast reports whether the message ends its session's sequence, set by the engine.
	IsLast bool

	// Raw is the adapter's own representation (for example *azservicebus.ReceivedMessage).
	Raw any
}

// DeadLetterParams are the arguments of Session.DeadLetter.
type DeadLetterParams struct {
	Reason      string
	Description string
}

// Session is a session locked for this process: what every provider must offer (a Service Bus
// session, an SQS FIFO message group, the in-memory fake broker's session). What a provider may
// lack is asked for by the interfaces that embed it: DeferringSession (deferral at the broker),
// HoldingSession (a look at what the broker holds); session state is a StateStore's business
// (the Service Bus store reads it through the session). All methods except ID and LockedUntil
// may block on I/O.
//
// Implementations must be safe for concurrent use: the engine renews the lock in the background
// and, with EngineConfig.MaxPendingSettlements > 1, runs several Complete calls (of different
// messages) at once and alongside Receive, the state store's calls and other settlements.
//
// Settlement methods return ErrLockLost (possibly wrapped) when the session or message lock is
// gone; after that the engine settles nothing more on the session. They return
// ErrSettlementRefused (possibly wrapped) when the broker refused the settlement as busy.
type Session interface {
	// ID returns the session id.
	ID() string
	// LockedUntil returns when the session lock expires unless renewed.
	LockedUntil() time.Time
	// Receive waits for up to max messages. It returns what arrived before ctx ends; an empty
	// slice with a nil error means the session is idle: nothing arrived before ctx ended, or
	// (without Capabilities.SessionLock) nothing more can come to this session.
	Receive(ctx context.Context, max int) ([]*Message, error)
	Complete(ctx context.Context, m *Message) error
	DeadLetter(ctx context.Context, m *Message, p DeadLetterParams) error
	Abandon(ctx context.Context, m *Message) error
	// RenewLock renews the session lock and returns the new expiry.
	RenewLock(ctx context.Context) (time.Time, error)
	// Close releases the session lock. Unsettled messages return to the broker.
	Close(ctx context.Context) error
}

// DeferringSession is a Session whose broker can set a message aside and give it back by its
// broker sequence number (Service Bus deferral). The engine needs it with EarlyDefer, and to
// fetch what was deferred before a switch to EarlyStore; SQS FIFO has no deferral.
type DeferringSession interface {
	Session
	// Defer sets m aside at the broker: it is delivered only by ReceiveDeferred.
	Defer(ctx context.Context, m *Message) error
	// ReceiveDeferred fetches deferred messages of this session by broker sequence number. Numbers
	// that the broker no longer holds are left out of the result without an error.
	ReceiveDeferred(ctx context.Context, brokerSequences []int64) ([]*Message, error)
}

// HoldingSession is a Session that can tell which of its messages the broker still holds without
// receiving them (Service Bus: a peek). The engine asks only while it resolves an inherited run
// record, for entries the broker did not deliver although it delivered a later message: the
// broker keeps a session's messages in order, but a client may get one after a later one (the
// Service Bus SDK releases a message that lands between two receives while a later one may wait
// in the link's buffer, and the broker delivers the released one again after it). Without it the
// engine takes the delivery order for the broker's (see "Recorded runs" in the package
// documentation).
type HoldingSession interface {
	Session
	// Holding returns those of brokerSequences that are active messages of the session at the
	// broker, locked or not, in any order. Messages gone (settled, expired, dead-lettered) or
	// deferred are left out. ErrNoPeek says the broker cannot tell for this entity.
	Holding(ctx context.Context, brokerSequences []int64) ([]int64, error)
}

// Capabilities say what a provider's sessions offer beyond Session: what the provider may lack.
type Capabilities struct {
	// Deferral: its sessions are DeferringSessions (Service Bus; not SQS FIFO).
	Deferral bool
	// Peek: its sessions are HoldingSessions (Service Bus, but for partitioned entities).
	Peek bool
	// SessionState: the broker keeps a state per session that a StateStore may use (Service Bus
	// session state; not SQS FIFO, whose states live in Postgres).
	SessionState bool
	// SessionLock: an accepted session holds its whole group until it is closed, whether or not
	// a message of it is in flight, so its later and abandoned messages come to it (Service Bus
	// session locks). Without it (SQS FIFO, whose lock is the visibility of the messages in
	// flight), a session holds its group only while one of its messages is in flight, and
	// nothing more of the group comes meanwhile: Receive returns what was received for the
	// session and then an empty slice at once, and the group's next messages go to whichever
	// session accepts the group next.
	SessionLock bool
	// CompletionsAtClose is how many completions of a session the provider may keep until the
	// session closes (SQS FIFO deleting them in batches): Complete returns once the message is
	// the session's to complete, and the completion lands at Close. A crash or a lapsed lock
	// before then brings those messages back, so they count in the engine's replay window: a
	// Runner refuses an EngineConfig whose ReplayWindow is below it. 0: every completion
	// lands before Complete returns, or is the session's last and nothing is handled after it.
	CompletionsAtClose int
}

// CapableSource is a SessionSource that says what its sessions offer. A Runner picks the early
// messages' keeper from it when its EngineConfig leaves EarlyMessages unset (EarlyStore where
// the provider cannot defer), and refuses EarlyDefer on a provider that cannot defer. A source
// that does not implement it is taken to offer what its sessions' types say.
type CapableSource interface {
	SessionSource
	Capabilities() Capabilities
}

// SessionSource hands out locked sessions.
type SessionSource interface {
	// AcceptNext locks the next available session. It returns ErrNoSession when none became
	// available before ctx ended.
	AcceptNext(ctx context.Context) (Session, error)
	// Accept locks the named session. It returns ErrSessionLocked when another receiver holds it.
	Accept(ctx context.Context, sessionID string) (Session, error)
}

// Handler processes one message, in application order within its session. A nil error means the
// message is done; any error is retried according to the engine's retry policy.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// CallHandler calls h for m and turns a panic into a *PanicError, so that one bad message cannot
// stop a worker: the engine calls every handler through it and treats a panic as a handler error
// (retried, then the poison policy). Anything else that calls a Handler should do the same.
func CallHandler(ctx context.Context, h Handler, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, m)
}

// PanicError is a handler panic recovered by CallHandler.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack where the panic was recovered.
	Stack []byte
}

// Error says "handler panic: " and the panic value (the engine dead-letters a message whose
// handler kept panicking with this text as the description).
func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// LoadParams are the arguments of StateStore.Load.
type LoadParams struct {
	// Session is the locked session whose state is loaded. Stores keyed by id use Session.ID();
	// the Service Bus store reads the state through the session itself.
	Session Session
}

// SaveParams are the arguments of StateStore.Save.
type SaveParams struct {
	Session Session
	// State is the state to store.
	State *State
	// ExpectedVersion is the version returned by the last Load or Save (0: no stored state yet).
	ExpectedVersion int64
}

// DeleteParams are the arguments of StateStore.Delete.
type DeleteParams struct {
	Session         Session
	ExpectedVersion int64
}

// StateStore keeps one State per session.
type StateStore interface {
	// Load returns the stored state and its version. A session with no stored state returns
	// (NewState(), 0, nil).
	Load(ctx context.Context, p LoadParams) (*State, int64, error)
	// Save stores p.State if the stored version still equals p.ExpectedVersion and returns the new
	// version; otherwise it returns ErrVersionConflict and stores nothing.
	Save(ctx context.Context, p SaveParams) (int64, error)
	// Delete removes the state if the stored version equals p.ExpectedVersion (ErrVersionConflict
	// otherwise). Deleting a missing state is not an error.
	Delete(ctx context.Context, p DeleteParams) error
}

// AtomicStore is a StateStore that can run the handler and the state save in one transaction
// (the Postgres store's transactional mode). The engine calls SaveWith instead of Handle+Save: fn
// runs inside the transaction (with the transaction reachable from the ctx it is given), then the
// state is saved with the version check, then the transaction commits. Either both fn's effects
// and the state advance are committed, or neither is.
type AtomicStore interface {
	StateStore
	SaveWith(ctx context.Context, p SaveParams, fn func(ctx context.Context) error) (int64, error)
}

// SessionBoundStore is implemented by a StateStore whose every read and write goes through the
// locked session itself (the Service Bus session state): once the session lock is lost, each of
// them fails. WritesThroughSession reports whether that holds (a wrapper reports its inner
// store's answer).
//
// A store that is not session-bound (Postgres, memory) lets a holder that lost its lock without
// noticing go on saving, and another holder start from a state the first is about to overwrite.
// For such a store the engine fences: the first handler call of a run follows a save of its own
// (a claim: the version moves, so the earlier holder's next save fails), every handler call
// follows the broker's answers to the completions issued before it (no completion overlaps the
// next message; with Pipelined the entries of a recorded run are bounded by the
// record and the lease instead), and a retry wait ends with a lock renewal. See "Lock tenure" and "Pipelined
// runs" in the package documentation.
type SessionBoundStore interface {
	StateStore
	WritesThroughSession() bool
}

// Errors shared by the engine and its adapters. Adapters wrap their own errors so that errors.Is
// finds these.
var (
	// ErrNoSession: no session became available before the deadline.
	ErrNoSession = errors.New("sequencer: no session available")
	// ErrSessionLocked: the session is locked by another receiver.
	ErrSessionLocked = errors.New("sequencer: session locked by another receiver")
	// ErrLockLost: the session or message lock was lost; stop all work on the session.
	ErrLockLost = errors.New("sequencer: lock lost")
	// ErrVersionConflict: the stored state changed since it was loaded.
	ErrVersionConflict = errors.New("sequencer: state version conflict")
	// ErrNotFound: the entity or session does not exist.
	ErrNotFound = errors.New("sequencer: not found")
	// ErrStateTooLarge: the encoded state does not fit the store's limit.
	ErrStateTooLarge = errors.New("sequencer: state too large for store")
	// ErrSettlementRefused: the broker refused a settlement as busy (a throttled namespace), so
	// the message is not settled. It stays locked with the session until the session is released
	// and is then where it was before: an active message is delivered again, a deferred one stays
	// deferred. The engine goes on with the session (the refusal is not a failure of it) and
	// keeps the message's index entries until a later settlement lands. An adapter that only
	// presumes the refusal (the Service Bus SDK hides it) returns it too: a settlement that in
	// fact landed leaves an index entry whose message the next run does not find, and drops.
	ErrSettlementRefused = errors.New("sequencer: settlement refused as busy")
	// ErrNoPeek: HoldingSession.Holding cannot look at the session's messages here, a definite
	// answer about the entity (a partitioned Service Bus entity refuses the SDK's peek, which
	// lacks the session id), not a failure: the engine goes on as with a Session that is no
	// HoldingSession, taking the delivery order for the broker's.
	ErrNoPeek = errors.New("sequencer: the broker cannot peek this session's messages")
	// ErrNoDeferral: the session cannot defer (it is no DeferringSession); early messages need
	// EarlyStore there.
	ErrNoDeferral = errors.New("sequencer: the provider cannot defer messages")
)
