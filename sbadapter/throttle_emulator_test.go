package sbadapter_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// TestSettlementRefusedAsBusyIsNoticedFromTheSDKLog completes more messages at once than a
// throttled namespace has credits for, on a session that makes no other call meanwhile: the
// SDK hides each refused settlement behind its 4 s retry delay and tells only its log. The
// adapter reads the log, so a refused settlement is presumed refused after 500 ms, well before
// the SDK's delay, and reported refused (sequencer.ErrSettlementRefused); the source's limiter
// learns of it. Every message still at the broker afterwards was reported refused.
//
// Not parallel: the SDK's log is the process's, and the refusals it logs here would be taken by
// the other tests' sessions for their own, so that a settlement of theirs still unanswered after
// 500 ms (TestLockLostIsMapped's, on a stolen lock) would be presumed refused instead of lost.
// A test that is not parallel runs before the parallel ones start.
func TestSettlementRefusedAsBusyIsNoticedFromTheSDKLog(t *testing.T) {
	const messages, credits = 30, 40
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{"sq": {RequiresSession: true, LockDuration: time.Minute}},
		ClientOptions: clientOptions(),
		Config:        emulator.Config{Pressure: emulator.Pressure{CreditsPerSecond: credits}},
	})
	ctx := testCtx(t)
	// Put straight into the broker, which costs no credits.
	e, err := srv.Broker().Lookup("sq")
	require.NoError(t, err)
	sid := "s1"
	batch := make([]*amqp.Message, messages)
	for i := range batch {
		batch[i] = &amqp.Message{Data: [][]byte{fmt.Appendf(nil, "%d", i)}, Properties: &amqp.MessageProperties{GroupID: &sid},
			ApplicationProperties: map[string]any{"Sequence": int64(i + 1)}}
	}
	require.NoError(t, e.Send(ctx, batch))
	source, err := sbadapter.NewSource(srv.Client, sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}})
	require.NoError(t, err)
	// The credits come with each second of the wall clock: start at the top of one, so that
	// the receive and the settlements share its credits (a second beginning between them
	// would pay for the settlements).
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	sess, err := source.Accept(ctx, "s1")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, messages)
	require.Zero(t, source.Limiter().Stats().Busy, "no call of this source was refused before the settlements")

	took := make([]time.Duration, len(msgs))
	refused := make([]bool, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() {
			start := time.Now()
			err := sess.Complete(ctx, m)
			took[i] = time.Since(start)
			if errors.Is(err, sequencer.ErrSettlementRefused) {
				refused[i] = true
				return
			}
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Positive(t, srv.PressureStats().Throttled, "more settlements than credits: some were refused")
	require.Contains(t, refused, true, "some settlements are reported refused")
	require.Contains(t, refused, false, "and some land (the receive took 30 of the 40 credits)")
	slowest := slices.Max(took)
	require.GreaterOrEqual(t, slowest, 500*time.Millisecond, "a refused settlement is presumed refused after 500 ms")
	require.Less(t, slowest, 3*time.Second, "not after the SDK's retry delay (4 s ± 20 %%): %s", slowest)
	require.Positive(t, source.Limiter().Stats().Busy, "the presumed refusals tell the source's limiter")
	require.NoError(t, sess.Close(ctx))

	// What the broker still holds was reported refused: a settlement reported done landed.
	wasRefused := map[string]bool{}
	for i, m := range msgs {
		wasRefused[string(m.Body)] = refused[i]
	}
	left := e.Peek(0, messages, sid)
	for _, m := range left {
		require.True(t, wasRefused[string(m.GetData())], "message %q is still at the broker but its completion was reported done", m.GetData())
	}
	t.Logf("%d of %d completions reported refused, %d messages left at the broker", countTrue(refused), messages, len(left))
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
