package soak

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/pgschema"
)

// Stores a soak runs with: the worker's SEQBUS_STATE_STORE values.
const (
	StoreServiceBus = "servicebus"
	StorePostgres   = "postgres"
)

// Options configure a soak. Zero fields take the defaults of WithDefaults.
type Options struct {
	// WorkerBin is the worker binary each replica runs (required).
	WorkerBin string
	// Sessions and Messages: Sessions sessions of Messages in-order messages each (100,000 × 3).
	Sessions, Messages int
	// Replicas worker processes (4), each handling SessionsPerReplica sessions at once (8, the
	// worker's default).
	Replicas, SessionsPerReplica int
	// Store is StoreServiceBus (the default) or StorePostgres; DatabaseURL the Postgres database
	// the postgres store gets a fresh schema in.
	Store       string
	DatabaseURL string
	// SweepInterval is the replicas' SEQBUS_SWEEP_INTERVAL (5s); IdleIntervals how many of them
	// are measured idle after the last message (5).
	SweepInterval time.Duration
	IdleIntervals int
	// CatchUp bounds the wait, after the last message, for the sweeper to read what the run
	// changed before the idle intervals are measured (10m).
	CatchUp time.Duration
	// Timeout bounds the run (1h).
	Timeout time.Duration
	// Env are settings (KEY=VALUE) the replicas get on top of the soak's.
	Env []string
	// Logger logs progress (discarded when nil).
	Logger *slog.Logger
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o Options) WithDefaults() Options {
	o.Sessions = cmp.Or(o.Sessions, 100_000)
	o.Messages = cmp.Or(o.Messages, 3)
	o.Replicas = cmp.Or(o.Replicas, 4)
	o.SessionsPerReplica = cmp.Or(o.SessionsPerReplica, 8)
	o.Store = cmp.Or(o.Store, StoreServiceBus)
	o.SweepInterval = cmp.Or(o.SweepInterval, 5*time.Second)
	o.IdleIntervals = cmp.Or(o.IdleIntervals, 5)
	o.CatchUp = cmp.Or(o.CatchUp, 10*time.Minute)
	o.Timeout = cmp.Or(o.Timeout, time.Hour)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the options a soak cannot run with.
func (o Options) Validate() error {
	var errs []error
	if o.WorkerBin == "" {
		errs = append(errs, errors.New("soak: a worker binary is required"))
	}
	if o.Sessions < 1 || o.Messages < 1 || o.Replicas < 1 || o.SessionsPerReplica < 1 || o.IdleIntervals < 1 {
		errs = append(errs, errors.New("soak: sessions, messages, replicas, sessions per replica and idle intervals must be at least 1"))
	}
	if o.SweepInterval <= 0 || o.Timeout <= 0 {
		errs = append(errs, errors.New("soak: the sweep interval and the timeout must be positive"))
	}
	switch o.Store {
	case StoreServiceBus:
	case StorePostgres:
		if o.DatabaseURL == "" {
			errs = append(errs, errors.New("soak: the postgres store needs a database URL"))
		}
	default:
		errs = append(errs, fmt.Errorf("soak: unknown store %q (servicebus or postgres)", o.Store))
	}
	return errors.Join(errs...)
}

// Slices is how many equal parts of the messages the report gives a rate for.
const Slices = 10

// Report is what one soak measured.
type Report struct {
	Store                        string
	Sessions, Messages, Replicas int
	Elapsed                      time.Duration
	// SliceRates are the messages per second handled in each tenth of the messages.
	SliceRates [Slices]float64
	// Calls are the replicas' own counts over the run: the engine's broker calls
	// (seqbus_broker_calls_total), the state loads and saves at the broker
	// (seqbus_state_loads_total and seqbus_state_saves_total with the Service Bus store; 0 with
	// Postgres, whose are DatabaseCalls) and the sweeper's
	// calls (seqbus_sweep_broker_calls_total, until the idle measurement begins: it reads the
	// sessions the run changed after their last change); Credits what the emulator charged (a message
	// operation 1, a management operation 10: Standard-tier credits).
	EngineCalls, StateCalls, SweepCalls, Credits float64
	// ScaleCalls are the scaling signal's broker calls over the run (seqbus_scale_broker_calls_total),
	// on the lease holder: not in the calls per message, which are the sessions' work.
	ScaleCalls    float64
	DatabaseCalls float64
	// PeakRSS is each replica's peak resident set (VmHWM), in bytes.
	PeakRSS []int64
	// CatchUp is how long the sweeper went on reading the run's changes after the last message
	// (beyond two intervals and the margin).
	CatchUp time.Duration
	// Idle is the same counts per sweep interval with nothing arriving, after the run.
	IdleCalls, IdleSweepCalls, IdleCredits float64
	// Violations counts messages handled below a sequence already handled in their session,
	// Duplicates messages handled again, Missing messages never handled.
	Violations, Duplicates, Missing int
}

// PerMessage is n divided by the messages of the run.
func (r Report) PerMessage(n float64) float64 { return n / float64(max(r.Sessions*r.Messages, 1)) }

// Run runs one soak: it starts the emulator, publishes every message, starts the replicas, waits
// until every message was handled, then measures o.IdleIntervals sweep intervals idle.
func Run(ctx context.Context, o Options) (Report, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rep := Report{Store: o.Store, Sessions: o.Sessions, Messages: o.Messages, Replicas: o.Replicas}

	srv, env, err := startEmulator(ctx, o.Logger.With(slog.String("component", "emulator")).WithGroup("emulator"), o.SweepInterval)
	if err != nil {
		return rep, fmt.Errorf("soak: %w", err)
	}
	defer srv.Close()
	env = append(env,
		"SEQBUS_SESSION_IDLE_TIMEOUT=1s",
		"SEQBUS_MAX_CONCURRENT_SESSIONS="+strconv.Itoa(o.SessionsPerReplica),
	)
	if o.Store == StorePostgres {
		pgEnv, _, drop, err := postgresEnv(ctx, o.DatabaseURL)
		if err != nil {
			return rep, err
		}
		defer drop()
		env = append(env, pgEnv...)
	}
	env = append(env, o.Env...)

	o.Logger.InfoContext(ctx, "soak: publishing", slog.Int("sessions", o.Sessions), slog.Int("messages", o.Messages))
	if err := publish(ctx, srv.ConnectionString(), o.Sessions, o.Messages); err != nil {
		return rep, err
	}
	c0 := srv.PressureStats().Credits

	total := o.Sessions * o.Messages
	tally := newTally(total)
	start := time.Now()
	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.stop()
		}
	}()
	for i := range o.Replicas {
		r, err := startReplica(ctx, o.WorkerBin, fmt.Sprintf("replica-%d", i), env, tally)
		if err != nil {
			return rep, err
		}
		replicas = append(replicas, r)
	}
	o.Logger.InfoContext(ctx, "soak: replicas started", slog.Int("replicas", o.Replicas))
	if err := tally.wait(ctx, o.Logger); err != nil {
		return rep, fmt.Errorf("soak: %d of %d messages handled: %w", tally.count(), total, err)
	}
	rep.Elapsed = time.Since(start)
	rep.SliceRates = tally.sliceRates(start)
	counts, err := scrapeAll(ctx, replicas)
	if err != nil {
		return rep, err
	}
	rep.EngineCalls, rep.ScaleCalls = counts.engine, counts.scale
	if o.Store == StorePostgres {
		rep.DatabaseCalls = counts.state
	} else {
		rep.StateCalls = counts.state
	}
	rep.Credits = float64(srv.PressureStats().Credits - c0)
	for _, r := range replicas {
		rep.PeakRSS = append(rep.PeakRSS, r.peakRSS())
	}

	// Idle: the sessions' last changes are past the sweeper's margin (5s) after two intervals
	// and a few seconds; a sweeper that reads each changed session once may still be reading
	// them: the idle cost is measured once it has caught up (an interval of at most 10 of its
	// calls), or after CatchUp.
	o.Logger.InfoContext(ctx, "soak: waiting for the sweeper to catch up")
	if err := sleep(ctx, 2*o.SweepInterval+6*time.Second); err != nil {
		return rep, err
	}
	caughtUp := time.Now()
	for prev, deadline := -1.0, time.Now().Add(o.CatchUp); time.Now().Before(deadline); {
		c, err := scrapeAll(ctx, replicas)
		if err != nil {
			return rep, err
		}
		if prev >= 0 && c.sweep-prev <= 10 {
			break
		}
		prev = c.sweep
		if err := sleep(ctx, o.SweepInterval); err != nil {
			return rep, err
		}
	}
	rep.CatchUp = time.Since(caughtUp)
	o.Logger.InfoContext(ctx, "soak: idle", slog.Int("intervals", o.IdleIntervals))
	i0, err := scrapeAll(ctx, replicas)
	if err != nil {
		return rep, err
	}
	// The sweeper reads the sessions the run changed after their last change: its calls until
	// now are the run's.
	rep.SweepCalls = i0.sweep
	ic0 := srv.PressureStats().Credits
	if err := sleep(ctx, time.Duration(o.IdleIntervals)*o.SweepInterval); err != nil {
		return rep, err
	}
	i1, err := scrapeAll(ctx, replicas)
	if err != nil {
		return rep, err
	}
	n := float64(o.IdleIntervals)
	rep.IdleCalls = (i1.engine - i0.engine) / n
	if o.Store != StorePostgres {
		rep.IdleCalls += (i1.state - i0.state) / n
	}
	rep.IdleSweepCalls = (i1.sweep - i0.sweep) / n
	rep.IdleCredits = float64(srv.PressureStats().Credits-ic0) / n
	for i, r := range replicas {
		rep.PeakRSS[i] = max(rep.PeakRSS[i], r.peakRSS())
		if err := r.exitErr(); err != nil {
			return rep, fmt.Errorf("soak: %s exited during the run: %w", r.name, err)
		}
	}
	rep.Violations, rep.Duplicates, rep.Missing = tally.verdict()
	return rep, nil
}

const queue = "soak"

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// postgresEnv creates a fresh schema (see postgresSchema) and returns the worker settings that
// use it, its URL and what drops it.
func postgresEnv(ctx context.Context, url string) (env []string, schemaURL string, drop func(), err error) {
	schemaURL, drop, err = postgresSchema(ctx, url)
	if err != nil {
		return nil, "", nil, fmt.Errorf("soak: %w", err)
	}
	return []string{"SEQBUS_STATE_STORE=postgres", "SEQBUS_DATABASE_URL=" + schemaURL}, schemaURL, drop, nil
}

// postgresSchema creates a migrated schema in url and returns the URL of the database with that
// schema as the search path (the workers connect on their own) and a function that drops it.
func postgresSchema(ctx context.Context, url string) (string, func(), error) {
	s, err := pgschema.Create(ctx, url, "seqbus_soak", 0)
	if err != nil {
		return "", nil, err
	}
	s.Pool.Close() // the workers connect on their own; Drop needs no pool
	return s.URL, s.Drop, nil
}

// publish sends every session's messages in order, one batch per session, from 8 senders.
func publish(ctx context.Context, conn string, sessions, messages int) error {
	client, err := azservicebus.NewClientFromConnectionString(conn, nil)
	if err != nil {
		return fmt.Errorf("soak: publisher: %w", err)
	}
	defer client.Close(context.WithoutCancel(ctx))
	const senders = 8
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			sender, err := client.NewSender(queue, nil)
			if err != nil {
				errs <- fmt.Errorf("soak: publisher: %w", err)
				return
			}
			defer sender.Close(context.WithoutCancel(ctx))
			for i := w; i < sessions; i += senders {
				if err := publishSession(ctx, sender, SessionID(i), messages); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

// SessionID is the id of the soak's session i.
func SessionID(i int) string { return fmt.Sprintf("soak-%06d", i) }

func publishSession(ctx context.Context, sender *azservicebus.Sender, id string, messages int) error {
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		return fmt.Errorf("soak: publish session %s: %w", id, err)
	}
	for seq := 1; seq <= messages; seq++ {
		sid, mid := id, id+"/"+strconv.Itoa(seq)
		m := &azservicebus.Message{SessionID: &sid, MessageID: &mid, Body: []byte("{}"),
			ApplicationProperties: map[string]any{contract.SequenceProperty: int64(seq), contract.LastProperty: seq == messages}}
		if err := batch.AddMessage(m, nil); err != nil {
			return fmt.Errorf("soak: publish session %s sequence %d: %w", id, seq, err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		return fmt.Errorf("soak: publish session %s: %w", id, err)
	}
	return nil
}

// tally counts the messages the replicas handled (their log handler's lines) and checks the
// order within each session.
type tally struct {
	total int

	mu      sync.Mutex
	last    map[string]int64
	handled int
	// marks[k] is when the k-th tenth of the messages had been handled.
	marks      [Slices]time.Time
	violations int
	duplicates int
	done       chan struct{}
}

func newTally(total int) *tally {
	return &tally{total: total, last: map[string]int64{}, done: make(chan struct{})}
}

func (t *tally) add(r handler.LogRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.last[r.SessionID]
	switch {
	case r.Sequence == prev:
		t.duplicates++
		return
	case r.Sequence < prev:
		t.violations++
		return
	}
	t.last[r.SessionID] = r.Sequence
	t.handled++
	for k := range Slices {
		if t.marks[k].IsZero() && t.handled*Slices >= (k+1)*t.total {
			t.marks[k] = time.Now()
		}
	}
	if t.handled == t.total {
		close(t.done)
	}
}

func (t *tally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handled
}

// wait returns when every message was handled, logging progress every 10 s.
func (t *tally) wait(ctx context.Context, log *slog.Logger) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			log.InfoContext(ctx, "soak: progress", slog.Int("handled", t.count()), slog.Int("total", t.total))
		}
	}
}

func (t *tally) sliceRates(start time.Time) [Slices]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out [Slices]float64
	prev := start
	for k, at := range t.marks {
		if d := at.Sub(prev).Seconds(); d > 0 {
			out[k] = float64(t.total) / Slices / d
		}
		prev = at
	}
	return out
}

// verdict returns the order violations, the duplicates and the messages never handled (those
// below each session's last handled sequence are counted handled: the order check catches a
// skipped one as a violation when it comes).
func (t *tally) verdict() (violations, duplicates, missing int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.violations, t.duplicates, t.total - t.handled
}

// replica is one worker process.
type replica struct {
	name   string
	cmd    *exec.Cmd
	addr   string
	stderr *lockedTail
	done   chan struct{}
	err    error
}

func startReplica(ctx context.Context, bin, name string, env []string, t *tally) (*replica, error) {
	r := &replica{name: name, stderr: &lockedTail{}, done: make(chan struct{})}
	// A free port of its own: the replica logs its address only at level info, which a soak
	// does not want on stderr for every session.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("soak: %s: a free port: %w", name, err)
	}
	r.addr = l.Addr().String()
	_ = l.Close()
	r.cmd = exec.Command(bin)
	r.cmd.Env = append(cleanEnv(), append(env, "SEQBUS_HTTP_ADDR="+r.addr)...)
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("soak: %s: %w", name, err)
	}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("soak: %s: %w", name, err)
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("soak: start %s (%s): %w", name, bin, err)
	}
	var pipes sync.WaitGroup
	pipes.Go(func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			var rec handler.LogRecord
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.SessionID != "" {
				t.add(rec)
			}
		}
	})
	pipes.Go(func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			r.stderr.add(sc.Text())
		}
	})
	go func() {
		pipes.Wait()
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := scrape(ctx, r.addr); err == nil {
			return r, nil
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("soak: %s exited at start: %v: %s", name, r.err, r.stderr.String())
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("soak: %s did not serve /metrics in 30s: %s", name, r.stderr.String())
		}
	}
}

// cleanEnv is this process's environment without SEQBUS_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEQBUS_") {
			env = append(env, kv)
		}
	}
	return env
}

// exitErr says why the replica exited, nil while it runs.
func (r *replica) exitErr() error {
	select {
	case <-r.done:
		return fmt.Errorf("%v: %s", r.err, r.stderr.String())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to 30 s, then kills.
func (r *replica) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// peakRSS reads the process's VmHWM (0 once it has exited or where /proc has none).
func (r *replica) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// counts are summed counters of the replicas' /metrics; state is the state store's loads and
// saves, scale the scaling signal's broker calls (seqbus_scale_broker_calls_total).
type counts struct{ engine, state, sweep, scale float64 }

func scrapeAll(ctx context.Context, rs []*replica) (counts, error) {
	var c counts
	for _, r := range rs {
		fams, err := scrape(ctx, r.addr)
		if err != nil {
			return c, fmt.Errorf("soak: scrape %s: %w", r.name, err)
		}
		c.engine += sum(fams["seqbus_broker_calls_total"])
		c.state += sum(fams["seqbus_state_saves_total"]) + sum(fams["seqbus_state_loads_total"])
		c.sweep += sum(fams["seqbus_sweep_broker_calls_total"])
		c.scale += sum(fams["seqbus_scale_broker_calls_total"])
	}
	return c, nil
}

func scrape(ctx context.Context, addr string) (map[string]*familyValues, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]*familyValues{}
	for name, f := range fams {
		v := &familyValues{}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				v.values = append(v.values, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				v.values = append(v.values, m.GetGauge().GetValue())
			}
		}
		out[name] = v
	}
	return out, nil
}

type familyValues struct{ values []float64 }

func sum(f *familyValues) float64 {
	if f == nil {
		return 0
	}
	var s float64
	for _, v := range f.values {
		s += v
	}
	return s
}

// lockedTail keeps the last 4 KiB of a process's stderr for error messages.
type lockedTail struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedTail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, line...)
	l.b = append(l.b, '\n')
	if len(l.b) > 4096 {
		l.b = l.b[len(l.b)-4096:]
	}
}

func (l *lockedTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// startEmulator starts an emulator that logs to log and counts what each operation costs
// without ever throttling, with the soak's session-enabled queue, and returns it with the
// settings that point a worker at it (sweeping every sweep).
func startEmulator(ctx context.Context, log *slog.Logger, sweep time.Duration) (*emulator.Server, []string, error) {
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-",
		Pressure: emulator.Pressure{CreditsPerSecond: 1 << 40},
		Logger:   log})
	if err != nil {
		return nil, nil, fmt.Errorf("start the emulator: %w", err)
	}
	if err := srv.Broker().CreateQueue(queue, broker.EntityProperties{
		RequiresSession: true, LockDuration: 30 * time.Second, MaxDeliveryCount: 10,
	}); err != nil {
		srv.Close()
		return nil, nil, fmt.Errorf("create the queue: %w", err)
	}
	return srv, []string{
		"SEQBUS_CONNECTION_STRING=" + srv.ConnectionString(),
		"SEQBUS_QUEUE=" + queue,
		"SEQBUS_HANDLER=log",
		"SEQBUS_LOG_LEVEL=warn",
		"SEQBUS_SWEEP_INTERVAL=" + sweep.String(),
	}, nil
}
