package sbadapter

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/sequencer"
)

// Errors of the adapter that the sequencer contract has no sentinel for. Mapped errors wrap them
// (or a sequencer sentinel) together with the SDK error.
var (
	// ErrUnauthorized: the credentials are missing, wrong or lack the rights for the entity.
	ErrUnauthorized = errors.New("sbadapter: unauthorized")
	// ErrConnectionLost: the connection or link failed and the SDK's retries ran out.
	ErrConnectionLost = errors.New("sbadapter: connection lost")
	// ErrClosed: the client or receiver was closed.
	ErrClosed = errors.New("sbadapter: closed")
	// ErrNotAllowed: the broker refused the operation (for example sessions on an entity that
	// does not require them).
	ErrNotAllowed = errors.New("sbadapter: operation not allowed")
	// ErrTransient: a temporary broker condition (timeout, busy) that a retry may clear.
	ErrTransient = errors.New("sbadapter: transient broker error")
)

// Class is how a caller should recover from an error.
type Class int

const (
	// ClassNone: no error.
	ClassNone Class = iota
	// ClassCanceled: the caller's context ended; not a failure of the broker.
	ClassCanceled
	// ClassRetry: try the same operation again later.
	ClassRetry
	// ClassLockLost: the session or message lock is gone; stop all work on the session.
	ClassLockLost
	// ClassReconnect: the connection is broken; the SDK recovers it on the next call, so callers
	// back off and retry.
	ClassReconnect
	// ClassFatal: configuration or permission problem that retries cannot fix.
	ClassFatal
)

func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassCanceled:
		return "canceled"
	case ClassRetry:
		return "retry"
	case ClassLockLost:
		return "lock-lost"
	case ClassReconnect:
		return "reconnect"
	case ClassFatal:
		return "fatal"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// op is the kind of call that failed: a few SDK codes mean different things for different calls.
type op uint8

const (
	opAny op = iota
	opAcceptNext
	opAccept
	opSession // any call on an accepted session
	opList
)

// AMQP conditions the SDK returns without an azservicebus.Code.
const (
	condSessionCannotBeLocked = amqp.ErrCond("com.microsoft:session-cannot-be-locked")
	condSessionLockLost       = amqp.ErrCond("com.microsoft:session-lock-lost")
	condMessageLockLost       = amqp.ErrCond("com.microsoft:message-lock-lost")
	condTimeout               = amqp.ErrCond("com.microsoft:timeout")
	condServerBusy            = amqp.ErrCond("com.microsoft:server-busy")
	condEntityDisabled        = amqp.ErrCond("com.microsoft:entity-disabled")
)

type errorRule struct {
	name     string
	match    func(error) bool
	op       op // opAny matches every op
	class    Class
	sentinel error // nil: keep only the original error
}

func sdkCode(code azservicebus.Code) func(error) bool {
	return func(err error) bool {
		var sbErr *azservicebus.Error
		return errors.As(err, &sbErr) && sbErr.Code == code
	}
}

func amqpCond(conds ...amqp.ErrCond) func(error) bool {
	return func(err error) bool {
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) {
			return false
		}
		for _, c := range conds {
			if amqpErr.Condition == c {
				return true
			}
		}
		return false
	}
}

// amqpFailure matches go-amqp's link, session and connection failures (the SDK usually wraps them
// as CodeConnectionLost).
func amqpFailure(err error) bool {
	var le *amqp.LinkError
	var se *amqp.SessionError
	var ce *amqp.ConnError
	return errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &ce)
}

func ctxEnded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// errorRules is the single table that sorts SDK failures. Rules are tried in order; the first
// match wins, so more specific rules (an op-scoped code, an AMQP condition) come first.
var errorRules = []errorRule{
	// Accept-next: the broker had no session before the wait ended.
	{"accept-next timeout", sdkCode(azservicebus.CodeTimeout), opAcceptNext, ClassRetry, sequencer.ErrNoSession},
	{"accept-next ctx ended", ctxEnded, opAcceptNext, ClassRetry, sequencer.ErrNoSession},
	{"accept-next timeout condition", amqpCond(condTimeout), opAcceptNext, ClassRetry, sequencer.ErrNoSession},
	{"ctx ended", ctxEnded, opAny, ClassCanceled, nil},
	// On an accepted session the SDK re-attaches after a lost lock; if another receiver took the
	// session meanwhile, that re-attach fails this way: our lock is gone.
	{"session taken after lock loss", amqpCond(condSessionCannotBeLocked), opSession, ClassLockLost, sequencer.ErrLockLost},
	{"session locked elsewhere", amqpCond(condSessionCannotBeLocked), opAny, ClassRetry, sequencer.ErrSessionLocked},
	{"lock lost", sdkCode(azservicebus.CodeLockLost), opAny, ClassLockLost, sequencer.ErrLockLost},
	{"lock lost condition", amqpCond(condSessionLockLost, condMessageLockLost), opAny, ClassLockLost, sequencer.ErrLockLost},
	// A closed session receiver no longer holds its session.
	{"session closed", sdkCode(azservicebus.CodeClosed), opSession, ClassLockLost, sequencer.ErrLockLost},
	{"closed", sdkCode(azservicebus.CodeClosed), opAny, ClassFatal, ErrClosed},
	{"not found", sdkCode(azservicebus.CodeNotFound), opAny, ClassFatal, sequencer.ErrNotFound},
	{"not found condition", amqpCond(amqp.ErrCondNotFound), opAny, ClassFatal, sequencer.ErrNotFound},
	{"unauthorized", sdkCode(azservicebus.CodeUnauthorizedAccess), opAny, ClassFatal, ErrUnauthorized},
	{"unauthorized condition", amqpCond(amqp.ErrCondUnauthorizedAccess), opAny, ClassFatal, ErrUnauthorized},
	{"not allowed", amqpCond(amqp.ErrCondNotAllowed, condEntityDisabled), opAny, ClassFatal, ErrNotAllowed},
	// A session link that went down took the session lock with it (the broker releases the
	// session at once); what was received on it can no longer be settled, even though the SDK
	// may re-lock the session on a new link.
	{"session connection lost", sdkCode(azservicebus.CodeConnectionLost), opSession, ClassLockLost, sequencer.ErrLockLost},
	{"session link, session or connection failed", amqpFailure, opSession, ClassLockLost, sequencer.ErrLockLost},
	{"connection lost", sdkCode(azservicebus.CodeConnectionLost), opAny, ClassReconnect, ErrConnectionLost},
	{"timeout", sdkCode(azservicebus.CodeTimeout), opAny, ClassRetry, ErrTransient},
	{"busy", amqpCond(condServerBusy, condTimeout), opAny, ClassRetry, ErrTransient},
}

// IsServerBusy reports whether the broker refused a call as too busy (throttled): an AMQP error
// with condition com.microsoft:server-busy, or a management answer with status 503, whether err
// is the SDK's error or one this package returned. Nothing was done, so the call may be repeated
// on the same link; and the broker answered, so it is reachable.
func IsServerBusy(err error) bool {
	if amqpCond(condServerBusy)(err) {
		return true
	}
	var rpc interface{ RPCCode() int }
	return errors.As(err, &rpc) && rpc.RPCCode() == 503
}

// mappedError carries the original SDK error, the sentinel it maps to and its class.
type mappedError struct {
	op       string
	class    Class
	sentinel error
	err      error
}

func (e *mappedError) Error() string {
	if e.sentinel != nil {
		return fmt.Sprintf("%s: %v: %v", e.op, e.sentinel, e.err)
	}
	return fmt.Sprintf("%s: %v", e.op, e.err)
}

// Unwrap lets errors.Is find both the sentinel and the SDK error.
func (e *mappedError) Unwrap() []error {
	if e.sentinel != nil {
		return []error{e.sentinel, e.err}
	}
	return []error{e.err}
}

// classify finds the rule for err in errorRules. Unknown errors are ClassRetry: the SDK has
// already spent its own retries, and the runner backs off before trying the session again.
func classify(o op, err error) (Class, error) {
	if err == nil {
		return ClassNone, nil
	}
	var me *mappedError
	if errors.As(err, &me) {
		return me.class, me.sentinel
	}
	if errors.Is(err, sequencer.ErrLockLost) { // the adapter's own verdict
		return ClassLockLost, sequencer.ErrLockLost
	}
	for _, r := range errorRules {
		if (r.op == opAny || r.op == o) && r.match(err) {
			return r.class, r.sentinel
		}
	}
	return ClassRetry, nil
}

// mapError wraps an SDK error so that errors.Is finds its sequencer sentinel, and names what
// failed (for example `accept session "a"`). It returns nil for nil.
func mapError(o op, what string, err error) error {
	if err == nil {
		return nil
	}
	var me *mappedError
	if errors.As(err, &me) {
		return fmt.Errorf("%s: %w", what, err)
	}
	class, sentinel := classify(o, err)
	return &mappedError{op: what, class: class, sentinel: sentinel, err: err}
}

// MapError translates an error from the azservicebus SDK into one that errors.Is matches against
// the sequencer's sentinels (or this package's), keeping the SDK error in the chain.
func MapError(err error) error { return mapError(opAny, "servicebus", err) }

// Classify returns how to recover from err, which may be an SDK error or one this package
// returned.
func Classify(err error) Class {
	c, _ := classify(opAny, err)
	return c
}
