package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// BenchmarkIdleSweep measures what an idle worker costs the broker per sweep interval with the
// Service Bus session state store, with N ended sessions (tombstones within their TTL) and
// nothing arriving: the broker operations charged in Standard-tier credits (a message operation
// 1, a management operation 10; the emulator's Pressure accounting) and the sweeper's own calls.
// One worker process, SEQBUS_SWEEP_INTERVAL=1s; the sessions end while it runs; measured over 5
// intervals from 8 intervals after the last one ended (and, for a worker that counts its sweep
// calls, once its sweeper has read every change).
//
// SEQBUS_BENCH_IDLE_SESSIONS lists the Ns (default 0,1000,10000). SEQBUS_BENCH_OLD_WORKER names
// another worker binary (built from an older commit) measured side by side in the same run.
func BenchmarkIdleSweep(b *testing.B) {
	counts := []int{0, 1000, 10000}
	if s := os.Getenv("SEQBUS_BENCH_IDLE_SESSIONS"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(b, err, "SEQBUS_BENCH_IDLE_SESSIONS")
			counts = append(counts, n)
		}
	}
	bins := map[string]string{"current": workerBin}
	if old := os.Getenv("SEQBUS_BENCH_OLD_WORKER"); old != "" {
		bins["old"] = old
	}
	for _, n := range counts {
		for _, name := range []string{"old", "current"} {
			bin, ok := bins[name]
			if !ok {
				continue
			}
			b.Run(fmt.Sprintf("ended=%d/worker=%s", n, name), func(b *testing.B) {
				for range b.N {
					credits, sweepCalls := idleCost(b, bin, n)
					b.ReportMetric(credits, "credits/interval")
					if sweepCalls >= 0 {
						b.ReportMetric(sweepCalls, "sweep-calls/interval")
					}
				}
			})
		}
	}
}

// idleCost returns the broker credits, and the sweeper's calls (-1 when the binary does not
// report them), per interval of an idle worker with n tombstones on its queue.
func idleCost(b *testing.B, bin string, n int) (credits, sweepCalls float64) {
	b.Helper()
	srv := emulatortest.Start(b, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{queueName: {RequiresSession: true, LockDuration: 30 * time.Second}},
		Config: emulator.Config{Pressure: emulator.Pressure{CreditsPerSecond: 1 << 40}}, // counts, never throttles
	})
	f := &fixture{srv: srv}
	env := f.baseEnv("SEQBUS_HANDLER=noop", "SEQBUS_LOG_LEVEL=info")
	w := startBinary(b, bin, "idle", env)
	addr := w.httpAddr(b)
	const interval, warm, settle, measured = time.Second, 3, 8, 5
	time.Sleep(warm * interval) // the worker starts and takes the sweeper lease
	// The sessions end while the worker runs, as they would after it handled them; then
	// nothing changes.
	writeTombstones(b, srv, n)
	time.Sleep(settle * interval) // past the sweeper's 5s margin for the clocks: those are read again
	// A sweeper that reads each changed session once may still be reading the last ones: the
	// idle cost is measured once it has caught up (two intervals of at most 10 calls).
	for quiet, prev, deadline := 0, sweepCallsOf(b, addr), time.Now().Add(5*time.Minute); prev >= 0 && quiet < 2 && time.Now().Before(deadline); {
		time.Sleep(interval)
		cur := sweepCallsOf(b, addr)
		if cur-prev <= 10 {
			quiet++
		} else {
			quiet = 0
		}
		prev = cur
	}

	c0, s0 := srv.PressureStats().Credits, sweepCallsOf(b, addr)
	time.Sleep(measured * interval)
	c1, s1 := srv.PressureStats().Credits, sweepCallsOf(b, addr)
	w.stop(b)
	credits = float64(c1-c0) / measured
	sweepCalls = -1
	if s0 >= 0 {
		sweepCalls = (s1 - s0) / measured
	}
	return credits, sweepCalls
}

// sweepCallsOf sums seqbus_sweep_broker_calls_total (-1 when the worker has no such metric).
func sweepCallsOf(b *testing.B, addr string) float64 {
	fam, ok := scrape(b, addr)["seqbus_sweep_broker_calls_total"]
	if !ok {
		return -1
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// writeTombstones gives n sessions of the queue the state of a session that ended a minute ago
// (3 messages handled), as the Service Bus store writes it.
func writeTombstones(b *testing.B, srv *emulatortest.Server, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	st := sequencer.NewState()
	st.Next, st.Last, st.EndedAt, st.UpdatedAt = 4, 3, time.Now().Add(-time.Minute), time.Now().Add(-time.Minute)
	st.Counters.Handled = 3
	enc := storetest.NewSession("encode")
	_, err := sbstate.New(nil).Save(context.Background(), sequencer.SaveParams{Session: enc, State: st})
	require.NoError(b, err)
	raw, err := enc.GetState(context.Background())
	require.NoError(b, err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r, err := srv.Client.AcceptSessionForQueue(ctx, queueName, fmt.Sprintf("ended-%06d", i), nil)
				if err == nil {
					err = r.SetSessionState(ctx, raw, nil)
					_ = r.Close(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}
