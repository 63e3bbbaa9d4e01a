package clock

import (
	"context"
	"time"
)

// Sleep waits d on c, or until ctx ends, whichever comes first. It returns ctx's error when ctx
// ended first, nil otherwise. A non-positive d returns at once (with ctx's error if it has ended).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
