package sbadapter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
)

func TestStrandedFilterKeepsSessionsWithDueDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.New()
	save := func(id string, st *sequencer.State) {
		_, err := store.Save(ctx, sequencer.SaveParams{Session: newSession(newFakeReceiver(id), discard()), State: st})
		require.NoError(t, err)
	}
	stranded := sequencer.NewState()
	stranded.Next, stranded.Deferred = 3, map[int64]int64{3: 42, 5: 44}
	save("stranded", stranded)
	waiting := sequencer.NewState()
	waiting.Next, waiting.Deferred = 3, map[int64]int64{5: 44} // 3 has not arrived: nothing to do
	save("waiting", waiting)
	ended := sequencer.NewState()
	ended.Next, ended.EndedAt = 11, time.Now()
	save("ended", ended)
	parked := sequencer.NewState()
	parked.Next, parked.Deferred, parked.Parked = 2, map[int64]int64{2: 7}, &sequencer.Parked{Sequence: 2}
	save("parked", parked)
	// Parked, but the dead-lettering did not happen before a crash: the message is still
	// deferred and only a run started by id dead-letters it.
	parkedDeferred := sequencer.NewState()
	parkedDeferred.Next, parkedDeferred.Deferred = 2, map[int64]int64{2: 7}
	parkedDeferred.Parked = &sequencer.Parked{Sequence: 2, BrokerSequence: 7}
	save("parked-deferred", parkedDeferred)
	lockedElsewhere := sequencer.NewState()
	lockedElsewhere.Next, lockedElsewhere.Deferred = 2, map[int64]int64{2: 9}
	save("busy", lockedElsewhere)

	a := &fakeAccepter{
		sessions: []string{"stranded", "waiting", "ended", "parked", "parked-deferred", "busy", "fresh"},
		locked:   map[string]bool{"busy": true},
		byID:     map[string]*fakeReceiver{},
	}
	for _, id := range a.sessions {
		a.byID[id] = newFakeReceiver(id)
	}
	src := newSource(a, Config{Entity: Entity{Queue: "q"}})
	lister, err := StrandedFilter(StrandedFilterConfig{Lister: src, Source: src, Store: store})
	require.NoError(t, err)

	ids, err := lister.ListSessions(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"stranded", "parked-deferred"}, ids)
	for id, r := range a.byID {
		if id != "busy" {
			require.True(t, r.closed, "session %s released after the look", id)
		}
	}
}

func TestStrandedFilterErrors(t *testing.T) {
	t.Parallel()
	_, err := StrandedFilter(StrandedFilterConfig{})
	require.Error(t, err)

	src := newSource(&fakeAccepter{err: errors.New("boom")}, Config{Entity: Entity{Queue: "q"}})
	lister, err := StrandedFilter(StrandedFilterConfig{Lister: src, Source: src, Store: memory.New()})
	require.NoError(t, err)
	_, err = lister.ListSessions(context.Background())
	require.ErrorContains(t, err, "boom")
}

// A session whose Close hangs (a connection that stopped answering) must not stop the sweep:
// the release is bounded like the rest of the look at one candidate.
func TestStrandedFilterBoundsTheRelease(t *testing.T) {
	t.Parallel()
	hung := newFakeReceiver("hung")
	hung.closeHangs = true
	a := &fakeAccepter{sessions: []string{"hung"}, byID: map[string]*fakeReceiver{"hung": hung}}
	src := newSource(a, Config{Entity: Entity{Queue: "q"}})
	lister, err := StrandedFilter(StrandedFilterConfig{Lister: src, Source: src, Store: memory.New(), PerSessionTimeout: 50 * time.Millisecond})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := lister.ListSessions(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the sweep hangs on a session that cannot be released")
	}
}
