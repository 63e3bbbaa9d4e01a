package memory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t,
		func(*testing.T) sequencer.StateStore { return memory.New() },
		func(_ *testing.T, id string) sequencer.Session { return storetest.NewSession(id) },
	)
}

func TestLen_CountsStoredSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.New()
	a, b := storetest.NewSession("a"), storetest.NewSession("b")
	va, err := store.Save(ctx, sequencer.SaveParams{Session: a, State: sequencer.NewState()})
	require.NoError(t, err)
	_, err = store.Save(ctx, sequencer.SaveParams{Session: b, State: sequencer.NewState()})
	require.NoError(t, err)
	require.Equal(t, 2, store.Len())
	require.NoError(t, store.Delete(ctx, sequencer.DeleteParams{Session: a, ExpectedVersion: va}))
	require.Equal(t, 1, store.Len())
}

func TestListerConformance(t *testing.T) {
	t.Parallel()
	storetest.RunLister(t, func(*testing.T) storetest.ListerFixture {
		store := memory.New()
		return storetest.ListerFixture{
			Store: store, Lister: store,
			Session: func(_ *testing.T, id string) sequencer.Session { return storetest.NewSession(id) },
		}
	})
}

func TestHeldConformance(t *testing.T) {
	t.Parallel()
	storetest.RunHeld(t,
		func(*testing.T) sequencer.HeldStore { return memory.New() },
		func(_ *testing.T, id string) sequencer.Session { return storetest.NewSession(id) },
	)
}
