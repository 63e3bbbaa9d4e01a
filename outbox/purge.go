package outbox

import (
	"context"
	"fmt"
	"time"
)

// PurgeParams says what Purge forgets.
type PurgeParams struct {
	// Retention: sessions whose last message was sent longer ago than this are forgotten
	// (their id can start again at 1).
	Retention time.Duration
}

// PurgeResult counts what Purge deleted.
type PurgeResult struct {
	// Messages are sent last messages kept for the purge.
	Messages int64
	// Sessions are counters of ended sessions.
	Sessions int64
	// Pauses are pauses of sessions with nothing left to send.
	Pauses int64
}

// Purge forgets ended sessions whose last message was sent more than p.Retention ago
// (or, for sessions a Counter ended, that ended more than p.Retention ago), and pauses
// of sessions with nothing left to send. The relay calls it every PurgeInterval; it is
// exported for operators and tests. Sessions that never end keep their counter row (a
// few dozen bytes), since their next number must survive.
func Purge(ctx context.Context, db DB, p PurgeParams) (PurgeResult, error) {
	if p.Retention < 0 {
		return PurgeResult{}, fmt.Errorf("outbox: purge: negative retention %s", p.Retention)
	}
	var res PurgeResult
	if err := db.QueryRow(ctx, sqlPurge, p.Retention.Microseconds()).Scan(&res.Messages, &res.Sessions, &res.Pauses); err != nil {
		return PurgeResult{}, interpretError("purge", err)
	}
	return res, nil
}
