package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// StrandedFilterConfig configures StrandedFilter.
type StrandedFilterConfig struct {
	// Lister lists candidate sessions, such as Source.ListSessions. Required.
	Lister SessionLister
	// Source accepts each candidate by id to read its state. Required.
	Source sequencer.SessionSource
	// Store reads the state of an accepted session. Required.
	Store sequencer.StateStore
	// PerSessionTimeout bounds the accept, load and close of one candidate (default 10s).
	PerSessionTimeout time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
}

// StrandedFilter narrows a broad session list (Service Bus lists every session that has active
// messages or any stored state, ended ones included) to the sessions that are stranded: their
// stored state says the next expected message is deferred at the broker, which accept-next never
// offers. It briefly locks each candidate to read its state, skipping sessions another receiver
// holds (they are being processed). Ended sessions thus cost one accept and one state read per
// sweep, instead of a runner slot for a whole idle timeout.
func StrandedFilter(cfg StrandedFilterConfig) (SessionLister, error) {
	if cfg.Lister == nil || cfg.Source == nil || cfg.Store == nil {
		return nil, errors.New("sbadapter: StrandedFilter needs a Lister, a Source and a Store")
	}
	if cfg.PerSessionTimeout <= 0 {
		cfg.PerSessionTimeout = 10 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return SessionListerFunc(func(ctx context.Context) ([]string, error) {
		ids, err := cfg.Lister.ListSessions(ctx)
		if err != nil {
			return nil, err
		}
		var stranded []string
		for _, id := range ids {
			if ctx.Err() != nil {
				return stranded, nil
			}
			due, err := dueDeferred(ctx, cfg, id)
			switch {
			case errors.Is(err, sequencer.ErrSessionLocked):
				// Someone is processing it.
			case err != nil:
				logger.WarnContext(ctx, "sbadapter sweeper: reading session state", slog.String("session_id", id), slog.Any("error", err))
			case due:
				stranded = append(stranded, id)
			}
		}
		return stranded, nil
	}), nil
}

func dueDeferred(ctx context.Context, cfg StrandedFilterConfig, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.PerSessionTimeout)
	defer cancel()
	sess, err := cfg.Source.Accept(ctx, id)
	if err != nil {
		return false, err
	}
	defer func() {
		// Release the lock even when ctx has ended, but never wait on a hung connection for
		// longer than one candidate may take: the sweep would stop for good.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.PerSessionTimeout)
		defer ccancel()
		_ = sess.Close(cctx)
	}()
	st, _, err := cfg.Store.Load(ctx, sequencer.LoadParams{Session: sess})
	if err != nil {
		return false, fmt.Errorf("load state of session %q: %w", id, err)
	}
	return st.EndedAt.IsZero() && st.NeedsWake(), nil
}
