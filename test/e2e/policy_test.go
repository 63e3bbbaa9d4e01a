package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/operator"
)

// handledSequences returns the sequences the log handler wrote for session id, in order (0 for
// a message without a sequence).
func handledSequences(t *testing.T, w *proc, id string) []int64 {
	t.Helper()
	return bySession(w.records(t))[id]
}

// TestGapPolicy publishes 1, 3, 4 (last) of a session and never sequence 2: with
// SEQBUS_GAP_TIMEOUT=2s, wait reports the gap and keeps waiting, skip goes on with 3 and 4 once
// the sweeper wakes the session (nothing new arrives), park stops the session for an operator.
// Where the session waits or parks, sequence 2 then arrives late and the session completes.
func TestGapPolicy(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	for _, store := range stores {
		for _, policy := range []string{"wait", "skip", "park"} {
			t.Run(store+"/"+policy, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=log",
					"SEQBUS_GAP_TIMEOUT="+timeout.String(), "SEQBUS_GAP_POLICY="+policy)...)
				f.publish(t, []demo.Publication{{SessionID: "g", Sequence: 1}, {SessionID: "g", Sequence: 3},
					{SessionID: "g", Sequence: 4, Last: true}})
				w := startWorker(t, "worker", env)
				addr := w.httpAddr(t)
				start := time.Now()
				metric := func(name string) float64 { return metricValue(scrape(t, addr), name, nil) }

				switch policy {
				case "skip":
					waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "g")) == 3 },
						func() string { return fmt.Sprintf("handled %v", handledSequences(t, w, "g")) })
					took := time.Since(start)
					t.Logf("skipped the missing sequence %s after the start", took.Round(10*time.Millisecond))
					require.Equal(t, []int64{1, 3, 4}, handledSequences(t, w, "g"))
					require.GreaterOrEqual(t, took, timeout, "not before the gap timeout")
					f.requireDrained(t)
					require.Equal(t, 1.0, metric("seqbus_gaps_opened_total"))
					require.Equal(t, 1.0, metric("seqbus_gap_wait_seconds"), "the gap closed by the skip is observed")
					require.Positive(t, metric("seqbus_sweeper_wakes_total"), "the sweeper woke the session: nothing else arrived")
					w.stop(t)
					return

				case "wait":
					// The gauge shows the open gap growing past the timeout; nothing is given up.
					waitFor(t, waitLong, func() bool { return metric("seqbus_gap_oldest_seconds") >= 2*timeout.Seconds() },
						func() string { return fmt.Sprintf("oldest gap %vs", metric("seqbus_gap_oldest_seconds")) })
					require.Equal(t, []int64{1}, handledSequences(t, w, "g"))
					require.Equal(t, 1.0, metric("seqbus_gaps_opened_total"))
					require.Zero(t, metric("seqbus_sessions_parked"))
					require.Contains(t, w.stderr.String(), "session idle while a sequence is missing")
					gaps := cliJSON[operator.ListResult](t, env, "sessions", "list", "--gap")
					require.Len(t, gaps.Sessions, 1)
					require.Equal(t, int64(2), gaps.Sessions[0].Next)
					require.Equal(t, int64(3), gaps.Sessions[0].LowestDeferred)

				case "park":
					waitFor(t, waitLong, func() bool { return metric("seqbus_sessions_parked") == 1 },
						func() string {
							return fmt.Sprintf("parked %v, handled %v", metric("seqbus_sessions_parked"), handledSequences(t, w, "g"))
						})
					require.GreaterOrEqual(t, time.Since(start), timeout, "not before the gap timeout")
					require.Equal(t, []int64{1}, handledSequences(t, w, "g"))
					parked := cliJSON[operator.ListResult](t, env, "sessions", "list", "--parked")
					require.Len(t, parked.Sessions, 1)
					p := parked.Sessions[0].Parked
					require.NotNil(t, p)
					require.True(t, p.OnGap, "parked on a missing sequence, not a dead letter")
					require.Equal(t, int64(2), p.Sequence)
					require.Contains(t, p.Reason, "gap timeout: sequence 2 missing since")
					require.Zero(t, f.counts(t).DeadLetter, "a missing message has nothing to dead-letter")
					table := runCLI(t, env, "sessions", "list", "--parked")
					require.Contains(t, table.stdout, "parked at 2: gap timeout")
					require.Zero(t, metric("seqbus_gap_oldest_seconds"), "the parked mark reports the wait now")
				}

				// Sequence 2 arrives late: the session completes in order.
				f.publish(t, []demo.Publication{{SessionID: "g", Sequence: 2}})
				waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "g")) == 4 },
					func() string { return fmt.Sprintf("handled %v", handledSequences(t, w, "g")) })
				require.Equal(t, []int64{1, 2, 3, 4}, handledSequences(t, w, "g"))
				f.requireDrained(t)
				waitFor(t, 10*time.Second, func() bool {
					return metric("seqbus_sessions_parked") == 0 && metric("seqbus_gap_oldest_seconds") == 0
				}, func() string { return "the gauges did not return to 0" })
				w.stop(t)
			})
		}
	}
}

// publishUnsequenced sends messages without the Sequence property to session id.
func publishUnsequenced(t *testing.T, f *fixture, id string, bodies ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sender, err := f.srv.Client.NewSender(queueName, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, sender.Close(ctx)) }()
	for _, b := range bodies {
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{SessionID: &id, Body: []byte(b),
			ApplicationProperties: map[string]any{"kind": "notification"}}, nil))
	}
}

// TestUnsequencedPassThrough: with SEQBUS_UNSEQUENCED=passthrough, messages without a sequence
// reach the handler at once, while the session's ordered messages wait for a missing sequence.
func TestUnsequencedPassThrough(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=log", "SEQBUS_UNSEQUENCED=passthrough")...)
			w := startWorker(t, "worker", env)
			f.publish(t, []demo.Publication{{SessionID: "p", Sequence: 1}, {SessionID: "p", Sequence: 3, Last: true}})
			publishUnsequenced(t, f, "p", "n1", "n2")
			waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "p")) == 3 },
				func() string { return fmt.Sprintf("handled %v", handledSequences(t, w, "p")) })
			require.Equal(t, []int64{1, 0, 0}, handledSequences(t, w, "p"), "the notifications went through while 3 waits for 2")

			f.publish(t, []demo.Publication{{SessionID: "p", Sequence: 2}})
			waitFor(t, waitLong, func() bool { return len(handledSequences(t, w, "p")) == 5 },
				func() string { return fmt.Sprintf("handled %v", handledSequences(t, w, "p")) })
			require.Equal(t, []int64{1, 0, 0, 2, 3}, handledSequences(t, w, "p"))
			var bodies []string
			for _, r := range w.records(t) {
				if r.Sequence == 0 {
					bodies = append(bodies, r.Body)
				}
			}
			slices.Sort(bodies)
			require.Equal(t, []string{"n1", "n2"}, bodies)
			f.requireDrained(t)
			w.stop(t)
		})
	}
}

// TestPoisonBlockIsVisible is the runbook for the poison policy block: a message that keeps
// failing blocks its session, which the gauge and `worker sessions list --blocked` show; the
// broker dead-letters it at its max delivery count (10 here) and the mark stays; the fix is
// deployed, the dead letter replayed, and the session completes in order with the mark gone.
func TestPoisonBlockIsVisible(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			h := newBuggyHandler("b/2")
			hs := httptest.NewServer(h)
			t.Cleanup(hs.Close)
			env := f.baseEnv(append(storeEnv(t, store), "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
				"SEQBUS_POISON_POLICY=block", "SEQBUS_MAX_HANDLER_ATTEMPTS=1")...)
			w := startWorker(t, "worker", env)
			addr := w.httpAddr(t)
			metric := func(name string, labels map[string]string) float64 { return metricValue(scrape(t, addr), name, labels) }
			f.publish(t, []demo.Publication{{SessionID: "b", Sequence: 1}, {SessionID: "b", Sequence: 2}, {SessionID: "b", Sequence: 3, Last: true}})

			waitFor(t, waitLong, func() bool { return f.counts(t).DeadLetter == 1 && metric("seqbus_sessions_blocked", nil) == 1 },
				func() string {
					return fmt.Sprintf("dead letters %d, blocked gauge %v", f.counts(t).DeadLetter, metric("seqbus_sessions_blocked", nil))
				})
			require.Equal(t, []int64{1}, h.sequences("b"))
			require.Equal(t, 10.0, metric("seqbus_messages_total", map[string]string{"outcome": "blocked"}), "given back 10 times")
			var blocked operator.ListResult
			waitFor(t, waitLong, func() bool {
				blocked = cliJSON[operator.ListResult](t, env, "sessions", "list", "--blocked")
				return len(blocked.Sessions) == 1 && !blocked.Sessions[0].Busy
			}, func() string { return fmt.Sprintf("%+v", blocked) })
			b := blocked.Sessions[0].Blocked
			require.NotNil(t, b)
			require.Equal(t, int64(2), b.Sequence)
			require.Equal(t, uint64(10), b.Times)
			require.Contains(t, b.Reason, "status 500")
			table := runCLI(t, env, "sessions", "list", "--blocked")
			require.Contains(t, table.stdout, "blocked at 2 (10 times)")
			dlq := cliJSON[operator.DLQListResult](t, env, "dlq", "list")
			require.Len(t, dlq.Messages, 1)
			require.Equal(t, "MaxDeliveryCountExceeded", dlq.Messages[0].Reason)

			h.fix()
			replay := runCLI(t, env, "dlq", "replay", "--session", "b")
			require.Equal(t, 0, replay.code, replay.stderr)
			waitFor(t, waitLong, func() bool { return h.complete([]string{"b"}, 3) }, func() string { return h.String() })
			require.Equal(t, []int64{1, 2, 3}, h.sequences("b"))
			f.requireDrained(t)
			waitFor(t, 10*time.Second, func() bool { return metric("seqbus_sessions_blocked", nil) == 0 },
				func() string { return "the blocked gauge did not return to 0" })
			require.False(t, strings.Contains(runCLI(t, env, "sessions", "list", "--blocked").stdout, "blocked at"))
			w.stop(t)
		})
	}
}
