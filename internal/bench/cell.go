package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// Pressure is a level of Service Bus pressure, one dimension of the matrix.
type Pressure string

// Pressure levels.
const (
	// PressureNone is the emulator as it is (or the namespace of a connection string).
	PressureNone Pressure = "none"
	// PressureThrottle is the Standard tier's credit-based throttle (Options.ThrottleCredits).
	PressureThrottle Pressure = "throttle"
	// PressureLatency delays every answer of the emulator (Options.Latency).
	PressureLatency Pressure = "latency"
)

// Arrival is the order in which each session's messages reach the broker.
type Arrival string

// Arrival orders.
const (
	ArrivalInOrder  Arrival = "in-order"
	ArrivalShuffled Arrival = "shuffled"
	// ArrivalReversed publishes each session's messages last first: every message but the
	// last one published is early.
	ArrivalReversed Arrival = "reversed"
)

// Cell is one point of the matrix.
type Cell struct {
	Replicas      int
	Pressure      Pressure
	ExceptionRate float64 // share of handler calls that fail (transiently)
	Arrival       Arrival
	// Early is where the replicas keep early messages beyond the reorder window
	// (SEQBUS_EARLY_MESSAGES; empty: the worker's default, defer). With EarlyMessagesStore the
	// cell's queue is partitioned, as the mode is meant for.
	Early worker.EarlyMessages
}

func (c Cell) String() string {
	s := fmt.Sprintf("%d replicas, pressure %s, %s exceptions, %s", c.Replicas, c.Pressure, percent(c.ExceptionRate), c.Arrival)
	if c.Early != "" {
		s += ", early " + string(c.Early)
	}
	return s
}

// early is the cell's mode of early messages, the worker's default when the cell names none.
func (c Cell) early() worker.EarlyMessages {
	return cmp.Or(c.Early, worker.DefaultConfig().EarlyMessages)
}

func percent(r float64) string { return strconv.FormatFloat(r*100, 'g', 4, 64) + "%" }

// Result is what one cell measured.
type Result struct {
	Cell
	Sessions, Messages int
	Elapsed            time.Duration
	// Rate is messages handled per second, from the first publish to the last message handled.
	Rate float64
	// HandlerCalls counts every call, failed ones included; HandlerErrors the failed ones.
	HandlerCalls, HandlerErrors uint64
	// LatencyP50 and LatencyP99 are publish → handler (the call that succeeded).
	LatencyP50, LatencyP99 time.Duration
	// BrokerCalls counts the replicas' session and source calls (sequencer.Stats.BrokerCalls),
	// StoreCalls their state loads, saves and deletes (Stats.StoreCalls; with the Service Bus
	// store each is a broker call too) and StateWrites the saves and deletes alone
	// (seqbus_state_saves_total).
	BrokerCalls, StoreCalls, StateWrites uint64
	// Duplicates counts copies the engine dropped (redeliveries of handled messages).
	Duplicates uint64
	// Throttled and DeliveriesDelayed come from the in-process emulator (emulator.PressureStats),
	// counted while the replicas ran.
	Throttled, DeliveriesDelayed uint64
	// Credits is what the throttle charged for the operations it carried out while the replicas
	// ran (the publisher's included; refused ones cost nothing), CreditsPerSecond the throttle's
	// rate (0 without it). See CreditLimitedRate.
	Credits          uint64
	CreditsPerSecond int
	// PlainRate is what the plain pipelined SDK consumer (PlainConsumer, as many clients and
	// sessions at once as the replicas) did with the same sessions in the same cell: messages
	// completed per second, first publish to last completion. PlainElapsed is that time and
	// PlainBrokerCalls its calls (accepts, receives, completions, closes).
	PlainRate        float64
	PlainElapsed     time.Duration
	PlainBrokerCalls uint64
	// Offered is the offered-rate phase of a throttle cell (Options.OfferedShare; zero without).
	Offered OfferedResult
	// Violations counts order violations (must be 0); Incomplete the sessions not finished when
	// the cell ended (0 unless it timed out).
	Violations, Incomplete int
	// ViolationSamples are the first order violations, as the checker words them.
	ViolationSamples []string
	// Err is what stopped the cell early, if anything.
	Err error
}

// OfferedResult is what the replicas did when offered a fixed rate rather than a backlog: the
// phase that tells how long a message waits when the namespace is not saturated.
type OfferedResult struct {
	// Rate is the messages per second offered: Options.OfferedShare of the cell's
	// CreditLimitedRate, measured in the backlog phase before it.
	Rate float64
	// Handled is the rate the replicas handled them at, from the first publish to the last
	// message handled; Elapsed that time.
	Handled float64
	Elapsed time.Duration
	// LatencyP50 and LatencyP99 are from the moment a message was due to be offered (its slot
	// in the schedule, so a publish the throttle held up counts against the latency) to the
	// handler call that succeeded.
	LatencyP50, LatencyP99 time.Duration
	// Throttled counts the operations the throttle refused during the phase.
	Throttled uint64
}

// Ratio is the worker's rate over the plain consumer's in the same cell (0 without a plain rate).
func (r Result) Ratio() float64 {
	if r.PlainRate <= 0 {
		return 0
	}
	return r.Rate / r.PlainRate
}

// CreditsPerMessage is the credits the throttle charged per message handled: what a message
// costs the namespace, publishing included.
func (r Result) CreditsPerMessage() float64 { return r.perMessage(r.Credits) }

// CreditLimitedRate is the rate the throttle's credits allow at CreditsPerMessage: every credit
// spent on a message operation, none left unused (0 without the throttle).
func (r Result) CreditLimitedRate() float64 {
	if r.CreditsPerSecond == 0 || r.Credits == 0 {
		return 0
	}
	return float64(r.CreditsPerSecond) / r.CreditsPerMessage()
}

// CreditRatio is Rate over CreditLimitedRate: the share of the namespace's credits spent on
// messages rather than left unused while the replicas waited out refusals (0 without the
// throttle).
func (r Result) CreditRatio() float64 {
	if l := r.CreditLimitedRate(); l > 0 {
		return r.Rate / l
	}
	return 0
}

// ExceptionRateMeasured is the share of handler calls that failed.
func (r Result) ExceptionRateMeasured() float64 {
	return float64(r.HandlerErrors) / float64(max(r.HandlerCalls, 1))
}

func (r Result) perMessage(n uint64) float64 { return float64(n) / float64(max(r.Messages, 1)) }

// errInjected is the bench handler's transient failure.
var errInjected = errors.New("bench: injected handler exception")

// publishedAtProperty carries the publish time (Unix nanoseconds) in each message.
const publishedAtProperty = "BenchPublishedAt"

// runCell runs one cell: an emulator with the cell's pressure (or the namespace of
// Options.ConnectionString), the cell's replicas, a publisher keeping a bounded backlog of
// sessions, until every session was handled or the cell timed out; then the plain consumer with
// as many sessions of its own, on a queue of its own in the same emulator (or after the
// replicas stopped, on the same entity).
func runCell(ctx context.Context, o Options, index int, cell Cell) Result {
	res := Result{Cell: cell, Sessions: o.Sessions, Messages: o.Sessions * o.Messages}
	ctx, cancel := context.WithTimeout(ctx, o.CellTimeout)
	defer cancel()

	conn, entity, plainEntity := o.ConnectionString, o.Entity, o.Entity
	var srv *emulator.Server
	if conn == "" {
		var err error
		srv, err = startEmulator(ctx, o, cell)
		if err != nil {
			res.Err = err
			return res
		}
		defer srv.Close()
		conn = srv.ConnectionString()
		entity, plainEntity = sbadapter.Entity{Queue: emulatorQueue}, sbadapter.Entity{Queue: emulatorPlainQueue}
	}
	onSide(ctx, "worker", func(ctx context.Context) {
		res.Err = runWorkers(ctx, o, index, cell, conn, entity, phaseBacklog, srv, &res)
	})
	if srv != nil {
		ps := srv.PressureStats()
		res.Throttled, res.DeliveriesDelayed, res.Credits = ps.Throttled, ps.DeliveriesDelayed, ps.Credits
		if cell.Pressure == PressureThrottle {
			res.CreditsPerSecond = o.ThrottleCredits
		}
	}
	if res.Err == nil && srv != nil && cell.Pressure == PressureThrottle && o.OfferedShare > 0 {
		onSide(ctx, "worker", func(ctx context.Context) { res.Err = runOffered(ctx, o, index, cell, srv, entity, &res) })
	}
	if res.Err == nil {
		onSide(ctx, "plain", func(ctx context.Context) { res.Err = runPlain(ctx, o, index, cell, conn, plainEntity, &res) })
	}
	return res
}

// onSide runs fn with the pprof label side=name added to ctx's, inherited by the goroutines fn
// starts: a CPU profile tells the worker's share of a cell from the plain consumer's and the
// publisher's (cmd/bench -cpuprofile).
func onSide(ctx context.Context, name string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("side", name), fn)
}

// runOffered runs the offered-rate phase of a throttle cell on srv: fresh replicas and sessions,
// offered Options.OfferedShare of the credit-limited rate the backlog phase measured (res).
func runOffered(ctx context.Context, o Options, index int, cell Cell, srv *emulator.Server, entity sbadapter.Entity, res *Result) error {
	limited := res.CreditLimitedRate()
	if limited <= 0 {
		return errors.New("bench: offered rate: the backlog phase measured no credit-limited rate")
	}
	ph := phase{tag: "o", offered: o.OfferedShare * limited}
	before := srv.PressureStats().Throttled
	var r Result
	err := runWorkers(ctx, o, index, cell, srv.ConnectionString(), entity, ph, srv, &r)
	res.Offered = OfferedResult{Rate: ph.offered, Handled: r.Rate, Elapsed: r.Elapsed,
		LatencyP50: r.LatencyP50, LatencyP99: r.LatencyP99, Throttled: srv.PressureStats().Throttled - before}
	res.Violations += r.Violations
	res.ViolationSamples = append(res.ViolationSamples, r.ViolationSamples...)
	res.Incomplete += r.Incomplete
	if err != nil {
		return fmt.Errorf("bench: offered %.0f msg/s: %w", ph.offered, err)
	}
	return nil
}

// maxViolationSamples bounds Result.ViolationSamples: the first few tell where to look.
const maxViolationSamples = 5

// phase is how runWorkers publishes: against a backlog (offered 0) or at a fixed rate.
type phase struct {
	tag     string  // marks the phase's session ids
	offered float64 // messages per second; 0: keep a backlog of sessions instead
}

var phaseBacklog = phase{tag: "s"}

// runWorkers runs the cell's replicas on entity until they handled every session, and fills in
// their part of res; the replicas are stopped when it returns. srv is the in-process emulator
// (nil with a connection string), sampled for the debug timeline (sampleTimeline).
func runWorkers(ctx context.Context, o Options, index int, cell Cell, conn string, entity sbadapter.Entity, ph phase, srv *emulator.Server, res *Result) error {
	ids := make([]string, o.Sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-c%02d-%s%04d", o.RunID, index, ph.tag, i)
	}
	h := newCellHandler(ids, o.Messages, o.replicaConfig(cell).EngineConfig().ReplayWindow(), cell.ExceptionRate)
	var err error

	replicas := make([]*worker.Client, 0, cell.Replicas)
	regs := make([]*prometheus.Registry, 0, cell.Replicas)
	counts := make([]*countingHandler, 0, cell.Replicas)
	defer func() {
		for _, w := range replicas {
			stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			if err := w.Stop(stopCtx); err != nil {
				_ = w.StopAndCancel(stopCtx)
			}
			stopCancel()
		}
	}()
	for n := range cell.Replicas {
		reg := prometheus.NewRegistry()
		cfg := o.replicaConfig(cell)
		counted := &countingHandler{h: h}
		cfg.ConnectionString, cfg.Entity, cfg.Handler, cfg.HTTPAddr = conn, entity, counted, worker.HTTPOff
		cfg.MaxHandlerAttempts, cfg.RetryBase, cfg.RetryMax = o.HandlerRetry.Attempts, o.HandlerRetry.Base, o.HandlerRetry.Cap
		cfg.SessionIdleTimeout, cfg.MaxConcurrentSessions, cfg.SweepInterval = time.Second, o.SessionsPerReplica, 2*time.Second
		cfg.SessionConnections = o.SessionConnections
		cfg.Registry, cfg.Logger = reg, o.Logger.With(slog.Int("replica", n))
		w, err := worker.New(cfg)
		if err == nil {
			err = w.Start(context.WithoutCancel(ctx))
		}
		if err != nil {
			return fmt.Errorf("bench: replica %d: %w", n, err)
		}
		replicas = append(replicas, w)
		regs = append(regs, reg)
		counts = append(counts, counted)
	}

	start := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go sampleTimeline(sctx, o.Logger, ph.tag, srv, replicas, counts)
	pubErr := make(chan error, 1)
	go onSide(ctx, "publisher", func(ctx context.Context) {
		if ph.offered > 0 {
			pubErr <- publishOffered(ctx, o, conn, entity, ids, cell, uint64(index), ph.offered, len(replicas)*o.SessionsPerReplica)
			return
		}
		pubErr <- publish(ctx, o, conn, entity, ids, cell, uint64(index), &h.finished, len(replicas)*o.SessionsPerReplica*2)
	})
	select {
	case <-h.checker.Done():
	case err = <-pubErr:
		if err != nil {
			break
		}
		select {
		case <-h.checker.Done():
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	res.Elapsed = time.Since(start)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("bench: cell did not finish within %s", o.CellTimeout)
	}
	handled := h.checker.Handled() - h.checker.Redelivered()
	res.Rate = float64(handled) / res.Elapsed.Seconds()
	res.HandlerCalls, res.HandlerErrors = h.calls.Load(), h.errors.Load()
	res.LatencyP50, res.LatencyP99 = h.percentiles()
	violations := h.checker.Violations()
	res.Violations = len(violations)
	res.ViolationSamples = violations[:min(len(violations), maxViolationSamples)]
	res.Incomplete = len(h.checker.Incomplete())
	for i, w := range replicas {
		st := w.Stats()
		res.BrokerCalls += st.TotalBrokerCalls()
		res.StoreCalls += st.StoreCalls
		res.Duplicates += st.Duplicates
		res.StateWrites += counterValue(regs[i], "seqbus_state_saves_total")
	}
	return err
}

// runPlain runs the plain consumer with the cell's replicas × sessions per replica at once on
// entity, publishing as runWorkers does, and fills in its part of res.
func runPlain(ctx context.Context, o Options, index int, cell Cell, conn string, entity sbadapter.Entity, res *Result) error {
	ids := make([]string, o.Sessions)
	expect := make(map[string]int, o.Sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-c%02d-p%04d", o.RunID, index, i)
		expect[ids[i]] = o.Messages
	}
	var finished sessionsFinished
	p := &PlainConsumer{SessionsPerClient: o.SessionsPerReplica / o.SessionConnections, Entity: entity, Expect: expect, Idle: time.Second, SessionDone: finished.add}
	for range cell.Replicas * o.SessionConnections {
		c, err := azservicebus.NewClientFromConnectionString(conn, &azservicebus.ClientOptions{RetryOptions: throttledRetries})
		if err != nil {
			return fmt.Errorf("bench: plain consumer: %w", err)
		}
		defer c.Close(context.WithoutCancel(ctx))
		p.Clients = append(p.Clients, c)
	}
	start := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pubErr := make(chan error, 1)
	go onSide(pctx, "publisher", func(pctx context.Context) {
		pubErr <- publish(pctx, o, conn, entity, ids, cell, uint64(index), &finished, cell.Replicas*o.SessionsPerReplica*2)
	})
	st, err := p.Run(ctx)
	res.PlainElapsed = time.Since(start)
	res.PlainRate = float64(st.Completed) / res.PlainElapsed.Seconds()
	res.PlainBrokerCalls = st.BrokerCalls
	cancel()
	if perr := <-pubErr; err == nil && perr != nil {
		err = perr
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("bench: plain consumer did not finish within %s: %w", o.CellTimeout, err)
	}
	return err
}

// The session-enabled queues of the in-process emulator: the worker's and the plain consumer's.
const (
	emulatorQueue      = "bench"
	emulatorPlainQueue = "bench-plain"
)

func startEmulator(ctx context.Context, o Options, cell Cell) (*emulator.Server, error) {
	var p emulator.Pressure
	switch cell.Pressure {
	case PressureThrottle:
		p.CreditsPerSecond = o.ThrottleCredits
	case PressureLatency:
		p.Latency = o.Latency
	}
	// Partitioned session entities refuse the fetch of deferred messages (and the peek) as the
	// service does; a cell that holds early messages in the store runs on such a queue.
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-", Pressure: p, SessionIDRule: broker.SessionIDOnPartitioned,
		Logger: o.Logger.With(slog.String("component", "emulator"))})
	if err != nil {
		return nil, fmt.Errorf("bench: start the emulator: %w", err)
	}
	for _, q := range []string{emulatorQueue, emulatorPlainQueue} {
		if err := srv.Broker().CreateQueue(q, broker.EntityProperties{
			RequiresSession: true, LockDuration: 30 * time.Second, MaxDeliveryCount: 100,
			EnablePartitioning: cell.early() == worker.EarlyMessagesStore,
		}); err != nil {
			_ = srv.Close()
			return nil, fmt.Errorf("bench: create queue %s: %w", q, err)
		}
	}
	return srv, nil
}

// throttledRetries are the SDK retries of the plain consumer: the service asks throttled clients
// to wait 2 seconds; the SDK's default first wait is 4 s.
var throttledRetries = azservicebus.RetryOptions{MaxRetries: 30, RetryDelay: 500 * time.Millisecond, MaxRetryDelay: 2 * time.Second}

// publisherRetries are the SDK retries of the bench's publisher. A throttle cell measures the
// consumers against a backlog, so the publisher must not be what they wait for: with
// throttledRetries a refused batch sat out 0.5 s, then 1.5 s (the SDK's backoff grows as
// 1, 3, 7 × RetryDelay), while the namespace refills every second, and with 8 replicas the
// sessions came in clumps every 2.2 s: the replicas held 5 to 15 of their 32 slots through
// the whole cell and the namespace went unused for want of work. Retrying within the period
// (50, 150, 200 ms, …) keeps the batch in the running for the credits, as the replicas' own
// calls are (sbadapter.Limiter holds them 50-100 ms after a refusal).
var publisherRetries = azservicebus.RetryOptions{MaxRetries: 100, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}

// publish sends each session's messages as one batch, in order or shuffled, keeping at most
// backlog sessions published but not finished, so that the consumers always find work and the
// latency measures the pipeline rather than an ever longer queue.
func publish(ctx context.Context, o Options, conn string, entity sbadapter.Entity, ids []string, cell Cell, seed uint64, finished *sessionsFinished, backlog int) error {
	sender, done, err := newSender(ctx, conn, entity)
	if err != nil {
		return err
	}
	defer done()
	rng := rand.New(rand.NewPCG(o.Seed, seed))
	for i, id := range ids {
		if err := finished.waitBacklog(ctx, i, backlog); err != nil {
			return nil // the cell ended
		}
		if err := sendSession(ctx, sender, id, sessionSeqs(o.Messages, cell.Arrival, rng), o.Messages, time.Now()); err != nil {
			return ignoreEnded(ctx, err)
		}
	}
	return nil
}

// sendSession sends a session's messages in the order of seqs, in one batch (or several when
// they do not fit in one), each marked published at.
func sendSession(ctx context.Context, sender *azservicebus.Sender, id string, seqs []int64, n int, at time.Time) error {
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		return fmt.Errorf("bench: publish session %s: %w", id, err)
	}
	send := func() error {
		if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
			return fmt.Errorf("bench: publish session %s: %w", id, err)
		}
		batch, err = sender.NewMessageBatch(ctx, nil)
		if err != nil {
			return fmt.Errorf("bench: publish session %s: %w", id, err)
		}
		return nil
	}
	for _, seq := range seqs {
		m := benchMessage(id, seq, n, at)
		err := batch.AddMessage(m, nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && batch.NumMessages() > 0 {
			if err := send(); err != nil {
				return err
			}
			err = batch.AddMessage(m, nil)
		}
		if err != nil {
			return fmt.Errorf("bench: publish session %s sequence %d: %w", id, seq, err)
		}
	}
	return send()
}

// publishOffered publishes the sessions at rate messages per second. By default each session
// is one batch, as publish sends them, the next one due Options.Messages/rate later; with
// Options.OfferedTrickle the messages go one at a time, to slots sessions at a time (as many as
// the replicas hold at once) in turn, the next session opened when one has all its messages.
// Each message carries the moment it was due, so a send the throttle held up counts against the
// latency rather than shifting the schedule.
func publishOffered(ctx context.Context, o Options, conn string, entity sbadapter.Entity, ids []string, cell Cell, seed uint64, rate float64, slots int) error {
	if !o.OfferedTrickle {
		sender, done, err := newSender(ctx, conn, entity)
		if err != nil {
			return err
		}
		defer done()
		rng := rand.New(rand.NewPCG(o.Seed, seed))
		interval := time.Duration(float64(o.Messages) / rate * float64(time.Second))
		start := time.Now()
		for i, id := range ids {
			due := start.Add(time.Duration(i) * interval)
			if clock.Sleep(ctx, clock.Real(), time.Until(due)) != nil {
				return nil // the cell ended
			}
			if err := sendSession(ctx, sender, id, sessionSeqs(o.Messages, cell.Arrival, rng), o.Messages, due); err != nil {
				return ignoreEnded(ctx, err)
			}
		}
		return nil
	}
	sender, done, err := newSender(ctx, conn, entity)
	if err != nil {
		return err
	}
	defer done()
	rng := rand.New(rand.NewPCG(o.Seed, seed))
	type session struct {
		id   string
		seqs []int64
		next int
	}
	opened := 0
	open := func() *session {
		if opened == len(ids) {
			return nil
		}
		opened++
		return &session{id: ids[opened-1], seqs: sessionSeqs(o.Messages, cell.Arrival, rng)}
	}
	var cur []*session
	for range slots {
		if s := open(); s != nil {
			cur = append(cur, s)
		}
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i, slot := 0, 0; len(cur) > 0; i++ {
		due := start.Add(time.Duration(i) * interval)
		if clock.Sleep(ctx, clock.Real(), time.Until(due)) != nil {
			return nil // the cell ended
		}
		slot %= len(cur)
		s := cur[slot]
		seq := s.seqs[s.next]
		s.next++
		if err := sender.SendMessage(ctx, benchMessage(s.id, seq, o.Messages, due), nil); err != nil {
			return ignoreEnded(ctx, fmt.Errorf("bench: publish session %s sequence %d: %w", s.id, seq, err))
		}
		if s.next == len(s.seqs) {
			if n := open(); n != nil {
				cur[slot] = n
			} else {
				cur = slices.Delete(cur, slot, slot+1)
				continue
			}
		}
		slot++
	}
	return nil
}

// newSender opens a client and a sender on entity; done closes both.
func newSender(ctx context.Context, conn string, entity sbadapter.Entity) (_ *azservicebus.Sender, done func(), _ error) {
	client, err := azservicebus.NewClientFromConnectionString(conn, &azservicebus.ClientOptions{RetryOptions: publisherRetries})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: publisher: %w", err)
	}
	sender, err := client.NewSender(cmp.Or(entity.Queue, entity.Topic), nil)
	if err != nil {
		_ = client.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("bench: publisher: %w", err)
	}
	return sender, func() {
		_ = sender.Close(context.WithoutCancel(ctx))
		_ = client.Close(context.WithoutCancel(ctx))
	}, nil
}

// sessionSeqs is the order in which a session's messages 1..n are published.
func sessionSeqs(n int, arrival Arrival, rng *rand.Rand) []int64 {
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	switch arrival {
	case ArrivalShuffled:
		rng.Shuffle(len(seqs), func(a, b int) { seqs[a], seqs[b] = seqs[b], seqs[a] })
	case ArrivalReversed:
		slices.Reverse(seqs)
	}
	return seqs
}

// benchMessage is message seq of session id (of n), published at.
func benchMessage(id string, seq int64, n int, at time.Time) *azservicebus.Message {
	sid, mid := id, id+"/"+strconv.FormatInt(seq, 10)
	return &azservicebus.Message{
		SessionID: &sid, MessageID: &mid, Body: fmt.Appendf(nil, `{"session":%q,"step":%d}`, id, seq),
		ApplicationProperties: map[string]any{contract.SequenceProperty: seq, contract.LastProperty: seq == int64(n), publishedAtProperty: at.UnixNano()},
	}
}

// ignoreEnded returns nil for an error of the cell's end (ctx ended), else err.
func ignoreEnded(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// cellHandler is the replicas' handler: it fails a share of calls (a transient exception the
// engine retries), checks the order and records the publish → handler latency.
type cellHandler struct {
	checker *demo.Checker
	known   map[string]bool
	rate    float64

	calls, errors, foreign atomic.Uint64

	finished sessionsFinished

	mu        sync.Mutex
	latencies []time.Duration
}

// replicaConfig is what every replica of cell starts from; the replay window the order checker
// allows comes from it.
func (o Options) replicaConfig(cell Cell) worker.Config {
	cfg := worker.DefaultConfig()
	if o.AwaitCompletions {
		cfg.PipelineRuns = false
	}
	if o.ReorderWindow != nil {
		cfg.ReorderWindow = *o.ReorderWindow
	}
	cfg.EarlyMessages = cell.early()
	if o.DatabaseURL != "" {
		cfg.StateStore, cfg.DatabaseURL, cfg.MigrateOnStart = worker.StateStorePostgres, o.DatabaseURL, true
	}
	return cfg
}

// newCellHandler checks the order of messages in each of ids, allowing the engine's replay
// window (sequencer.EngineConfig.ReplayWindow), and fails a share rate of the calls.
func newCellHandler(ids []string, messages, replayWindow int, rate float64) *cellHandler {
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		known[id] = true
	}
	return &cellHandler{checker: demo.NewReplayChecker(ids, messages, replayWindow), known: known, rate: rate,
		latencies: make([]time.Duration, 0, len(ids)*messages)}
}

// Handle implements sequencer.Handler.
func (h *cellHandler) Handle(ctx context.Context, m *sequencer.Message) error {
	if !h.known[m.SessionID] {
		// A leftover of another run in a namespace given by connection string.
		h.foreign.Add(1)
		return nil
	}
	h.calls.Add(1)
	if h.rate > 0 && rand.Float64() < h.rate {
		h.errors.Add(1)
		return errInjected
	}
	if err := h.checker.Handle(ctx, m); err != nil {
		return err
	}
	lat := time.Duration(-1)
	if ns, ok := m.Properties[publishedAtProperty].(int64); ok {
		lat = time.Since(time.Unix(0, ns))
	}
	last := m.IsLast // read by the engine (contract.Parse)
	if lat >= 0 {
		h.mu.Lock()
		h.latencies = append(h.latencies, lat)
		h.mu.Unlock()
	}
	if last {
		h.finished.add()
	}
	return nil
}

// countingHandler counts the messages one replica handled, for the debug timeline.
type countingHandler struct {
	h       sequencer.Handler
	handled atomic.Uint64
}

// Handle implements sequencer.Handler.
func (c *countingHandler) Handle(ctx context.Context, m *sequencer.Message) error {
	err := c.h.Handle(ctx, m)
	if err == nil {
		c.handled.Add(1)
	}
	return err
}

// sampleTimeline logs, once a second at debug level until ctx ends, where the throttle's credits
// went: the credits the emulator charged and the operations it refused in that second, and per
// replica the messages handled, the credits its limiter took, its rate, the time its calls
// waited for credits and the server-busy answers it saw.
func sampleTimeline(ctx context.Context, log *slog.Logger, tag string, srv *emulator.Server, replicas []*worker.Client, counts []*countingHandler) {
	if srv == nil || !log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	type sample struct {
		handled uint64
		lim     sbadapter.LimiterStats
	}
	take := func() (emulator.PressureStats, []sample) {
		out := make([]sample, len(replicas))
		for i, w := range replicas {
			out[i] = sample{handled: counts[i].handled.Load(), lim: w.LimiterStats()}
		}
		return srv.PressureStats(), out
	}
	start := time.Now()
	prevP, prev := take()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, cur := take()
		handled, used, rate, waited, busy := make([]uint64, len(cur)), make([]int, len(cur)), make([]int, len(cur)), make([]int64, len(cur)), make([]uint64, len(cur))
		for i := range cur {
			handled[i] = cur[i].handled - prev[i].handled
			used[i] = int(cur[i].lim.Used - prev[i].lim.Used)
			rate[i] = int(cur[i].lim.Rate)
			waited[i] = (cur[i].lim.Waited - prev[i].lim.Waited).Milliseconds()
			busy[i] = cur[i].lim.Busy - prev[i].lim.Busy
		}
		log.DebugContext(ctx, "bench: timeline", slog.String("phase", tag), slog.Int("t", int(time.Since(start).Seconds()+0.5)),
			slog.Uint64("credits", p.Credits-prevP.Credits), slog.Uint64("refused", p.Throttled-prevP.Throttled),
			slog.Any("handled", handled), slog.Any("limiter_credits", used), slog.Any("rate", rate),
			slog.Any("waited_ms", waited), slog.Any("busy", busy))
		prevP, prev = p, cur
	}
}

// sessionsFinished counts the sessions a consumer finished, for the publisher's backlog. The
// zero value is ready.
type sessionsFinished struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // signaled (not closed) on each add
}

func (f *sessionsFinished) signal() chan struct{} {
	if f.changed == nil {
		f.changed = make(chan struct{}, 1)
	}
	return f.changed
}

func (f *sessionsFinished) add() {
	f.mu.Lock()
	f.n++
	ch := f.signal()
	f.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// waitBacklog waits until fewer than backlog of the first published sessions are unfinished.
func (f *sessionsFinished) waitBacklog(ctx context.Context, published, backlog int) error {
	for {
		f.mu.Lock()
		open, ch := published-f.n, f.signal()
		f.mu.Unlock()
		if open < backlog {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (h *cellHandler) percentiles() (p50, p99 time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.latencies) == 0 {
		return 0, 0
	}
	s := slices.Clone(h.latencies)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return at(0.50), at(0.99)
}

// counterValue sums a counter of reg (0 when absent).
func counterValue(reg *prometheus.Registry, name string) uint64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return uint64(sum)
}
