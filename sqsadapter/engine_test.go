package sqsadapter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	"github.com/seqbus/seqbus/sqsadapter"
)

// TestRunnerOverSQS runs the engine's Runner over the adapter and the local SQS with an in-memory
// state store that holds early messages (SQS cannot defer, so the Runner holds them there):
// groups published out of order are handled in order, a duplicate is dropped, and a message
// without a sequence is dead-lettered to the queue's dead-letter queue with the engine's reason.
func TestRunnerOverSQS(t *testing.T) {
	t.Parallel()
	const groups, perGroup = 4, 12
	l := newLocal(t, nil)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second, Linger: time.Second})
	rng := rand.New(rand.NewPCG(1, 2))
	orders := make([][]int, groups)
	for g := range orders {
		orders[g] = rng.Perm(perGroup) // published out of order: early messages wait in the store
	}
	for i := range perGroup {
		for g := range groups {
			seq := orders[g][i] + 1
			require.NoError(t, pub.Publish(t.Context(), fmt.Sprint("g", g),
				map[string]any{contract.SequenceProperty: seq, contract.LastProperty: seq == perGroup}, []byte("x")))
			if i == perGroup/2 && g == 0 {
				send(t, pub, "g0", int64(orders[0][0]+1)) // a duplicate
				require.NoError(t, pub.Publish(t.Context(), "g0", map[string]any{"Other": "no sequence"}, []byte("bad")))
			}
		}
	}

	var mu sync.Mutex
	next := map[string]int64{}
	var violations []string
	finished := 0
	done := make(chan struct{})
	h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if want := next[m.SessionID] + 1; m.Sequence != want {
			violations = append(violations, fmt.Sprintf("%s: got %d, want %d", m.SessionID, m.Sequence, want))
		}
		next[m.SessionID] = m.Sequence
		if m.IsLast {
			if finished++; finished == groups {
				close(done)
			}
		}
		return nil
	})
	store := sequencertest.NewStore()
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{
		Source: src, Store: store.Client(nil).Holding(), Handler: h,
		Engine:                sequencer.EngineConfig{IdleTimeout: 300 * time.Millisecond},
		MaxConcurrentSessions: 3, AcceptTimeout: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not all groups finished")
	}
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(stop))

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	for g := range groups {
		require.EqualValues(t, perGroup, next[fmt.Sprint("g", g)])
	}
	require.Empty(t, peekVisible(t, l, pub.url), "everything settled")
	for g := range groups {
		require.Empty(t, store.HeldMessages(fmt.Sprint("g", g)), "nothing left held")
	}
	dl, err := deadLetters(t.Context(), l.Client, src.DeadLetterQueueURL(), "g0")
	require.NoError(t, err)
	require.Len(t, dl, 1)
	require.Equal(t, []byte("bad"), dl[0].Body)
	require.NotEmpty(t, dl[0].Reason)
	t.Logf("dead-lettered with %q: %q", dl[0].Reason, dl[0].Description)
}
