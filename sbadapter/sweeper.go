package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// SessionLister lists ids of sessions that may need an accept by id. In Service Bus mode it is
// the Source itself (the SDK's list-sessions pager); in Postgres mode the store's stranded query
// fits through SessionListerFunc.
type SessionLister interface {
	ListSessions(ctx context.Context) ([]string, error)
}

// SessionListerFunc adapts a function to SessionLister.
type SessionListerFunc func(ctx context.Context) ([]string, error)

// ListSessions calls f.
func (f SessionListerFunc) ListSessions(ctx context.Context) ([]string, error) { return f(ctx) }

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// Lister finds candidate sessions. Required.
	Lister SessionLister
	// Handoff gives one session id to the runner, which accepts it by id. It should not block
	// for long (a full runner may drop the id: the next sweep offers it again). Required.
	Handoff func(ctx context.Context, sessionID string)
	// Interval between sweeps (default 30s). The first sweep runs at once.
	Interval time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
}

// Sweeper periodically finds stranded sessions and hands them to the runner. Service Bus never
// offers a session to accept-next when its only messages are deferred, so a session whose next
// message was deferred before a crash would wait forever without it.
type Sweeper struct {
	cfg    SweeperConfig
	logger *slog.Logger
}

// NewSweeper returns a sweeper; it does nothing until Run.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Lister == nil {
		return nil, errors.New("sbadapter: sweeper needs a Lister")
	}
	if cfg.Handoff == nil {
		return nil, errors.New("sbadapter: sweeper needs a Handoff")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{cfg: cfg, logger: logger}, nil
}

// Run sweeps at once and then every Interval until ctx ends. It returns nil when ctx is
// cancelled; a failed sweep is logged and retried at the next tick.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.SweepOnce(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sbadapter sweeper: sweep failed", slog.Any("error", err), slog.String("class", Classify(err).String()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SweepOnce lists candidate sessions once and hands each to the runner. It returns how many it
// handed off.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	ids, err := s.cfg.Lister.ListSessions(ctx)
	if err != nil {
		return 0, fmt.Errorf("sbadapter sweeper: list sessions: %w", err)
	}
	n := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			return n, nil
		}
		s.cfg.Handoff(ctx, id)
		n++
	}
	if n > 0 {
		s.logger.DebugContext(ctx, "sbadapter sweeper: handed off sessions", slog.Int("num_sessions", n))
	}
	return n, nil
}
