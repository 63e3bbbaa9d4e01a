package engine

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/amqpwire"
)

// Pressure is the load of a busy namespace that the server puts on its clients; the emulator
// package's Pressure (the same fields) documents each. The zero value puts none: Latency and
// LatencyJitter delay the frames sent (the delay line below), CreditsPerSecond throttles
// (admit, admitDelivery), TransientErrorRate refuses operations (injectTransient).
type Pressure struct {
	Latency            time.Duration
	LatencyJitter      time.Duration
	CreditsPerSecond   int
	TransientErrorRate float64
}

// ServerBusyCondition is the condition of a throttled operation.
const ServerBusyCondition amqpwire.Symbol = "com.microsoft:server-busy"

// costManagementOperation is the credit cost of a management operation (Standard tier).
const costManagementOperation = 10

// PressureStats counts what Pressure did.
type PressureStats struct {
	// Credits is the credits charged to admitted operations.
	Credits uint64
	// Throttled counts operations refused with server-busy; DeliveriesDelayed counts deliveries
	// that waited for credits.
	Throttled         uint64
	DeliveriesDelayed uint64
	// TransientErrors counts operations refused with an injected transient error.
	TransientErrors uint64
}

// pressure applies a Pressure. A nil *pressure applies none.
type pressure struct {
	cfg Pressure
	now func() time.Time

	mu      sync.Mutex
	balance int64
	second  int64 // Unix second of the last refill

	credits, throttled, delayed, transient atomic.Uint64
}

func newPressure(cfg Pressure, now func() time.Time) *pressure {
	if cfg == (Pressure{}) {
		return nil
	}
	return &pressure{cfg: cfg, now: now, balance: int64(cfg.CreditsPerSecond), second: now().Unix()}
}

func (p *pressure) stats() PressureStats {
	if p == nil {
		return PressureStats{}
	}
	return PressureStats{Credits: p.credits.Load(), Throttled: p.throttled.Load(),
		DeliveriesDelayed: p.delayed.Load(), TransientErrors: p.transient.Load()}
}

// admit charges cost credits and reports true, or reports false when the namespace has none
// left this second: the operation is throttled.
func (p *pressure) admit(cost int) bool {
	if p.take(cost, false) {
		return true
	}
	p.throttled.Add(1)
	return false
}

// charge charges cost credits for an operation that cannot be refused (the client settled it
// already), taking the balance below zero if need be.
func (p *pressure) charge(cost int) { p.take(cost, true) }

// take charges cost credits when the balance is positive (or always, with force) and reports
// whether it did.
func (p *pressure) take(cost int, force bool) bool {
	if p == nil {
		return true
	}
	if p.cfg.CreditsPerSecond > 0 {
		p.mu.Lock()
		if now := p.now().Unix(); now > p.second {
			per := int64(p.cfg.CreditsPerSecond)
			// Each elapsed second pays per credits, but no more than one second's worth is kept.
			p.balance = min(p.balance+per*(now-p.second), per)
			p.second = now
		}
		ok := p.balance > 0 || force
		if ok {
			p.balance -= int64(cost)
		}
		p.mu.Unlock()
		if !ok {
			return false
		}
	}
	p.credits.Add(uint64(max(cost, 0)))
	return true
}

// untilNextSecond is how long until the next refill.
func (p *pressure) untilNextSecond() time.Duration {
	now := p.now()
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}

// admitDelivery charges a receiver's deliveries, waiting for credits when there are none. It
// reports false when ctx ended first.
func (p *pressure) admitDelivery(ctx context.Context, n int) bool {
	if p.take(n, false) {
		return true
	}
	p.delayed.Add(uint64(n))
	for {
		t := time.NewTimer(p.untilNextSecond())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if p.take(n, false) {
			return true
		}
	}
}

// injectTransient reports whether this operation fails with an injected transient error.
func (p *pressure) injectTransient() bool {
	if p == nil || p.cfg.TransientErrorRate <= 0 || rand.Float64() >= p.cfg.TransientErrorRate {
		return false
	}
	p.transient.Add(1)
	return true
}

// busyDescription is the service's text for a throttled request, retry-after hint included.
func busyDescription(namespace string) string {
	return fmt.Sprintf("The request was terminated because the namespace %s is being throttled. Error code : 50009. "+
		"Please wait 2 seconds and try again. (throttled by the emulator's credit limit)", cmp.Or(namespace, "emulator"))
}

// transientDescription is the description of an injected transient error.
const transientDescription = "The operation did not complete within the allotted timeout; retry it. (transient error injected by the emulator)"

var errTransientLink = &amqpwire.Error{Condition: condTimeout, Description: transientDescription}

// refuseLinkOp returns the rejection of a send or a settlement that pressure refuses, or nil
// when the operation may go on (its credits charged).
func (c *conn) refuseLinkOp(cost int) *amqpwire.Error {
	p := c.srv.pressure
	if p.injectTransient() {
		return errTransientLink
	}
	if !p.admit(cost) {
		return &amqpwire.Error{Condition: ServerBusyCondition, Description: busyDescription(c.hostname)}
	}
	return nil
}

// refuseManagement returns the response to a $management request that pressure refuses, or nil
// when the request may go on (its credits charged).
func (c *conn) refuseManagement(op string, body map[string]any) *amqp.Message {
	p := c.srv.pressure
	if p == nil {
		return nil
	}
	if p.injectTransient() {
		resp := statusResponse(408, transientDescription)
		resp.ApplicationProperties["error-condition"] = string(condTimeout)
		return resp
	}
	if !p.admit(managementCost(op, body)) {
		resp := statusResponse(503, busyDescription(c.hostname))
		resp.ApplicationProperties["error-condition"] = string(ServerBusyCondition)
		return resp
	}
	return nil
}

// managementCost is the credits a $management request costs: 10 for the operations on rules and
// for listing sessions, else 1 per message it names (at least 1).
func managementCost(op string, body map[string]any) int {
	switch op {
	case opAddRule, opRemoveRule, opEnumerateRules, opGetMessageSessions:
		return costManagementOperation
	case opPeek:
		n, _ := toInt64(body["message-count"])
		return int(max(n, 1))
	}
	for _, key := range []string{"lock-tokens", "sequence-numbers", "messages"} {
		if n := listLen(body[key]); n > 0 {
			return n
		}
	}
	return 1
}

func listLen(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case []amqp.UUID:
		return len(x)
	case []int64:
		return len(x)
	}
	return 0
}

// delayLine holds a connection's outgoing frames for the configured latency, in order.
type delayLine struct {
	latency, jitter time.Duration

	mu   sync.Mutex // orders release times with the frames' place in ch
	last time.Time
	ch   chan delayedFrame
}

type delayedFrame struct {
	f       outFrame
	release time.Time
}

func newDelayLine(p *pressure) *delayLine {
	if p == nil || p.cfg.Latency <= 0 && p.cfg.LatencyJitter <= 0 {
		return nil
	}
	return &delayLine{latency: p.cfg.Latency, jitter: p.cfg.LatencyJitter, ch: make(chan delayedFrame, 4096)}
}

// push queues f for release after the latency, never before a frame queued earlier.
func (d *delayLine) push(ctx context.Context, f outFrame) {
	delay := d.latency
	if d.jitter > 0 {
		delay += rand.N(d.jitter)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	release := time.Now().Add(delay)
	if release.Before(d.last) {
		release = d.last
	}
	d.last = release
	select {
	case d.ch <- delayedFrame{f: f, release: release}:
	case <-ctx.Done():
	}
}

// run hands each frame to the writer once its time has come, until the connection ends.
func (d *delayLine) run(c *conn) {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case df := <-d.ch:
			if wait := time.Until(df.release); wait > 0 {
				t.Reset(wait)
				select {
				case <-c.ctx.Done():
					return
				case <-t.C:
				}
			}
			select {
			case c.out <- df.f:
			case <-c.ctx.Done():
				return
			}
		}
	}
}

// describePressure is the log form of a Pressure.
func describePressure(p Pressure) string {
	var parts []string
	if p.Latency > 0 || p.LatencyJitter > 0 {
		parts = append(parts, fmt.Sprintf("latency %s+%s", p.Latency, p.LatencyJitter))
	}
	if p.CreditsPerSecond > 0 {
		parts = append(parts, fmt.Sprintf("%d credits/s", p.CreditsPerSecond))
	}
	if p.TransientErrorRate > 0 {
		parts = append(parts, fmt.Sprintf("transient errors %.4g", p.TransientErrorRate))
	}
	return strings.Join(parts, ", ")
}
