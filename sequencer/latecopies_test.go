package sequencer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// A run of an ended session (its tombstone loaded) completes the late copies it received and,
// when the broker had no more and every completion landed, releases the session at once: no
// second receive, which would hold the session and a runner slot for the idle timeout. A full
// receive batch is not the end of the copies; a refused completion keeps the idle wait, the
// backoff before the copy comes back.
func TestEndedSessionReleasesAfterItsLateCopies(t *testing.T) {
	t.Parallel()
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			t.Parallel()
			cases := []struct {
				name     string
				copies   []int64 // the late copies' sequences
				refuse   bool    // the first copy's completion is refused as busy
				receives int     // the run's receives
				left     int     // messages at the broker after the run
			}{
				{name: "short batch", copies: []int64{2, 3}, receives: 1},
				{name: "full batch", copies: []int64{1, 2, 3}, receives: 2},
				{name: "refused completion", copies: []int64{2}, refuse: true, receives: 2, left: 1},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					b := setup(t, sequencer.EngineConfig{TombstoneTTL: time.Hour, Pipelining: pipeliningOf(pipelined), ReceiveBatch: 3})
					publish(b, "s", seqs(1, 3), 3)
					out, _ := b.runNext(t)
					require.Equal(t, sequencer.OutcomeEnded, out)

					var first int64
					for i, seq := range tc.copies {
						bs := b.broker.PublishSeq("s", seq, seq == 3)
						if i == 0 {
							first = bs
						}
					}
					if tc.refuse {
						refuseOnce(b, "complete", first)
					}
					before := b.broker.Calls()["receive"]
					out, _ = b.runNext(t)
					require.Equal(t, sequencer.OutcomeIdle, out)
					require.Equal(t, tc.receives, b.broker.Calls()["receive"]-before)
					require.Equal(t, tc.left, b.broker.Len(), "the late copies completed, but a refused one")
					require.Equal(t, seqs(1, 3), b.got("s"), "no copy is handled")
				})
			}
		})
	}
}
