package servicebus_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	"github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

var _ servicebus.StateAccessor = (*sequencertest.Session)(nil)

// The store on sessions locked at the fake broker, the way the worker uses it.
func TestConformance_FakeBroker(t *testing.T) {
	t.Parallel()
	broker := sequencertest.NewBroker(nil)
	client := broker.NewClient(nil)
	storetest.Run(t,
		func(*testing.T) sequencer.StateStore { return servicebus.New(nil) },
		func(t *testing.T, id string) sequencer.Session {
			s, err := client.Accept(context.Background(), id)
			require.NoError(t, err)
			return s
		},
	)
}

func TestSave_AfterLockLossFailsAndNextHolderSeesLastSavedState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	broker := sequencertest.NewBroker(nil)
	store := servicebus.New(nil)

	first, err := broker.NewClient(nil).Accept(ctx, "s-1")
	require.NoError(t, err)
	st := sequencer.NewState()
	st.Next = 4
	v, err := store.Save(ctx, sequencer.SaveParams{Session: first, State: st})
	require.NoError(t, err)

	broker.ExpireLocks()
	st.Next = 5
	_, err = store.Save(ctx, sequencer.SaveParams{Session: first, State: st, ExpectedVersion: v})
	require.ErrorIs(t, err, sequencer.ErrLockLost)

	// Another process takes the session over: it sees the last state saved under the lock, with
	// its version, and can go on from there.
	second, err := broker.NewClient(nil).Accept(ctx, "s-1")
	require.NoError(t, err)
	got, gotV, err := store.Load(ctx, sequencer.LoadParams{Session: second})
	require.NoError(t, err)
	require.Equal(t, v, gotV)
	require.Equal(t, int64(4), got.Next)
	_, err = servicebus.New(nil).Save(ctx, sequencer.SaveParams{Session: second, State: st, ExpectedVersion: gotV})
	require.NoError(t, err, "a fresh store instance (another process) checks the version kept in the blob")
}
