package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// Ordering says whether the worker restores an order at all.
type Ordering string

const (
	// OrderingSession restores each session's application order (the default): the entity
	// requires sessions.
	OrderingSession Ordering = "session"
	// OrderingNone handles the messages of an entity without sessions as they come, up to
	// Config.MaxConcurrentSessions at once, with no state: for consumers that need no order
	// (notifications, metrics; the session-id strategy "none" of the topology).
	OrderingNone Ordering = "none"
)

// unordered handles the messages of an entity without sessions concurrently: receive, handler
// with the engine's retry policy, complete; what keeps failing goes by the poison policy
// (dead-lettered with park or skip, abandoned with block).
type unordered struct {
	recv     *azservicebus.Receiver
	h        sequencer.Handler // with the worker's panic recovery (handler.WithRecover)
	slots    int
	attempts int
	retry    backoff.Policy
	poison   sequencer.PoisonPolicy
	obs      sequencer.Observer
	log      *slog.Logger
	clock    clock.Clock
	renewal  time.Duration

	active  atomic.Int64
	handled atomic.Uint64
	dead    atomic.Uint64
	retried atomic.Uint64
	calls   [numOps]atomic.Uint64
}

const (
	opReceive = iota
	opComplete
	opAbandon
	opDeadLetter
	opRenew
	numOps
)

var opNames = [numOps]string{"receive", "complete", "abandon", "dead_letter", "renew_lock"}

// receiveBackoff spaces the receives after failed ones.
var receiveBackoff = backoff.Policy{Base: time.Second, Max: 30 * time.Second, Jitter: 0.5}

// run receives and handles until stop ends (a graceful stop: the messages in hand are finished)
// or hard ends (handlers are canceled, nothing more is settled), then closes the receiver.
func (u *unordered) run(stop, hard context.Context) error {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(stop), 10*time.Second)
		defer cancel()
		_ = u.recv.Close(cctx)
	}()
	sem := make(chan struct{}, u.slots)
	var wg sync.WaitGroup
	defer wg.Wait()
	failures := 0
	for stop.Err() == nil {
		select { // wait for a free slot
		case sem <- struct{}{}:
			<-sem
		case <-stop.Done():
			return nil
		}
		free := u.slots - len(sem)
		rctx, cancel := context.WithCancel(hard)
		stopWatch := context.AfterFunc(stop, cancel)
		u.calls[opReceive].Add(1)
		msgs, err := u.recv.ReceiveMessages(rctx, free, nil)
		stopWatch()
		cancel()
		if err != nil && stop.Err() == nil && hard.Err() == nil {
			failures++
			u.log.WarnContext(stop, "worker: receiving", slog.Any("error", err), slog.String("class", sbadapter.Classify(err).String()))
			_ = clock.Sleep(stop, u.clock, receiveBackoff.Delay(failures))
			continue
		}
		failures = 0
		for _, rm := range msgs {
			sem <- struct{}{}
			u.active.Add(1)
			wg.Go(func() {
				defer func() { <-sem; u.active.Add(-1) }()
				u.handle(hard, rm)
			})
		}
	}
	return nil
}

// handle runs one message to its settlement.
func (u *unordered) handle(ctx context.Context, rm *azservicebus.ReceivedMessage) {
	m := sbadapter.ToMessage(rm)
	renewCtx, stopRenew := context.WithCancel(ctx)
	var renewWG sync.WaitGroup
	renewWG.Go(func() { u.renewLoop(renewCtx, rm) })
	defer func() { stopRenew(); renewWG.Wait() }()

	var herr error
	for attempt := 1; ; attempt++ {
		herr = u.h.Handle(ctx, m)
		if herr == nil || ctx.Err() != nil || attempt >= u.attempts {
			break
		}
		u.retried.Add(1)
		u.observe(sequencer.Event{Kind: sequencer.EventRetry, SessionID: m.SessionID, Err: herr})
		if clock.Sleep(ctx, u.clock, u.retry.Delay(attempt)) != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return // canceled: the message returns to the broker when its lock expires
	}
	stopRenew()
	renewWG.Wait()
	settle := func(op int, what string, fn func(context.Context) error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		u.calls[op].Add(1)
		if err := fn(sctx); err != nil {
			u.log.WarnContext(ctx, "worker: settling a message", slog.String("settlement", what),
				slog.String("message_id", m.MessageID), slog.Any("error", err))
		}
	}
	switch {
	case herr == nil:
		u.handled.Add(1)
		u.observe(sequencer.Event{Kind: sequencer.EventHandled, SessionID: m.SessionID})
		settle(opComplete, "complete", func(ctx context.Context) error { return u.recv.CompleteMessage(ctx, rm, nil) })
	case u.poison == sequencer.PoisonBlock:
		settle(opAbandon, "abandon", func(ctx context.Context) error { return u.recv.AbandonMessage(ctx, rm, nil) })
	default:
		u.log.WarnContext(ctx, "worker: handler failed, retries exhausted; dead-lettering", slog.String("message_id", m.MessageID), slog.Any("error", herr))
		u.dead.Add(1)
		u.observe(sequencer.Event{Kind: sequencer.EventDeadLettered, SessionID: m.SessionID, Err: herr})
		reason, desc := sequencer.ReasonHandlerFailed, herr.Error()
		settle(opDeadLetter, "dead-letter", func(ctx context.Context) error {
			return u.recv.DeadLetterMessage(ctx, rm, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc})
		})
	}
}

// renewLoop keeps the message lock while the handler and its retries run.
func (u *unordered) renewLoop(ctx context.Context, rm *azservicebus.ReceivedMessage) {
	for clock.Sleep(ctx, u.clock, u.renewal) == nil {
		u.calls[opRenew].Add(1)
		if err := u.recv.RenewMessageLock(ctx, rm, nil); err != nil && ctx.Err() == nil {
			u.log.WarnContext(ctx, "worker: renewing a message lock", slog.String("message_id", rm.MessageID), slog.Any("error", err))
			if errors.Is(sbadapter.MapError(err), sequencer.ErrLockLost) {
				return
			}
		}
	}
}

func (u *unordered) observe(e sequencer.Event) {
	if u.obs != nil {
		u.obs.Observe(e)
	}
}

// stats reports the totals in the engine's terms.
func (u *unordered) stats() sequencer.Stats {
	s := sequencer.Stats{
		ActiveSessions: int(u.active.Load()),
		Handled:        u.handled.Load(),
		DeadLettered:   u.dead.Load(),
		Retries:        u.retried.Load(),
		BrokerCalls:    make(map[string]uint64, numOps),
	}
	for i, n := range opNames {
		s.BrokerCalls[n] = u.calls[i].Load()
	}
	return s
}
