package e2e

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// timedStore is a state store that times its loads and saves, so that a benchmark can say what
// the store's round trips cost while the cell runs: on a shared machine they take far longer
// than on an idle one, and the worker waits for one of them before a session's first handler
// call. It must wrap a store that is neither an AtomicStore nor a SessionBoundStore (the engine
// looks for those, and the wrapper hides them).
type timedStore struct {
	sequencer.StateStore
	mu           sync.Mutex
	loads, saves []time.Duration
}

func (s *timedStore) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	start := time.Now()
	st, ver, err := s.StateStore.Load(ctx, p)
	s.add(&s.loads, time.Since(start))
	return st, ver, err
}

func (s *timedStore) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	start := time.Now()
	ver, err := s.StateStore.Save(ctx, p)
	s.add(&s.saves, time.Since(start))
	return ver, err
}

func (s *timedStore) add(to *[]time.Duration, d time.Duration) {
	s.mu.Lock()
	*to = append(*to, d)
	s.mu.Unlock()
}

// ms is the p-th percentile (0 < p < 1) of ds in milliseconds, 0 when ds is empty.
func ms(ds []time.Duration, p float64) float64 {
	return float64(percentile(slices.Sorted(slices.Values(ds)), p)) / float64(time.Millisecond)
}
