package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Middleware wraps a handler with extra behaviour.
type Middleware func(sequencer.Handler) sequencer.Handler

// Chain wraps h with mws so that the first middleware is the outermost: Chain(h, a, b) calls
// a(b(h)).
func Chain(h sequencer.Handler, mws ...Middleware) sequencer.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ErrTimeout is returned (wrapped) by WithTimeout when the handler did not return in time.
var ErrTimeout = errors.New("handler: timed out")

// WithTimeout bounds each call to d: the handler's ctx is cancelled after d, and if the handler
// returns an error after its deadline passed, the error also matches ErrTimeout. A d of zero or less
// disables the bound.
func WithTimeout(d time.Duration) Middleware {
	return func(next sequencer.Handler) sequencer.Handler {
		if d <= 0 {
			return next
		}
		return sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next.Handle(ctx, m)
			if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
				return fmt.Errorf("%w after %s: %w", ErrTimeout, d, err)
			}
			return err
		})
	}
}

// PanicError is the error a recovered handler panic becomes: the engine's own
// (sequencer.PanicError), so that a panic reads the same wherever it was caught.
type PanicError = sequencer.PanicError

// WithRecover turns a panic in the handler into a *PanicError (through sequencer.CallHandler,
// seqbus's one recovery) and logs it with its stack, so one bad message is retried (and
// eventually handled by the poison policy) instead of killing the worker. A nil logger discards
// the log.
func WithRecover(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(next sequencer.Handler) sequencer.Handler {
		return sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
			err := sequencer.CallHandler(ctx, next, m)
			if pe, ok := err.(*PanicError); ok {
				logger.ErrorContext(ctx, "handler: recovered panic",
					slog.String("session_id", m.SessionID),
					slog.Int64("sequence", m.Sequence),
					slog.String("message_id", m.MessageID),
					slog.Any("panic", pe.Value),
					slog.String("stack", string(pe.Stack)))
			}
			return err
		})
	}
}

// Metrics counts handler calls. The zero value is ready to use and safe for concurrent use.
type Metrics struct {
	calls     atomic.Uint64
	succeeded atomic.Uint64
	failed    atomic.Uint64
	panics    atomic.Uint64
	timeouts  atomic.Uint64
	nanos     atomic.Int64
}

// MetricsSnapshot is a point-in-time copy of Metrics.
type MetricsSnapshot struct {
	Calls, Succeeded, Failed, Panics, Timeouts uint64
	// TotalDuration is the summed time spent in the handler.
	TotalDuration time.Duration
}

// Snapshot returns the current counts.
func (m *Metrics) Snapshot() MetricsSnapshot {
	return MetricsSnapshot{
		Calls:         m.calls.Load(),
		Succeeded:     m.succeeded.Load(),
		Failed:        m.failed.Load(),
		Panics:        m.panics.Load(),
		Timeouts:      m.timeouts.Load(),
		TotalDuration: time.Duration(m.nanos.Load()),
	}
}

// Middleware returns the middleware that feeds m. Place it outside WithRecover and WithTimeout to
// count panics and timeouts.
func (m *Metrics) Middleware() Middleware {
	return func(next sequencer.Handler) sequencer.Handler {
		return sequencer.HandlerFunc(func(ctx context.Context, msg *sequencer.Message) error {
			start := time.Now()
			m.calls.Add(1)
			err := next.Handle(ctx, msg)
			m.nanos.Add(int64(time.Since(start)))
			if err == nil {
				m.succeeded.Add(1)
				return nil
			}
			m.failed.Add(1)
			var pe *PanicError
			if errors.As(err, &pe) {
				m.panics.Add(1)
			}
			if errors.Is(err, ErrTimeout) {
				m.timeouts.Add(1)
			}
			return err
		})
	}
}
