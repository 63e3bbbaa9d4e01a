package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/backoff"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sbadapter"
)

// What the plain consumer keeps going on one session: a receive of up to plainBatch messages
// while up to plainInFlight completions are in flight.
const (
	plainBatch    = 32
	plainInFlight = 16
)

// PlainConsumer is the baseline the worker is compared with: a plain SDK session consumer, no
// sequencing and no state. Each of its goroutines accepts the next session and receives batches
// of 32, completing every message in the background with up to 16 completions in flight while it
// issues the next receive; it closes the session once it received every message Expect says the
// session holds (waiting for the completions first), or once a receive found nothing for Idle.
// A message of a session Expect does not name is completed and not counted.
type PlainConsumer struct {
	// Clients are the connections to consume on (one per process it stands for), each with
	// SessionsPerClient sessions at once.
	Clients           []*azservicebus.Client
	SessionsPerClient int
	Entity            sbadapter.Entity
	// Expect maps each session to the messages it holds.
	Expect map[string]int
	// Idle closes a session whose receive found nothing that long [1s].
	Idle time.Duration
	// SessionDone, when set, is called once per session of Expect, when the last of its messages
	// was completed.
	SessionDone func()

	mu        sync.Mutex
	completed map[string]map[string]bool // session → message ids completed
	left      int                        // sessions of Expect not complete
	done      chan struct{}

	calls, completions atomic.Uint64
}

// PlainStats is what a PlainConsumer did.
type PlainStats struct {
	// Completed counts the distinct messages of Expect completed.
	Completed uint64
	// BrokerCalls counts accepts, receives, completions and session closes.
	BrokerCalls uint64
}

// Run consumes until every message of Expect was completed (nil), ctx ended (its error) or the
// broker refused the consumer for good (that error).
func (p *PlainConsumer) Run(ctx context.Context) (PlainStats, error) {
	if len(p.Clients) == 0 || p.SessionsPerClient < 1 || len(p.Expect) == 0 {
		return PlainStats{}, fmt.Errorf("bench: plain consumer: %d clients, %d sessions each, %d sessions expected: all must be positive",
			len(p.Clients), p.SessionsPerClient, len(p.Expect))
	}
	if p.Idle <= 0 {
		p.Idle = time.Second
	}
	p.completed, p.left, p.done = make(map[string]map[string]bool, len(p.Expect)), len(p.Expect), make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(p.Clients)*p.SessionsPerClient)
	for _, c := range p.Clients {
		for range p.SessionsPerClient {
			wg.Go(func() {
				if err := p.loop(ctx, c); err != nil {
					errs <- err
					cancel()
				}
			})
		}
	}
	var err error
	select {
	case <-p.done:
	case err = <-errs:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel() // the goroutines waiting for a session stop at once
	wg.Wait()
	p.mu.Lock()
	var n uint64
	for _, ids := range p.completed {
		n += uint64(len(ids))
	}
	p.mu.Unlock()
	return PlainStats{Completed: n, BrokerCalls: p.calls.Load()}, err
}

// retryAccept spaces the accepts after a refusal (a throttled namespace, a lost connection).
var retryAccept = backoff.Policy{Base: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// loop accepts sessions one after the other on c until ctx ends.
func (p *PlainConsumer) loop(ctx context.Context, c *azservicebus.Client) error {
	failures := 0
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, p.Idle)
		var r *azservicebus.SessionReceiver
		var err error
		if p.Entity.Queue != "" {
			r, err = c.AcceptNextSessionForQueue(actx, p.Entity.Queue, nil)
		} else {
			r, err = c.AcceptNextSessionForSubscription(actx, p.Entity.Topic, p.Entity.Subscription, nil)
		}
		cancel()
		p.calls.Add(1)
		switch {
		case err == nil:
			failures = 0
			if err := p.consume(ctx, r); err != nil {
				return err
			}
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded) || isCode(err, azservicebus.CodeTimeout):
			// No session for now.
		case sbadapter.Classify(err) == sbadapter.ClassFatal:
			return fmt.Errorf("bench: plain consumer: accept a session of %s: %w", p.Entity, err)
		default:
			failures++
			if clock.Sleep(ctx, clock.Real(), retryAccept.Delay(failures)) != nil {
				return nil
			}
		}
	}
	return nil
}

// consume receives and completes r's messages until it received as many as the session holds or
// found nothing for Idle, then closes r. Only a fatal error is returned: anything else ends the
// session, whose messages come back to the next accept.
func (p *PlainConsumer) consume(ctx context.Context, r *azservicebus.SessionReceiver) error {
	sid := r.SessionID()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		_ = r.Close(context.WithoutCancel(ctx))
		p.calls.Add(1)
	}()
	slots := make(chan struct{}, plainInFlight)
	received := map[string]bool{}
	expect, known := p.Expect[sid]
	for !known || len(received) < expect {
		rctx, cancel := context.WithTimeout(ctx, p.Idle)
		msgs, err := r.ReceiveMessages(rctx, plainBatch, nil)
		cancel()
		p.calls.Add(1)
		if err != nil || len(msgs) == 0 {
			if err != nil && sbadapter.Classify(err) == sbadapter.ClassFatal && ctx.Err() == nil {
				return fmt.Errorf("bench: plain consumer: receive from session %s: %w", sid, err)
			}
			return nil // idle, ended, or the lock is gone
		}
		for _, m := range msgs {
			received[m.MessageID] = true
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-slots }()
				err := r.CompleteMessage(ctx, m, nil)
				p.calls.Add(1)
				if err == nil {
					p.markCompleted(sid, m.MessageID)
				}
			})
		}
	}
	return nil
}

// markCompleted counts a completed message and closes done with the last one expected.
func (p *PlainConsumer) markCompleted(sid, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	expect, known := p.Expect[sid]
	if !known {
		return
	}
	ids := p.completed[sid]
	if ids == nil {
		ids = make(map[string]bool, expect)
		p.completed[sid] = ids
	}
	if ids[id] {
		return
	}
	ids[id] = true
	if len(ids) != expect {
		return
	}
	if p.SessionDone != nil {
		p.SessionDone()
	}
	if p.left--; p.left == 0 {
		close(p.done)
	}
}

func isCode(err error, code azservicebus.Code) bool {
	var sbErr *azservicebus.Error
	return errors.As(err, &sbErr) && sbErr.Code == code
}
