package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// releaseConfig retries in place once, then spends each wait released: 1s, 2s, 4s, 4s, …
func releaseConfig(attempts int) sequencer.EngineConfig {
	return sequencer.EngineConfig{
		Pipelining:        sequencer.Awaited,
		Retry:             sequencer.RetryPolicy{Attempts: attempts, Base: time.Second, Cap: 4 * time.Second},
		RetryReleaseAfter: 1,
	}
}

func TestEngineReleasedRetryKeepsOrderAndFreesTheSession(t *testing.T) {
	t.Parallel()
	for _, bound := range []bool{false, true} {
		t.Run(map[bool]string{false: "own store", true: "session state"}[bound], func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, releaseConfig(6), bound)
			failing := true
			calls := map[int64]int{}
			b.setFail(func(m *sequencer.Message) error {
				calls[m.Sequence]++
				if m.Sequence == 2 && failing {
					return errors.New("partner down")
				}
				return nil
			})
			publish(b, "s", []int64{1, 2, 3, 4}, 0)
			start := b.clock.Now()

			out, ok := b.runNext(t)
			require.True(t, ok)
			require.Equal(t, sequencer.OutcomeRetrying, out)
			require.Equal(t, []int64{1}, b.got("s"))
			require.Equal(t, 1, calls[2], "one attempt in place, then released")
			st, _ := b.store.Get("s")
			require.NotNil(t, st.Retrying)
			require.Equal(t, int64(2), st.Retrying.Sequence)
			require.Equal(t, uint64(1), st.Retrying.Attempts)
			require.Equal(t, "partner down", st.Retrying.Reason)
			require.Equal(t, start.Add(time.Second), st.Retrying.At)
			require.Contains(t, st.Deferred, int64(2), "the message waits deferred, indexed")
			require.False(t, st.NeedsWake(), "not stranded: woken at its time")
			require.False(t, st.RetryDue(b.clock.Now()))
			require.True(t, st.RetryDue(st.Retrying.At))
			active, deferred := b.broker.Pending("s")
			require.Equal(t, 0, active, "nothing left for accept-next: idle replicas do not take it")
			require.Equal(t, 3, deferred, "2 and the later 3, 4 wait deferred")
			_, ok = b.runNext(t)
			require.False(t, ok, "the broker does not offer the cooling session")

			// A wake before the attempt is due changes nothing and receives nothing.
			require.Equal(t, sequencer.OutcomeRetrying, b.runByID(t, "s", &sequencer.RunOptions{Woken: true}))
			require.Equal(t, 1, calls[2])

			// A message that arrives meanwhile is taken, deferred, and the session let go at once.
			publish(b, "s", []int64{5}, 5)
			out, ok = b.runNext(t)
			require.True(t, ok)
			require.Equal(t, sequencer.OutcomeRetrying, out)
			require.Equal(t, 1, calls[2])
			require.Equal(t, []int64{1}, b.got("s"))
			active, deferred = b.broker.Pending("s")
			require.Equal(t, 0, active)
			require.Equal(t, 4, deferred)

			// Due: the next attempt fails too, the wait doubles.
			b.clock.Advance(time.Second)
			require.Equal(t, sequencer.OutcomeRetrying, b.runByID(t, "s", &sequencer.RunOptions{Woken: true}))
			require.Equal(t, 2, calls[2])
			st, _ = b.store.Get("s")
			require.Equal(t, uint64(2), st.Retrying.Attempts)
			require.Equal(t, b.clock.Now().Add(2*time.Second), st.Retrying.At)

			// The downstream is back: the attempt at the planned time succeeds, the rest follows.
			failing = false
			b.clock.Advance(2 * time.Second)
			require.Equal(t, sequencer.OutcomeEnded, b.runByID(t, "s", &sequencer.RunOptions{Woken: true}))
			require.Equal(t, seqs(1, 5), b.got("s"))
			require.Zero(t, b.broker.Len())
			require.Empty(t, b.broker.DeadLetters())
			st, _ = b.store.Get("s")
			require.Nil(t, st.Retrying)
			require.Empty(t, st.Deferred)
			require.Equal(t, uint64(2), st.Counters.Retries)
			require.Len(t, b.eventsOf(sequencer.EventReleasedRetry), 2)
			require.Equal(t, uint64(2), b.engine.Stats().ReleasedRetries)
		})
	}
}

func TestEngineReleasedRetryThenPoisonPolicy(t *testing.T) {
	t.Parallel()
	for _, policy := range []sequencer.PoisonPolicy{sequencer.PoisonPark, sequencer.PoisonSkip} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			cfg := releaseConfig(3)
			cfg.Poison = policy
			b := setup(t, cfg)
			calls := 0
			b.setFail(func(m *sequencer.Message) error {
				if m.Sequence == 1 {
					calls++
					return errors.New("always")
				}
				return nil
			})
			publish(b, "s", []int64{1, 2}, 2)
			require.Equal(t, []sequencer.Outcome{sequencer.OutcomeRetrying}, b.runAll(t))
			for range 2 {
				st, _ := b.store.Get("s")
				require.NotNil(t, st.Retrying)
				b.clock.Set(st.Retrying.At)
				b.runByID(t, "s", &sequencer.RunOptions{Woken: true})
			}
			require.Equal(t, 3, calls, "every attempt counted across the releases")
			require.Len(t, b.broker.DeadLetters(), 1)
			st, _ := b.store.Get("s")
			require.Nil(t, st.Retrying)
			if policy == sequencer.PoisonPark {
				require.NotNil(t, st.Parked)
				require.Empty(t, b.got("s"))
				return
			}
			require.Equal(t, []int64{2}, b.got("s"))
			require.False(t, st.EndedAt.IsZero())
		})
	}
}

func TestEngineConfigRetryReleaseAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  sequencer.EngineConfig
		want string
	}{
		{"negative", sequencer.EngineConfig{Pipelining: sequencer.Awaited, RetryReleaseAfter: -1}, "must not be negative"},
		{"not below the attempts", sequencer.EngineConfig{Pipelining: sequencer.Awaited, Retry: sequencer.RetryPolicy{Attempts: 3}, RetryReleaseAfter: 3}, "must be below Retry.Attempts 3"},
		{"block", sequencer.EngineConfig{Pipelining: sequencer.Awaited, RetryReleaseAfter: 1, Poison: sequencer.PoisonBlock}, "does not go with PoisonBlock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, tc.cfg.WithDefaults().Validate(), tc.want)
		})
	}
	require.NoError(t, sequencer.EngineConfig{Pipelining: sequencer.Awaited, RetryReleaseAfter: 4}.WithDefaults().Validate(), "below the default 5 attempts")
}

// withReleasedRetries turns a property case into one whose failing handlers spend their waits
// released (State.Retrying): after one in-place attempt with growing waits, or after two with no
// wait at all (the retry is due at once), chosen by the seed.
func withReleasedRetries(c *propCase, seed uint64) *propCase {
	if seed%2 == 0 {
		c.cfg.Retry = sequencer.RetryPolicy{Attempts: 3, Base: time.Second, Cap: 4 * time.Second}
		c.cfg.RetryReleaseAfter = 1
	} else {
		c.cfg.Retry = sequencer.RetryPolicy{Attempts: 3}
		c.cfg.RetryReleaseAfter = 2
	}
	return c
}

// TestPropertyReleasedRetries runs the property test's random cases (crashes, injected errors,
// lock expiries, stops, poison and flaky messages) with released retries: every sequence handled
// once in order, every poison message dead-lettered after all its attempts, nothing left.
func TestPropertyReleasedRetries(t *testing.T) {
	t.Parallel()
	n := 600
	if testing.Short() {
		n = 150
	}
	tot := propCases(t, n, func(seed uint64, tot *propTotals) {
		runCase(t, seed, withReleasedRetries(newPropCase(seed), seed), tot)
	})
	if t.Failed() {
		return
	}
	require.Positive(t, tot.retries, "the cases retried")
}

// TestReleasedRetryCrashAtEveryStep crashes (or fails) a process at each call in turn in
// scenarios with poison and flaky messages whose waits are spent released, and checks the
// property test's invariants: the plan survives every crash and resumes from the stored state.
func TestReleasedRetryCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{24, 37, 43, 50} { // poison and flaky messages, park and skip
		for _, crash := range []bool{true, false} {
			t.Run(fmt.Sprintf("seed=%d/crash=%v", seed, crash), func(t *testing.T) {
				t.Parallel()
				scenario := func() *propCase { return withReleasedRetries(newPropCase(seed), seed) }
				var tot propTotals
				if k, err := strconv.Atoi(os.Getenv("SEQBUS_PROP_FAULT")); err == nil {
					c := scenario()
					c.faultPlan, c.crashPlan = []int{k}, crash
					runCase(t, seed, c, &tot)
					return
				}
				clean := scenario()
				clean.faultPlan = []int{}
				n := runCase(t, seed, clean, &tot)
				require.Positive(t, tot.retries, "the scenario retries")
				for k := 1; k <= n; k++ {
					c := scenario()
					c.faultPlan, c.crashPlan = []int{k}, crash
					runCase(t, seed, c, &tot)
					if t.Failed() {
						t.Logf("fault at call %d (rerun it with SEQBUS_PROP_FAULT=%d)", k, k)
						return
					}
				}
			})
		}
	}
}

// The Runner that released a session wakes it when its retry is due, without a sweeper, and the
// slot is free meanwhile: another session is handled while the first one waits.
func TestRunnerWakesItsReleasedRetry(t *testing.T) {
	t.Parallel()
	const wait = 300 * time.Millisecond
	broker := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), Blocking: true})
	var (
		mu    sync.Mutex
		calls = map[string][]time.Time{}
		got   = map[string][]int64{}
	)
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: broker.NewClient(nil),
		Store:  sequencertest.NewStore().Client(nil),
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls[m.SessionID] = append(calls[m.SessionID], time.Now())
			if m.SessionID == "failing" && len(calls["failing"]) <= 2 {
				return errors.New("partner down")
			}
			got[m.SessionID] = append(got[m.SessionID], m.Sequence)
			return nil
		}),
		Engine: sequencer.EngineConfig{Pipelining: sequencer.Awaited, IdleTimeout: 30 * time.Millisecond, RetryReleaseAfter: 1,
			Retry: sequencer.RetryPolicy{Attempts: 5, Base: wait, Cap: wait}},
		MaxConcurrentSessions: 1,
		AcceptTimeout:         time.Hour, // only a wake ends an accept-next wait early
	})
	require.NoError(t, err)
	for s := int64(1); s <= 3; s++ {
		broker.PublishSeq("failing", s, s == 3)
	}
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { _ = r.StopAndCancel(context.Background()) })
	waitUntil := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(calls["failing"])
		mu.Unlock()
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(waitUntil), "first attempt")
		time.Sleep(5 * time.Millisecond)
	}
	for s := int64(1); s <= 2; s++ {
		broker.PublishSeq("other", s, s == 2)
	}
	for {
		mu.Lock()
		done := len(got["failing"]) == 3
		mu.Unlock()
		if done {
			break
		}
		require.True(t, time.Now().Before(waitUntil), "the released session was never woken")
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1, 2, 3}, got["failing"])
	require.Equal(t, []int64{1, 2}, got["other"], "the one slot served another session during the wait")
	require.Less(t, calls["other"][0].Sub(calls["failing"][0]), wait, "during the first wait")
	for i := 1; i < 3; i++ {
		require.GreaterOrEqual(t, calls["failing"][i].Sub(calls["failing"][i-1]), wait, "attempt %d not before its time", i+1)
	}
	require.Equal(t, uint64(2), r.Stats().ReleasedRetries)
}
