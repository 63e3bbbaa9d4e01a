package sbadapter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// The Service Bus state store takes the version it last read or wrote through a Session.
var _ sbstate.VersionKeeper = (*sbadapter.Session)(nil)

// TestEngineRestoresOrderThroughAdapter runs the real engine over the adapter and the emulator,
// with the state in Service Bus session state, and without the reorder window so every early
// message goes through Defer and ReceiveDeferred.
func TestEngineRestoresOrderThroughAdapter(t *testing.T) {
	t.Parallel()
	const sessions, perSession = 3, 15
	b := setup(t, 0)
	ctx := testCtx(t)

	rng := rand.New(rand.NewPCG(1, 2))
	var all []*azservicebus.Message
	for s := range sessions {
		order := rng.Perm(perSession)
		for _, i := range order {
			sid, n := fmt.Sprintf("s%d", s), int64(i+1)
			all = append(all, &azservicebus.Message{SessionID: &sid, Body: []byte("x"),
				ApplicationProperties: map[string]any{"Sequence": n, "IsLast": n == perSession}})
		}
		// one duplicate per session
		sid := fmt.Sprintf("s%d", s)
		all = append(all, &azservicebus.Message{SessionID: &sid, Body: []byte("dup"),
			ApplicationProperties: map[string]any{"Sequence": int64(2)}})
	}
	for _, m := range all {
		require.NoError(t, b.sender.SendMessage(ctx, m, nil))
	}

	var mu sync.Mutex
	next := map[string]int64{}
	var violations []string
	done := make(chan struct{})
	finished := 0
	h := sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		want := next[m.SessionID] + 1
		if m.Sequence != want {
			violations = append(violations, fmt.Sprintf("%s: got %d want %d", m.SessionID, m.Sequence, want))
		}
		next[m.SessionID] = m.Sequence
		if m.IsLast {
			finished++
			if finished == sessions {
				close(done)
			}
		}
		return nil
	})
	engine, err := sequencer.NewEngine(sequencer.EngineConfig{WindowMessages: sequencer.NoWindow, ReceiveBatch: 1, IdleTimeout: 300 * time.Millisecond},
		sequencer.EngineDeps{Store: sbstate.New(nil), Handler: h})
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for runCtx.Err() == nil {
				actx, acancel := context.WithTimeout(runCtx, 500*time.Millisecond)
				sess, err := b.source.AcceptNext(actx)
				acancel()
				if errors.Is(err, sequencer.ErrNoSession) {
					continue
				}
				if err != nil {
					t.Errorf("accept next: %v", err)
					return
				}
				_, _ = engine.RunSession(runCtx, sess, nil)
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	// The last state save follows the handler call, and a session's duplicate may arrive after
	// its last message (then a new run finds it against the tombstone): let both land before
	// cancelling.
	require.Eventually(t, func() bool {
		st := engine.Stats()
		return st.Handled == sessions*perSession && st.Duplicates == sessions
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	require.Equal(t, sessions, finished, "handled: %v", next)
	st := engine.Stats()
	require.EqualValues(t, sessions*perSession, st.Handled)
	require.Positive(t, st.Deferred, "early messages were deferred at the broker")
	require.EqualValues(t, sessions, st.Duplicates)
	_ = sbadapter.ClassNone
}
