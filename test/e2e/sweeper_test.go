package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/operator"
)

// TestSweeperLeaseMovesOnKill: of three replicas one sweeps (seqbus_sweeper_lease 1, the others
// 0); SIGKILL it and another takes the lease within one sweep interval, and sweeps: a session
// stranded on a gap past its timeout (gap policy skip) is woken by the new holder. Both stores.
func TestSweeperLeaseMovesOnKill(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=log",
				"SEQBUS_GAP_TIMEOUT=1s", "SEQBUS_GAP_POLICY=skip")...)
			workers := []*proc{startWorker(t, "w0", env), startWorker(t, "w1", env), startWorker(t, "w2", env)}
			addrs := make([]string, len(workers))
			for i, w := range workers {
				addrs[i] = w.httpAddr(t)
			}
			holders := func(alive []int) []int {
				var out []int
				for _, i := range alive {
					if metricValue(scrape(t, addrs[i]), "seqbus_sweeper_lease", nil) == 1 {
						out = append(out, i)
					}
				}
				return out
			}
			var held []int
			waitFor(t, 15*time.Second, func() bool { held = holders([]int{0, 1, 2}); return len(held) == 1 },
				func() string { return fmt.Sprintf("holders %v", held) })
			holder := held[0]
			var alive []int
			for i := range workers {
				if i != holder {
					alive = append(alive, i)
				}
			}
			workers[holder].kill(t)
			killed := time.Now()
			waitFor(t, 15*time.Second, func() bool { held = holders(alive); return len(held) == 1 },
				func() string { return fmt.Sprintf("holders among %v: %v", alive, held) })
			took := time.Since(killed)
			t.Logf("the lease moved from w%d to w%d %s after the SIGKILL (sweep interval 1s)", holder, held[0], took.Round(10*time.Millisecond))
			require.Less(t, took, 3*time.Second, "within about one interval (1s), plus the scrape")

			// The new holder sweeps: a gap past its timeout is given up.
			f.publish(t, []demo.Publication{{SessionID: "g", Sequence: 1}, {SessionID: "g", Sequence: 3, Last: true}})
			waitFor(t, waitLong, func() bool {
				var all []int64
				for _, i := range alive {
					all = append(all, handledSequences(t, workers[i], "g")...)
				}
				return len(all) == 2
			}, func() string { return "the gap was not skipped" })
			for _, i := range alive {
				workers[i].stop(t)
			}
		})
	}
}

// TestTombstoneExpires: an ended session's tombstone is cleared once SEQBUS_TOMBSTONE_TTL has
// passed, by the sweeper, with either store; a late copy of its first sequence afterwards is
// handled again, as the start of a new sequence (the delivery guarantee of docs/concepts.md).
func TestTombstoneExpires(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=log", "SEQBUS_TOMBSTONE_TTL=2s")...)
			w := startWorker(t, "worker", env)
			f.publish(t, []demo.Publication{{SessionID: "t", Sequence: 1}, {SessionID: "t", Sequence: 2, Last: true}})
			waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "t")) == 2 },
				func() string { return fmt.Sprint(handledSequences(t, w, "t")) })
			// A copy within the TTL is a duplicate.
			f.publish(t, []demo.Publication{{SessionID: "t", Sequence: 2, Last: true}})
			waitFor(t, waitLong, func() bool { return f.counts(t).Active == 0 }, func() string { return "the copy was not settled" })
			require.Equal(t, []int64{1, 2}, handledSequences(t, w, "t"))

			waitFor(t, waitLong, func() bool {
				return len(cliJSON[operator.ListResult](t, env, "sessions", "list", "--ended").Sessions) == 0
			}, func() string { return fmt.Sprintf("%+v", runCLI(t, env, "sessions", "list", "--ended")) })

			f.publish(t, []demo.Publication{{SessionID: "t", Sequence: 1}})
			waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "t")) == 3 },
				func() string { return fmt.Sprint(handledSequences(t, w, "t")) })
			require.Equal(t, []int64{1, 2, 1}, handledSequences(t, w, "t"), "after the TTL a late copy starts a new sequence")
			w.stop(t)
		})
	}
}
