package sequencer_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// RunOptions.Ending is called once the session's last message is handled (or skipped), before
// the save or delete that ends the state, and never for a run that does not end the session or
// that still has a handler call to make (an unsequenced message passed through after the last).
func TestRunOptionsEnding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     sequencer.EngineConfig
		publish []int64 // with 3 the last
		fail    int64   // a sequence whose handler always fails
		// unsequenced publishes a message without a sequence after the others
		unsequenced bool
		ends        bool
	}{
		{name: "in order", publish: []int64{1, 2, 3}, ends: true},
		{name: "pipelined runs", cfg: sequencer.EngineConfig{PipelineRuns: true}, publish: []int64{1, 2, 3}, ends: true},
		{name: "out of order", publish: []int64{3, 1, 2}, ends: true},
		{name: "last message skipped as poison", cfg: sequencer.EngineConfig{Poison: sequencer.PoisonSkip},
			publish: []int64{1, 2, 3}, fail: 3, ends: true},
		{name: "idle before the last", publish: []int64{1, 2}},
		{name: "a message passed through after the last", cfg: sequencer.EngineConfig{Unsequenced: sequencer.UnsequencedPassThrough},
			publish: []int64{1, 2, 3}, unsequenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.cfg)
			var mu sync.Mutex
			var log []string
			note := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				log = append(log, s)
			}
			b.proc.Hook = func(c sequencertest.Call) error {
				if (c.Op == "save" || c.Op == "delete") && c.Phase == sequencertest.Before {
					note("store")
				}
				return nil
			}
			b.setFail(func(m *sequencer.Message) error {
				if m.Sequence == tc.fail {
					return errors.New("poison")
				}
				note("handled")
				return nil
			})
			publish(b, "s", tc.publish, 3)
			if tc.unsequenced {
				b.broker.Publish("s", nil, nil)
			}
			sess, err := b.client.AcceptNext(t.Context())
			require.NoError(t, err)
			calls := 0
			_, err = b.engine.RunSession(t.Context(), sess, &sequencer.RunOptions{Ending: func() {
				calls++
				note("ending")
			}})
			require.NoError(t, err)
			if !tc.ends {
				require.Zero(t, calls, "the session did not end, or a handler call followed the last message: %v", log)
				return
			}
			require.Equal(t, 1, calls)
			last := -1
			for i, s := range log {
				if s == "store" {
					last = i
				}
			}
			require.Positive(t, last, "the end writes the state: %v", log)
			require.Equal(t, "ending", log[last-1], "Ending comes right before the save or delete that ends the state: %v", log)
			require.NotContains(t, log[last:], "handled", "no handler call after Ending: %v", log)
		})
	}
}

// A run of an ended session (its tombstone loaded) settles the late copies it received and
// releases the session at once, without a receive that would hold it (and a runner slot) for
// the idle timeout; a later copy makes the broker offer the session again.
func TestEndedSessionReleasesAfterItsLateCopies(t *testing.T) {
	t.Parallel()
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			t.Parallel()
			b := setup(t, sequencer.EngineConfig{TombstoneTTL: time.Hour, PipelineRuns: pipelined})
			publish(b, "s", seqs(1, 3), 3)
			out, _ := b.runNext(t)
			require.Equal(t, sequencer.OutcomeEnded, out)
			for _, late := range []int64{2, 3} {
				b.broker.PublishSeq("s", late, late == 3)
				before := b.broker.Calls()["receive"]
				out, _ = b.runNext(t)
				require.Equal(t, sequencer.OutcomeIdle, out)
				require.Equal(t, 1, b.broker.Calls()["receive"]-before, "one receive: the late copy's")
				require.Zero(t, b.broker.Len(), "the late copy is completed")
			}
			require.Equal(t, seqs(1, 3), b.got("s"))
			st, _ := b.store.Get("s")
			require.Equal(t, uint64(2), st.Counters.Duplicates)
		})
	}
}
