package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// Config configures an Operator. Sessions, Store and Lister are required, and Entity and Client
// unless DeadLetters is set.
type Config struct {
	// Entity is the session-enabled queue or topic subscription the workers read.
	Entity sbadapter.Entity
	// Client reaches the namespace for what holds no session lock: the dead-letter queue and the
	// sender of replayed copies. Its SDK retries may stay on.
	Client *azservicebus.Client
	// DeadLetters, when set, is the dead-letter queue of a provider without Service Bus's peek
	// (SQS: sqsadapter.DeadLetters); the dead-letter commands use it instead of Client, and
	// Entity and Client are not needed.
	DeadLetters DeadLetterQueue
	// Sessions locks a session by id before its state is changed or its messages are peeked: an
	// sbadapter.Source on a client with the SDK's retries off (sbadapter, "Lock tenure"), like the
	// workers' own.
	Sessions sequencer.SessionSource
	// Store is the workers' state store, and Lister lists it (the postgres store is both; the
	// Service Bus store is listed by a sessionstate.ScanLister).
	Store  sequencer.StateStore
	Lister sessionstate.Lister
	// SequenceProperty and LastProperty name the application properties of the message contract
	// (default "Sequence" and "IsLast", the workers' defaults).
	SequenceProperty string
	LastProperty     string
	// Progress receives a line for the person at the terminal when a command waits, for example
	// for a worker to release a session (default: discard).
	Progress io.Writer
	// Logger records every change the operator makes (default: discard).
	Logger *slog.Logger
	// Clock tells the time of the state changes and paces the waits for a session a worker holds
	// (default clock.Real()).
	Clock clock.Clock
	// AfterReplaySend, when set, runs after each batch of replayed copies was sent and before their
	// dead-lettered originals are completed, with the number of copies sent so far. Tests use it
	// to crash a replay half way.
	AfterReplaySend func(sent int)
}

// Operator lists, inspects, resumes and skips the sessions of one entity and replays its dead
// letters. It changes a session's state only while it holds the session lock, through the
// store's version check. Safe for concurrent use.
type Operator struct {
	cfg Config
	log *slog.Logger
	// queueTurn admits one read of a DeadLetterQueue at a time (a token in the channel): a read
	// receives every dead letter it is offered, so another alongside it would find them in
	// flight and miss them.
	queueTurn chan struct{}
}

// New checks cfg and returns an Operator. It connects to nothing.
func New(cfg Config) (*Operator, error) {
	var errs []error
	if cfg.DeadLetters == nil {
		if err := cfg.Entity.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("operator: Config.Entity: %w", err))
		}
		if cfg.Client == nil {
			errs = append(errs, errors.New("operator: Config.Client is required"))
		}
	}
	if cfg.Sessions == nil || cfg.Store == nil || cfg.Lister == nil {
		errs = append(errs, errors.New("operator: Config.Sessions, Store and Lister are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.SequenceProperty = cmp.Or(cfg.SequenceProperty, contract.SequenceProperty)
	cfg.LastProperty = cmp.Or(cfg.LastProperty, contract.LastProperty)
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	return &Operator{cfg: cfg, log: cfg.Logger, queueTurn: make(chan struct{}, 1)}, nil
}

// Errors of the operations. Each is wrapped with the session or item it is about; the CLI maps
// ErrInvalidInput to a usage error.
var (
	// ErrInvalidInput: an argument is malformed (a session id Service Bus would refuse, a bound
	// below its minimum); nothing was done.
	ErrInvalidInput = errors.New("invalid input")
	// ErrUnknownSession: the store holds no state for the session.
	ErrUnknownSession = errors.New("unknown session")
	// ErrNotParked: resume was asked for a session that is neither parked nor blocked.
	ErrNotParked = errors.New("session is not parked")
	// ErrNotRetrying: retry-now was asked for a session that waits for no released retry.
	ErrNotRetrying = errors.New("session is not waiting for a retry")
	// ErrNothingToSkip: the session is neither parked nor waiting on a gap, and no --to was given.
	ErrNothingToSkip = errors.New("nothing to skip")
	// ErrSessionEnded: the session has ended (its state is a tombstone).
	ErrSessionEnded = errors.New("session has ended")
	// ErrSessionBusy: a worker kept the session locked for the whole wait.
	ErrSessionBusy = errors.New("a worker holds the session")
	// ErrUnsettled: the state is not settled enough for an operator change (a parked message not
	// yet dead-lettered, a run cut short); a worker settles it on its own.
	ErrUnsettled = errors.New("session state not settled")
	// ErrReplayTarget: a subscription's dead letters were to be replayed without a target.
	ErrReplayTarget = errors.New("replay target required")
)

// checkSessionID refuses an id Service Bus would refuse.
func checkSessionID(id string) error {
	if err := publisher.ValidateSessionID(id); err != nil {
		return fmt.Errorf("%w: session id: %w", ErrInvalidInput, err)
	}
	return nil
}

// progress writes one line for the operator.
func (o *Operator) progress(format string, args ...any) {
	_, _ = fmt.Fprintf(o.cfg.Progress, format+"\n", args...)
}

// lockRetry paces the attempts to lock a session a worker holds: soon at first (a worker releases
// a parked or idle session within SEQBUS_SESSION_IDLE_TIMEOUT), then about once a second; the
// jitter keeps a bulk command's concurrent waits from reaching the broker in step.
var lockRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}

// acceptTimeout bounds one attempt to lock a session.
const acceptTimeout = 15 * time.Second

// waitUntil is the deadline of a wait of d from now.
func (o *Operator) waitUntil(d time.Duration) time.Time { return o.cfg.Clock.Now().Add(d) }

// lock locks the session, trying again while another receiver (a worker) holds it until
// deadline has passed (a deadline already past tries once). It tells the operator once that it
// waits.
func (o *Operator) lock(ctx context.Context, id string, deadline time.Time) (sequencer.Session, error) {
	start := o.cfg.Clock.Now()
	told := false
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, acceptTimeout)
		sess, err := o.cfg.Sessions.Accept(actx, id)
		cancel()
		if err == nil {
			return sess, nil
		}
		if !errors.Is(err, sequencer.ErrSessionLocked) {
			return nil, fmt.Errorf("lock session %q: %w", id, err)
		}
		now := o.cfg.Clock.Now()
		left := deadline.Sub(now)
		if left <= 0 {
			return nil, fmt.Errorf("session %q: %w (still after waiting %s); nothing changed: the worker releases it when it idles, stops or parks; try again or wait longer (--wait)",
				id, ErrSessionBusy, now.Sub(start).Round(time.Second))
		}
		if !told {
			o.progress("session %s: a worker holds it; waiting up to %s for its release", id, left.Round(time.Second))
			told = true
		}
		if err := clock.Sleep(ctx, o.cfg.Clock, min(lockRetry.Delay(attempt), left)); err != nil {
			return nil, fmt.Errorf("lock session %q: %w", id, err)
		}
	}
}

// release closes sess, even when ctx has ended.
func release(ctx context.Context, sess sequencer.Session) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = sess.Close(cctx)
}

// conflictAttempts bounds the load-change-save attempts of one change.
const conflictAttempts = 3

// change locks the session, loads its state, lets fn change it and saves it with the version
// check, loading again on a conflict. fn returns an error to change nothing. While fn finds the
// state unsettled (ErrUnsettled: work a worker finishes on its own, such as dead-lettering a
// parked message after a crash), the session is released and tried again until deadline, as
// while a worker holds it. The session is released before change returns; the version saved is
// returned.
func (o *Operator) change(ctx context.Context, id string, deadline time.Time, fn func(st *sequencer.State, version int64) error) (int64, error) {
	for attempt := 1; ; attempt++ {
		v, err := o.changeOnce(ctx, id, deadline, fn)
		if !errors.Is(err, ErrUnsettled) {
			return v, err
		}
		left := deadline.Sub(o.cfg.Clock.Now())
		if left <= 0 {
			return 0, err
		}
		if attempt == 1 {
			o.progress("session %s: its state is not settled yet (a worker finishes it on its own); waiting up to %s", id, left.Round(time.Second))
		}
		if err := clock.Sleep(ctx, o.cfg.Clock, min(lockRetry.Delay(attempt), left)); err != nil {
			return 0, fmt.Errorf("change session %q: %w", id, err)
		}
	}
}

// changeOnce is one lock-load-change-save of change.
func (o *Operator) changeOnce(ctx context.Context, id string, deadline time.Time, fn func(st *sequencer.State, version int64) error) (int64, error) {
	sess, err := o.lock(ctx, id, deadline)
	if err != nil {
		return 0, err
	}
	defer release(ctx, sess)
	for attempt := 1; ; attempt++ {
		st, ver, err := o.cfg.Store.Load(ctx, sequencer.LoadParams{Session: sess})
		if err != nil {
			return 0, fmt.Errorf("load the state of session %q: %w", id, err)
		}
		if ver == 0 {
			return 0, fmt.Errorf("session %q: %w: the store holds no state for it", id, ErrUnknownSession)
		}
		if err := fn(st, ver); err != nil {
			return 0, err
		}
		v, err := o.cfg.Store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: ver})
		if errors.Is(err, sequencer.ErrVersionConflict) && attempt < conflictAttempts {
			o.log.WarnContext(ctx, "operator: state changed meanwhile; loading it again", slog.String("session_id", id))
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("save the state of session %q: %w", id, err)
		}
		return v, nil
	}
}
