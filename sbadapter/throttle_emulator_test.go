package sbadapter_test

import (
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
)

// TestSettlementRefusedAsBusyIsNoticedFromTheSDKLog completes more messages at once than a
// throttled namespace has credits for, on a session that makes no other call meanwhile: the
// SDK hides each refused settlement behind its 4 s retry delay and tells only its log. The
// adapter reads the log, so a refused settlement is presumed refused after 500 ms, well before
// the SDK's delay, and the source's limiter learns of it.
//
// Not parallel: the SDK's log is the process's, and the refusals it logs here would be taken by
// the other tests' sessions for their own, so that a settlement of theirs still unanswered after
// 500 ms (TestLockLostIsMapped's, on a stolen lock) would be presumed refused and reported
// settled. A test that is not parallel runs before the parallel ones start.
func TestSettlementRefusedAsBusyIsNoticedFromTheSDKLog(t *testing.T) {
	const messages, credits = 30, 20
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
	sess, err := source.Accept(ctx, "s1")
	require.NoError(t, err)
	msgs := receiveN(ctx, t, sess, messages)
	require.Zero(t, source.Limiter().Stats().Busy, "no call of this source was refused before the settlements")

	took := make([]time.Duration, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() {
			start := time.Now()
			require.NoError(t, sess.Complete(ctx, m))
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	require.Positive(t, srv.PressureStats().Throttled, "more settlements than credits: some were refused")
	slowest := slices.Max(took)
	require.GreaterOrEqual(t, slowest, 500*time.Millisecond, "a refused settlement is presumed refused after 500 ms")
	require.Less(t, slowest, 3*time.Second, "not after the SDK's retry delay (4 s ± 20 %%): %s", slowest)
	require.Positive(t, source.Limiter().Stats().Busy, "the presumed refusals tell the source's limiter")
	_ = sess.Close(ctx)
}
