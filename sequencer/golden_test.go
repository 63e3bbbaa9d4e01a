package sequencer_test

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// The golden traces pin down what the engine does, call by call, in the property test's
// recorded scenarios: every broker and store call (with the messages it settles or returns),
// every handler call and its result, every state saved, every run's outcome, and the end state.
// A change to the engine that is meant to keep its behaviour (a refactoring) must leave them
// identical; one that changes behaviour on purpose rewrites them with -update-golden and shows
// the difference in review.

var updateGolden = flag.Bool("update-golden", false, "rewrite sequencer/testdata/golden from the current engine")

// propTrace records one case. A nil *propTrace records nothing.
//
// Completions that run in the background (MaxPendingSettlements > 1) finish in no fixed order
// relative to the run's other calls; the trace lists them sorted at the end of each run, where
// RunSession has awaited them all. Only traces that are deterministic are recorded: without
// pipelining every call is made on the run's goroutine; with it, only runs without faults (a
// fault at "call k" counts background calls too).
type propTrace struct {
	lines []string
	// background: completions run in the background; held are the ones seen in the current run.
	background bool
	held       []string
}

func (tr *propTrace) add(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

func (tr *propTrace) call(store *sequencertest.Store, c sequencertest.Call) {
	if tr == nil {
		return
	}
	line := fmt.Sprintf("%s %s %s", map[sequencertest.Phase]string{sequencertest.Before: ">", sequencertest.After: "<"}[c.Phase], c.Op, c.SessionID)
	if len(c.BrokerSequences) > 0 {
		line += fmt.Sprint(" ", c.BrokerSequences)
	}
	if c.Op == "save" && c.Phase == sequencertest.After {
		st, ver := store.Get(c.SessionID)
		line += fmt.Sprintf(" v%d %s", ver, stateString(st))
	}
	if tr.background && c.Op == "complete" {
		tr.held = append(tr.held, line)
		return
	}
	tr.lines = append(tr.lines, line)
}

func (tr *propTrace) fault(c sequencertest.Call, expire, crash bool) {
	if tr == nil {
		return
	}
	kind := "inject"
	switch {
	case expire:
		kind = "expire locks"
	case crash:
		kind = "crash"
	}
	tr.add("! %s at %s", kind, c)
}

func (tr *propTrace) handler(m *sequencer.Message, result string) {
	if tr == nil {
		return
	}
	tr.add("handle %s seq=%d bs=%d dc=%d: %s", m.SessionID, m.Sequence, m.BrokerSequence, m.DeliveryCount, result)
}

func (tr *propTrace) outcome(id, byID string, opts *sequencer.RunOptions, out sequencer.Outcome, err error) {
	if tr == nil {
		return
	}
	if len(tr.held) > 0 {
		slices.Sort(tr.held)
		tr.add("background completions: %s", strings.Join(tr.held, "; "))
		tr.held = nil
	}
	how := "next"
	switch {
	case opts != nil && opts.Resume != nil:
		how = fmt.Sprintf("resume skip=%v", opts.Resume.Skip)
	case byID != "":
		how = "by id"
	case opts != nil && opts.Stop != nil:
		how = "next, stopping"
	}
	tr.add("run %s (%s): %s, error %v", id, how, out, err != nil)
}

func (tr *propTrace) final(store *sequencertest.Store, broker *sequencertest.Broker) {
	if tr == nil {
		return
	}
	ids := store.SessionIDs()
	slices.Sort(ids)
	for _, id := range ids {
		st, ver := store.Get(id)
		tr.add("final %s v%d %s", id, ver, stateString(st))
	}
	for _, d := range broker.DeadLetters() {
		tr.add("dead letter %s bs=%d %s: %s", d.Message.SessionID, d.Message.BrokerSequence, d.Reason, d.Description)
	}
}

// stateString prints a state completely and in a fixed order (fmt prints maps sorted).
func stateString(st *sequencer.State) string {
	if st == nil {
		return "none"
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "next=%d last=%d deferred=%v inflight=%v skipped=%v ended=%s gap=%s updated=%s counters=%+v",
		st.Next, st.Last, st.Deferred, st.InFlight, st.SkippedPoison, at(st.EndedAt), at(st.GapSince), at(st.UpdatedAt), st.Counters)
	if p := st.Parked; p != nil {
		fmt.Fprintf(&b, " parked={%d %d %q %s}", p.Sequence, p.BrokerSequence, p.Reason, at(p.At))
	}
	if bl := st.Blocked; bl != nil {
		fmt.Fprintf(&b, " blocked={%d %d %q %s %d}", bl.Sequence, bl.BrokerSequence, bl.Reason, at(bl.Since), bl.Times)
	}
	return b.String()
}

// traceCase runs c and returns its trace.
func traceCase(t *testing.T, seed uint64, c *propCase) []string {
	c.trace = &propTrace{background: c.cfg.MaxPendingSettlements > 1}
	var tot propTotals
	runCase(t, seed, c, &tot)
	return c.trace.lines
}

// goldenSeeds are the property test's cases traced whole, each with its own configuration and
// random faults: seed 201, the crash scenarios' seeds and the seeds 200–239, of those whose trace
// is deterministic (see propTrace).
func goldenSeeds() []uint64 {
	candidates := []uint64{13, 14, 17, 24, 29, 37, 43}
	for seed := uint64(200); seed < 240; seed++ {
		candidates = append(candidates, seed)
	}
	var seeds []uint64
	for _, seed := range candidates {
		if c := newPropCase(seed); c.cfg.MaxPendingSettlements == 1 || c.faults == 0 {
			seeds = append(seeds, seed)
		}
	}
	return seeds
}

// checkGolden compares got with the golden file name (rewriting it with -update-golden).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./sequencer -run TestGolden -update-golden")
	if string(want) != got {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		i := 0
		for i < len(wl) && i < len(gl) && wl[i] == gl[i] {
			i++
		}
		from := max(i-5, 0)
		t.Fatalf("%s differs from line %d:\nwant:\n%s\ngot:\n%s", path, i+1,
			strings.Join(wl[from:min(i+5, len(wl))], "\n"), strings.Join(gl[from:min(i+5, len(gl))], "\n"))
	}
}

// TestGoldenPropertyTraces compares the whole trace of each golden seed's property case.
func TestGoldenPropertyTraces(t *testing.T) {
	t.Parallel()
	for _, seed := range goldenSeeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			lines := traceCase(t, seed, newPropCase(seed))
			checkGolden(t, fmt.Sprintf("property-%d.txt", seed), strings.Join(lines, "\n")+"\n")
		})
	}
}

// TestGoldenCrashTraces replays the scenarios of TestCrashAtEveryStep with a fault at every call
// in turn, without background completions (so that "call k" is the same call each time), and
// with and without recorded runs. The run without faults is kept whole; each faulted run as a
// digest of its trace (SEQBUS_GOLDEN_DUMP=<seed>/<crash>/<each>/<k> prints one whole). The runs
// without faults are also kept with background completions.
func TestGoldenCrashTraces(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{13, 14, 17, 24, 29, 37, 43} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			scenario := func(pending int, each bool) *propCase {
				c := newPropCase(seed)
				c.cfg.MaxPendingSettlements, c.cfg.SaveEachMessage = pending, each
				return c
			}
			var whole, digests strings.Builder
			for _, each := range []bool{true, false} {
				for _, pending := range []int{1, 16} {
					clean := scenario(pending, each)
					clean.faultPlan = []int{}
					lines := traceCase(t, seed, clean)
					fmt.Fprintf(&whole, "== pending=%d save-each=%v, no fault\n%s\n", pending, each, strings.Join(lines, "\n"))
				}
				// A fault at each call of the run without faults and without pipelining.
				c := scenario(1, each)
				c.faultPlan = []int{}
				var tot propTotals
				n := runCase(t, seed, c, &tot)
				for _, crash := range []bool{true, false} {
					for k := 1; k <= n; k++ {
						c := scenario(1, each)
						c.faultPlan, c.crashPlan = []int{k}, crash
						lines := traceCase(t, seed, c)
						text := strings.Join(lines, "\n") + "\n"
						key := fmt.Sprintf("%d/%v/%v/%d", seed, crash, each, k)
						if os.Getenv("SEQBUS_GOLDEN_DUMP") == key {
							t.Logf("trace %s:\n%s", key, text)
						}
						fmt.Fprintf(&digests, "save-each=%v crash=%v fault=%d: %d lines %x\n", each, crash, k, len(lines), sha256.Sum256([]byte(text)))
					}
				}
			}
			checkGolden(t, fmt.Sprintf("crash-%d.txt", seed), whole.String())
			checkGolden(t, fmt.Sprintf("crash-%d-faults.txt", seed), digests.String())
		})
	}
}
