package sessionstate

import (
	"context"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// WithLock locks session id on source, runs fn with it and releases it, all within perSession.
// busy reports that another receiver holds the session (fn did not run). It is the one way a
// tool beside the runner looks into a session: the scans here, and the worker's scaling signal,
// which peeks a session's messages under its lock.
func WithLock(ctx context.Context, source sequencer.SessionSource, perSession time.Duration, id string, fn func(context.Context, sequencer.Session) error) (busy bool, err error) {
	return withLock(ctx, source, perSession, id, fn)
}
