package sequencer

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/contract"
)

// PoisonPolicy says what happens to a message whose handler still fails after all retries.
type PoisonPolicy string

const (
	// PoisonPark dead-letters the message (reason HandlerFailed), marks the session parked and
	// defers every later message of the session until an operator resumes or skips (the default).
	PoisonPark PoisonPolicy = "park"
	// PoisonSkip dead-letters the message and advances past it.
	PoisonSkip PoisonPolicy = "skip"
	// PoisonBlock records the block (State.Blocked), abandons the message and releases the
	// session; the broker delivers the message again, and each delivery is retried as any other,
	// until it succeeds or the broker's max delivery count dead-letters it.
	PoisonBlock PoisonPolicy = "block"
)

// GapPolicy says what happens once a missing sequence has been waited for GapTimeout.
type GapPolicy string

const (
	// GapWait keeps waiting (the default): the wait is reported (State.GapSince, the worker's
	// gauges and warnings), nothing is given up.
	GapWait GapPolicy = "wait"
	// GapSkip gives up on the missing sequences and goes on from the lowest waiting one.
	GapSkip GapPolicy = "skip"
	// GapPark parks the session on the missing sequence (State.Parked with no broker sequence):
	// an operator resumes it (the message was found and replayed) or skips it.
	GapPark GapPolicy = "park"
)

// Unsequenced says what happens to a message without the sequence property.
type Unsequenced string

const (
	// UnsequencedDeadLetter dead-letters it as InvalidSequence (the default).
	UnsequencedDeadLetter Unsequenced = "deadletter"
	// UnsequencedPassThrough hands it to the handler at once, without touching the session's
	// state and whatever the ordered messages wait for (a gap, a parked session): for the
	// unordered messages (notifications, metrics) that share a session's pipeline. One that keeps
	// failing is dead-lettered (HandlerFailed), whatever the poison policy, so that it never
	// holds up the ordered ones.
	UnsequencedPassThrough Unsequenced = "passthrough"
)

// Dead-letter reasons set by the engine.
const (
	ReasonInvalidSequence = "InvalidSequence"
	ReasonHandlerFailed   = "HandlerFailed"
)

// RetryPolicy bounds handler retries: attempt n (from 1) waits min(Base·2^(n-1), Cap) before the
// next call, without jitter. Attempts counts handler calls, the first included.
type RetryPolicy struct {
	Attempts int
	Base     time.Duration
	Cap      time.Duration
}

// Backoff returns the wait after the given failed attempt (1-based), computed by package backoff.
// A Cap of zero or less means no wait (WithDefaults raises Cap to at least Base).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	if p.Cap <= 0 {
		return 0
	}
	return backoff.Policy{Base: p.Base, Max: p.Cap}.Delay(attempt)
}

// EngineConfig holds the sequencing policy. Zero fields take the defaults documented on each field;
// use NoWindow and NoTombstone to ask for a real zero.
type EngineConfig struct {
	// SequenceProperty names the application property carrying the sequence (default "Sequence").
	SequenceProperty string
	// LastProperty names the application property marking the last message (default "IsLast").
	LastProperty string
	// WindowMessages bounds how many early messages are held in memory, unsettled, while the
	// session is locked (default 256; NoWindow disables the window). The bound is applied after
	// each receive batch: the messages of one batch are always looked at together.
	WindowMessages int
	// WindowBytes bounds the bodies held in the window (default 8 MiB).
	WindowBytes int
	// ReceiveBatch is the maximum number of messages asked for per receive (default 32).
	ReceiveBatch int
	// DeferredBatch caps the broker sequence numbers per receive-deferred call (default 32).
	DeferredBatch int
	// Retry is the handler retry policy (when entirely zero: 5 attempts, 1s base, 30s cap; a
	// zero Base means no wait between attempts).
	Retry RetryPolicy
	// RetryReleaseAfter, when positive, spends the waits after the first RetryReleaseAfter handler
	// attempts with the session released (default 0: every attempt waits in place, holding the
	// session and its slot). Once that many attempts of the message for Next have failed, the
	// engine records the next attempt's time in the state (State.Retrying), defers the message,
	// and releases the session; the later messages wait behind it, and a sweeper wakes the
	// session when the attempt is due. Retry still counts and spaces every attempt. It must be
	// below Retry.Attempts, and does not go with PoisonBlock (whose last attempt gives the
	// message back to the broker, which a deferred message does not get).
	RetryReleaseAfter int
	// Poison is the policy once retries are exhausted (default PoisonPark).
	Poison PoisonPolicy
	// IdleTimeout is how long a receive waits before the session counts as idle and is released
	// (default 30s). A run of an ended session does not wait for it once its late copies are
	// completed (see "End" in the package documentation).
	IdleTimeout time.Duration
	// GapTimeout, when positive, is how long a missing sequence is waited for, while later
	// messages wait, before GapPolicy acts (default 0: wait forever and report the wait).
	GapTimeout time.Duration
	// GapPolicy is what happens after GapTimeout (default GapWait).
	GapPolicy GapPolicy
	// Unsequenced is what happens to a message without the sequence property (default
	// UnsequencedDeadLetter).
	Unsequenced Unsequenced
	// MaxGap is how far ahead of the next expected sequence a message may be (default 10,000);
	// messages further ahead are dead-lettered as invalid. It also bounds the deferred index,
	// whose encoding takes 2–4 bytes per entry (a store may reject large states with
	// ErrStateTooLarge; the session then fails and is retried later).
	MaxGap int64
	// TombstoneTTL is how long the state of an ended session is kept as a tombstone that makes
	// late copies duplicates (default 24h; NoTombstone deletes the state at once).
	TombstoneTTL time.Duration
	// MaxPendingSettlements bounds how many completions of handled messages may still be in
	// flight while the engine goes on with the next message (default 16). The order per message
	// stays handler → save → complete; only the wait for the broker's answer to the complete
	// overlaps with the next message's handler and save. 1 turns this off: each completion
	// finishes before the next message is handled. Every other settlement (defer, dead-letter,
	// abandon, the completion of a drain's anchor or of a deferred message), the end of a session
	// and its release first wait for the completions in flight.
	MaxPendingSettlements int
	// SaveEachMessage saves the state after every handler call, before the message is completed
	// (handler → save → complete). By default (false) the engine records a run of in-order active
	// messages already in hand in one save (State.InFlight), then handles and completes them one
	// by one, and the next save records the new Next: one state write per run instead of one per
	// message. Either way at most one message is handed to the handler again after a crash
	// (Pipelined widens that); the run relies on the broker delivering a session's messages in
	// order and on nothing but the engine removing them (see the package documentation). Runs
	// are not used with an AtomicStore. With Pipelined the saves run in the background while
	// the handler goes on, each message completed once a save covering it landed (see "One save
	// each, pipelined" in the package documentation): fewer saves than messages, as a save
	// waits for three quarters of MaxPendingSettlements handled messages while more of the batch
	// is in hand.
	SaveEachMessage bool
	// Pipelining says whether a run goes on with the next handler call before the broker has
	// answered for the messages before it (default Pipelined; see "Pipelined runs" in the package
	// documentation). Pipelined completes the entries of a recorded run in the background (up to
	// MaxPendingSettlements at a time), runs the saves of SaveEachMessage in the background,
	// receives the next batch while a run handles one, extends a recorded run over that batch and
	// hands over the tail before the last message without a record of its own: the session is
	// held up by one handler call at a time, not by one broker round trip at a time. The price is
	// the at-least-once window: a crash or a lost lock may hand over again up to
	// MaxPendingSettlements + 1 of the messages handled last, in their order, instead of one.
	// Awaited waits for each answer. No effect on the entries and saves with an AtomicStore or
	// MaxPendingSettlements 1.
	Pipelining Pipelining
	// PipelineLease bounds, with Pipelined, how long a run goes on calling the handler
	// without waiting for its completions in flight after the last call the broker answered,
	// and is how long a run that inherits a record waits before its first handler call, so that
	// a replica whose lock was lost without its knowing (a cut connection) has stopped calling
	// before the replay starts (default 1s; see "Pipelined runs" in the package documentation).
	// Negative turns both off, for tests whose clock moves only when told.
	PipelineLease time.Duration
	// LockRenewInterval is how often the session lock is renewed (default: half of the
	// remaining lock time, at least 100ms; 10s when Session.LockedUntil is zero).
	LockRenewInterval time.Duration
	// EarlyMessages says where an early message waits once the window does not keep it (default
	// EarlyDefer): deferred at the broker, or held in the state store (EarlyStore, which needs a
	// HeldStore and no PoisonBlock). See "Early messages held in the store" in the package
	// documentation.
	EarlyMessages EarlyMessages
	// Held bounds what EarlyStore holds in the store (zero fields: no bound).
	Held HeldLimits
}

// EarlyMessages says where early messages wait outside the window (EngineConfig.EarlyMessages).
type EarlyMessages string

const (
	// EarlyDefer defers an early message at the broker and fetches it back by its broker
	// sequence number when its turn comes (the default; needs a DeferringSession).
	EarlyDefer EarlyMessages = "defer"
	// EarlyStore copies an early message into the state store (a HeldStore), then completes it
	// at the broker, and hands it over from the store when its turn comes: for brokers without
	// deferral (SQS FIFO) and entities where deferral is not safe (partitioned Service Bus).
	EarlyStore EarlyMessages = "store"
)

// HeldLimits bound what EarlyStore holds in the store. When holding the early messages of a
// batch would pass a bound, the engine holds none of them and stops taking messages from the
// session: the run ends (OutcomeHeldFull) and releases the session, and the messages it did not
// hold return to the broker, which keeps them (each such release counts a delivery of them at
// Service Bus). Nothing is lost; the session goes on once its held messages are handed over.
type HeldLimits struct {
	// SessionMessages and SessionBytes bound what one session holds (HeldSize per message).
	SessionMessages int
	SessionBytes    int64
	// TotalBytes bounds what the store holds for the engine's entity, every session together
	// (HeldTotals, read at most once per second).
	TotalBytes int64
}

// Pipelining says whether a run waits for the broker's answers before its next handler call
// (EngineConfig.Pipelining).
type Pipelining string

const (
	// Pipelined: the run goes on while the broker answers, within MaxPendingSettlements and
	// PipelineLease (the default).
	Pipelined Pipelining = "pipelined"
	// Awaited: each completion of a recorded run's entries, and each save of SaveEachMessage, is
	// answered before the next handler call.
	Awaited Pipelining = "awaited"
)

// NoWindow disables the reorder window (EngineConfig.WindowMessages), giving the plain defer flow.
const NoWindow = -1

// NoTombstone deletes the state of an ended session at once (EngineConfig.TombstoneTTL).
const NoTombstone time.Duration = -1

// WithDefaults returns a copy of c with every zero field set to its default.
func (c EngineConfig) WithDefaults() EngineConfig {
	c.SequenceProperty = cmp.Or(c.SequenceProperty, contract.SequenceProperty)
	c.LastProperty = cmp.Or(c.LastProperty, contract.LastProperty)
	c.WindowMessages = cmp.Or(c.WindowMessages, 256)
	c.WindowBytes = cmp.Or(c.WindowBytes, 8<<20)
	c.ReceiveBatch = cmp.Or(c.ReceiveBatch, 32)
	c.DeferredBatch = cmp.Or(c.DeferredBatch, 32)
	if c.Retry == (RetryPolicy{}) {
		c.Retry = RetryPolicy{Attempts: 5, Base: time.Second, Cap: 30 * time.Second}
	}
	c.Retry.Attempts = cmp.Or(c.Retry.Attempts, 1)
	c.Retry.Cap = max(c.Retry.Cap, c.Retry.Base)
	c.Poison = cmp.Or(c.Poison, PoisonPark)
	c.GapPolicy = cmp.Or(c.GapPolicy, GapWait)
	c.Unsequenced = cmp.Or(c.Unsequenced, UnsequencedDeadLetter)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 30*time.Second)
	c.MaxGap = cmp.Or(c.MaxGap, 10_000)
	c.TombstoneTTL = cmp.Or(c.TombstoneTTL, 24*time.Hour)
	c.MaxPendingSettlements = cmp.Or(c.MaxPendingSettlements, 16)
	c.PipelineLease = cmp.Or(c.PipelineLease, time.Second)
	c.Pipelining = cmp.Or(c.Pipelining, Pipelined)
	c.EarlyMessages = cmp.Or(c.EarlyMessages, EarlyDefer)
	return c
}

// Validate reports every invalid field of a configuration with defaults applied, joined in one
// error.
func (c EngineConfig) Validate() error {
	var errs []error
	if c.SequenceProperty == c.LastProperty {
		errs = append(errs, fmt.Errorf("SequenceProperty and LastProperty are both %q", c.SequenceProperty))
	}
	if c.WindowMessages < NoWindow || c.WindowBytes < 0 {
		errs = append(errs, fmt.Errorf("window bounds %d messages, %d bytes must not be negative", c.WindowMessages, c.WindowBytes))
	}
	if c.ReceiveBatch < 1 || c.DeferredBatch < 1 {
		errs = append(errs, fmt.Errorf("ReceiveBatch %d and DeferredBatch %d must be positive", c.ReceiveBatch, c.DeferredBatch))
	}
	if c.Retry.Attempts < 1 || c.Retry.Base < 0 {
		errs = append(errs, fmt.Errorf("Retry: %d attempts, base %s: need at least one attempt and a base ≥ 0", c.Retry.Attempts, c.Retry.Base))
	}
	switch c.Poison {
	case PoisonPark, PoisonSkip, PoisonBlock:
	default:
		errs = append(errs, fmt.Errorf("Poison %q: want park, skip or block", c.Poison))
	}
	switch {
	case c.RetryReleaseAfter < 0:
		errs = append(errs, fmt.Errorf("RetryReleaseAfter %d must not be negative", c.RetryReleaseAfter))
	case c.RetryReleaseAfter > 0 && c.RetryReleaseAfter >= c.Retry.Attempts:
		errs = append(errs, fmt.Errorf("RetryReleaseAfter %d must be below Retry.Attempts %d", c.RetryReleaseAfter, c.Retry.Attempts))
	case c.RetryReleaseAfter > 0 && c.Poison == PoisonBlock:
		errs = append(errs, errors.New("RetryReleaseAfter does not go with PoisonBlock"))
	}
	switch c.GapPolicy {
	case GapWait, GapSkip, GapPark:
	default:
		errs = append(errs, fmt.Errorf("GapPolicy %q: want wait, skip or park", c.GapPolicy))
	}
	switch c.Pipelining {
	case Pipelined, Awaited:
	default:
		errs = append(errs, fmt.Errorf("Pipelining %q: want pipelined or awaited", c.Pipelining))
	}
	switch c.EarlyMessages {
	case EarlyDefer:
	case EarlyStore:
		if c.Poison == PoisonBlock {
			// PoisonBlock gives the failing message back to the broker; a held one has left it.
			errs = append(errs, errors.New("EarlyMessages store does not go with PoisonBlock"))
		}
	default:
		errs = append(errs, fmt.Errorf("EarlyMessages %q: want defer or store", c.EarlyMessages))
	}
	if c.Held.SessionMessages < 0 || c.Held.SessionBytes < 0 || c.Held.TotalBytes < 0 {
		errs = append(errs, errors.New("Held limits must not be negative"))
	}
	switch c.Unsequenced {
	case UnsequencedDeadLetter, UnsequencedPassThrough:
	default:
		errs = append(errs, fmt.Errorf("Unsequenced %q: want deadletter or passthrough", c.Unsequenced))
	}
	if c.IdleTimeout < 0 || c.GapTimeout < 0 || c.LockRenewInterval < 0 {
		errs = append(errs, errors.New("IdleTimeout, GapTimeout and LockRenewInterval must not be negative"))
	}
	if c.MaxGap < 1 {
		errs = append(errs, fmt.Errorf("MaxGap %d must be positive", c.MaxGap))
	}
	if c.MaxPendingSettlements < 1 {
		errs = append(errs, fmt.Errorf("MaxPendingSettlements %d must be positive", c.MaxPendingSettlements))
	}
	if c.TombstoneTTL < NoTombstone {
		errs = append(errs, fmt.Errorf("TombstoneTTL %s must not be negative", c.TombstoneTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sequencer: invalid engine config: %w", err)
	}
	return nil
}

// ReplayWindow is the at-least-once window this configuration promises: after a crash, a lost
// lock or a failed settlement, at most this many of the messages handled last are handed to the
// handler again, in their order (1, or MaxPendingSettlements + 1 with Pipelined; see Crash
// consistency in the package documentation). It is a bound: an AtomicStore, which runs no
// recorded runs, keeps the window at 1.
func (c EngineConfig) ReplayWindow() int {
	d := c.WithDefaults()
	if d.Pipelining != Pipelined || d.MaxPendingSettlements <= 1 {
		return 1
	}
	return d.MaxPendingSettlements + 1
}

func (c EngineConfig) windowMessages() int         { return max(c.WindowMessages, 0) }
func (c EngineConfig) tombstoneTTL() time.Duration { return max(c.TombstoneTTL, 0) }
