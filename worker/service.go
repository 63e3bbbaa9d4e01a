package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// service is the lifecycle of every long-running part of a seqbus process (the runner, the
// unordered consumer, the sweeper, the tombstone purge, the readiness checks, the relay):
// Start returns once it runs; Stop lets the work in hand finish, canceling it when ctx ends
// first; StopAndCancel cancels it; Stopped is closed once it has stopped. sequencer.Runner has
// it too.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
	Stopped() <-chan struct{}
}

// Stop causes, as context.Cause of the contexts a base hands its run function.
var (
	// ErrStopped is the cause of a stop asked for with Stop or StopAndCancel.
	ErrStopped = errors.New("worker: stopped")
	// ErrSoftStopTimeout is the cause, and Stop's error, when the work in hand did not finish
	// within Service.SoftStopTimeout and was canceled.
	ErrSoftStopTimeout = errors.New("worker: the graceful stop did not finish in time; the work in hand was canceled")
)

// base runs one function with the service lifecycle. run gets two contexts: soft ends when a
// stop begins (take no new work), hard when the work in hand must be canceled (StopAndCancel,
// ctx of Start canceled, or Stop's ctx ended); context.Cause tells which. What run returns is
// Err's.
type base struct {
	name string
	log  *slog.Logger
	run  func(soft, hard context.Context) error

	mu                     sync.Mutex
	started                bool
	softCancel, hardCancel context.CancelCauseFunc
	done                   chan struct{}
	err                    error
}

var _ service = (*base)(nil)

func newBase(name string, log *slog.Logger, run func(soft, hard context.Context) error) *base {
	return &base{name: name, log: log, run: run, done: make(chan struct{})}
}

// Start runs the function in a goroutine of its own. Canceling ctx later cancels the work, as
// StopAndCancel does.
func (b *base) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return fmt.Errorf("%s: already started", b.name)
	}
	b.started = true
	hard, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	soft, softCancel := context.WithCancelCause(hard)
	b.softCancel, b.hardCancel = softCancel, hardCancel
	unwatch := context.AfterFunc(ctx, func() { hardCancel(context.Cause(ctx)) })
	go func() {
		defer close(b.done)
		defer unwatch()
		err := b.run(soft, hard)
		if err != nil && hard.Err() == nil {
			b.log.ErrorContext(soft, b.name+": stopped on a failure", slog.Any("error", err))
		}
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}()
	return nil
}

// Stop ends soft and waits; when ctx ends first it ends hard too, waits, and returns ctx's
// error.
func (b *base) Stop(ctx context.Context) error {
	if !b.begin(false) {
		return nil
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	b.hardCancel(context.Cause(ctx))
	<-b.done
	return fmt.Errorf("%s: stop: %w", b.name, ctx.Err())
}

// StopAndCancel ends both contexts and waits until ctx ends.
func (b *base) StopAndCancel(ctx context.Context) error {
	if !b.begin(true) {
		return nil
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stop and cancel: %w", b.name, ctx.Err())
	}
}

// begin starts a stop; it reports false when the service never started.
func (b *base) begin(hard bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		return false
	}
	b.softCancel(ErrStopped)
	if hard {
		b.hardCancel(ErrStopped)
	}
	return true
}

// Stopped is closed once the function has returned (never, if the service never started).
func (b *base) Stopped() <-chan struct{} { return b.done }

// Err returns what the function returned (nil while it runs).
func (b *base) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// every calls fn at once and then every interval on clk (measured from the start of one call
// to the start of the next) until ctx ends.
func every(ctx context.Context, clk clock.Clock, interval time.Duration, fn func(ctx context.Context)) {
	for {
		start := clk.Now()
		fn(ctx)
		if clock.Sleep(ctx, clk, interval-clk.Now().Sub(start)) != nil {
			return
		}
	}
}

// stopAll stops services in order (each with StopAndCancel when cancel), and joins their
// errors.
func stopAll(ctx context.Context, cancel bool, services ...service) error {
	var errs []error
	for _, s := range services {
		if s == nil {
			continue
		}
		var err error
		if cancel {
			err = s.StopAndCancel(ctx)
		} else {
			err = s.Stop(ctx)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// softStop stops s gracefully within timeout on clk: when the work in hand has not finished by
// then, it is canceled and softStop returns ErrSoftStopTimeout. A StopAndCancel meanwhile (a
// second signal) is no failure. ctx bounds the whole stop.
func softStop(ctx context.Context, s service, clk clock.Clock, timeout time.Duration, log *slog.Logger) error {
	expired := make(chan struct{})
	t := clk.AfterFunc(timeout, func() {
		close(expired)
		log.WarnContext(ctx, "worker: graceful stop incomplete, canceling the work in hand", slog.String("soft_stop_timeout", timeout.String()))
		_ = s.StopAndCancel(ctx)
	})
	err := s.Stop(ctx)
	if !t.Stop() {
		<-expired
		return errors.Join(err, fmt.Errorf("%w (%s=%s)", ErrSoftStopTimeout, envVar(reflect.TypeFor[Service](), "SoftStopTimeout"), timeout))
	}
	return err
}
