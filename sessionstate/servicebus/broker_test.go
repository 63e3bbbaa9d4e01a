package servicebus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	"github.com/seqbus/seqbus/sessionstate"
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

// The Service Bus store is listed by scanning: each session is locked briefly to read its state,
// one at a time or several at once.
func TestListerConformance_Scan(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 3} {
		t.Run(fmt.Sprintf("concurrency=%d", concurrency), func(t *testing.T) {
			t.Parallel()
			runScanListerConformance(t, concurrency)
		})
	}
}

func runScanListerConformance(t *testing.T, concurrency int) {
	storetest.RunLister(t, func(t *testing.T) storetest.ListerFixture {
		client := sequencertest.NewBroker(nil).NewClient(nil)
		store := servicebus.New(nil)
		var mu sync.Mutex
		var ids []string
		return storetest.ListerFixture{
			Store: store,
			Lister: sessionstate.NewScanLister(sessionstate.ScanConfig{
				IDs: func(context.Context) ([]string, error) {
					mu.Lock()
					defer mu.Unlock()
					return slices.Clone(ids), nil
				},
				Source:      client,
				Store:       store,
				Concurrency: concurrency,
			}),
			Session: func(t *testing.T, id string) sequencer.Session {
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
				s, err := client.Accept(context.Background(), id)
				require.NoError(t, err)
				return s
			},
		}
	})
}

// A session another receiver holds is listed as busy: its state cannot be read.
func TestScanLister_BusySession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	broker := sequencertest.NewBroker(nil)
	store := servicebus.New(nil)
	holder, err := broker.NewClient(nil).Accept(ctx, "held")
	require.NoError(t, err)
	_, err = store.Save(ctx, sequencer.SaveParams{Session: holder, State: sequencer.NewState()})
	require.NoError(t, err)

	l := sessionstate.NewScanLister(sessionstate.ScanConfig{
		IDs:    func(context.Context) ([]string, error) { return []string{"held"}, nil },
		Source: broker.NewClient(nil),
		Store:  store,
	})
	got, err := l.List(ctx, sessionstate.ListParams{Filter: sessionstate.Filter{Parked: true}})
	require.NoError(t, err)
	require.Equal(t, []sessionstate.Entry{{SessionID: "held", Busy: true}}, got, "listed whatever the filter")
	require.NoError(t, holder.Close(ctx))
	got, err = l.List(ctx, sessionstate.ListParams{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.False(t, got[0].Busy, "readable once released")
}
