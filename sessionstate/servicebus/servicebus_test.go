package servicebus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

var _ servicebus.StateAccessor = (*storetest.Session)(nil)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t,
		func(*testing.T) sequencer.StateStore { return servicebus.New(nil) },
		func(_ *testing.T, id string) sequencer.Session { return storetest.NewSession(id) },
	)
}

func TestSave_StateTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := servicebus.New(&servicebus.Config{MaxStateSize: 4096})
	sess := storetest.NewSession("big")

	small := storetest.LargeState(10)
	v, err := store.Save(ctx, sequencer.SaveParams{Session: sess, State: small})
	require.NoError(t, err)

	_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: storetest.LargeState(5000), ExpectedVersion: v})
	require.ErrorIs(t, err, sequencer.ErrStateTooLarge)
	require.ErrorContains(t, err, `session "big"`)
	require.ErrorContains(t, err, "5000 deferred")
	require.ErrorContains(t, err, "allows 4096")

	got, gotV, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	require.Equal(t, v, gotV, "the too-large save left the stored state alone")
	require.Len(t, got.Deferred, 10)
}

func TestDefaultLimitFits5000Deferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sess := storetest.NewSession("default-limit")
	_, err := servicebus.New(nil).Save(ctx, sequencer.SaveParams{Session: sess, State: storetest.LargeState(5000)})
	require.NoError(t, err)
	blob, err := sess.GetState(ctx)
	require.NoError(t, err)
	require.Less(t, len(blob), servicebus.DefaultMaxStateSize)
	t.Logf("5,000 deferred encode to %d bytes", len(blob))
}

func TestDelete_ClearsSessionState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := servicebus.New(nil)
	sess := storetest.NewSession("clear")
	v, err := store.Save(ctx, sequencer.SaveParams{Session: sess, State: storetest.SampleState()})
	require.NoError(t, err)
	require.NoError(t, store.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: v}))
	blob, err := sess.GetState(ctx)
	require.NoError(t, err)
	require.Nil(t, blob, "Delete sets the session state to nil")
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lockLost := errors.Join(errors.New("amqp: link detached"), sequencer.ErrLockLost)

	tests := []struct {
		name    string
		session func() sequencer.Session
		run     func(*servicebus.Store, sequencer.Session) error
		wantIs  error
		wantMsg string
	}{
		{
			name: "foreign state blob",
			session: func() sequencer.Session {
				s := storetest.NewSession("foreign")
				require.NoError(t, s.SetState(ctx, []byte(`{"json":"from another app"}`)))
				return s
			},
			run: func(st *servicebus.Store, s sequencer.Session) error {
				_, _, err := st.Load(ctx, sequencer.LoadParams{Session: s})
				return err
			},
			wantMsg: "unknown format",
		},
		{
			name: "lock lost on set state",
			session: func() sequencer.Session {
				s := storetest.NewSession("lost")
				s.FailSetState(lockLost)
				return s
			},
			run: func(st *servicebus.Store, s sequencer.Session) error {
				_, err := st.Save(ctx, sequencer.SaveParams{Session: s, State: sequencer.NewState()})
				return err
			},
			wantIs:  sequencer.ErrLockLost,
			wantMsg: `save session "lost"`,
		},
		{
			name:    "session without state access",
			session: func() sequencer.Session { return plainSession{storetest.NewSession("plain")} },
			run: func(st *servicebus.Store, s sequencer.Session) error {
				_, _, err := st.Load(ctx, sequencer.LoadParams{Session: s})
				return err
			},
			wantMsg: "has no GetState/SetState",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run(servicebus.New(nil), tt.session())
			require.Error(t, err)
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
			}
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}

// plainSession hides the state methods of the embedded session.
type plainSession struct{ sequencer.Session }

// Sessions do not wait for each other: a slow state write on one session does not hold up another.
func TestSave_SessionsDoNotBlockEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := servicebus.New(nil)
	slow := &blockingSession{Session: storetest.NewSession("slow"), entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := store.Save(ctx, sequencer.SaveParams{Session: slow, State: sequencer.NewState()})
		done <- err
	}()
	<-slow.entered // the slow save holds its session's lock now

	_, err := store.Save(ctx, sequencer.SaveParams{Session: storetest.NewSession("fast"), State: sequencer.NewState()})
	require.NoError(t, err)

	close(slow.release)
	require.NoError(t, <-done)
}

// blockingSession blocks in SetState until release is closed.
type blockingSession struct {
	*storetest.Session
	entered, release chan struct{}
}

func (b *blockingSession) SetState(ctx context.Context, state []byte) error {
	close(b.entered)
	<-b.release
	return b.Session.SetState(ctx, state)
}

// The same session object can lose its lock and get it back without noticing (the SDK re-locks
// a session after a dropped connection), and another worker may have written the state in
// between: a Save by the first holder must compare against what is stored now, not against the
// version it saw earlier.
func TestSave_HolderChecksTheStoredVersionEveryTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := servicebus.New(nil)
	sess := storetest.NewSession("s")

	st, v, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	st.Next = 2
	v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
	require.NoError(t, err)

	// Another worker, in another process, advances the session through its own store.
	other := storetest.NewSession("s")
	require.NoError(t, other.SetState(ctx, mustGetState(t, sess)))
	otherStore := servicebus.New(nil)
	stOther, vOther, err := otherStore.Load(ctx, sequencer.LoadParams{Session: other})
	require.NoError(t, err)
	stOther.Next = 9
	_, err = otherStore.Save(ctx, sequencer.SaveParams{Session: other, State: stOther, ExpectedVersion: vOther})
	require.NoError(t, err)
	// ... and the first holder's session shows that state again once it is re-locked.
	require.NoError(t, sess.SetState(ctx, mustGetState(t, other)))

	st.Next = 3
	_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
	require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	require.ErrorIs(t, store.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: v}), sequencer.ErrVersionConflict)
	got, _, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	require.Equal(t, int64(9), got.Next, "the other worker's progress survives")
}

func mustGetState(t *testing.T, s *storetest.Session) []byte {
	t.Helper()
	b, err := s.GetState(context.Background())
	require.NoError(t, err)
	return b
}

// keepingSession is a storetest.Session that never regains a lost lock and keeps the version
// (servicebus.VersionKeeper), like sbadapter's sessions.
type keepingSession struct {
	*storetest.Session
	v     int64
	known bool
}

func (k *keepingSession) KnownStateVersion() (int64, bool) { return k.v, k.known }

func (k *keepingSession) NoteStateVersion(v int64, ok bool) { k.v, k.known = v, ok }

func TestConformance_VersionKeeper(t *testing.T) {
	t.Parallel()
	storetest.Run(t,
		func(*testing.T) sequencer.StateStore { return servicebus.New(nil) },
		func(_ *testing.T, id string) sequencer.Session {
			return &keepingSession{Session: storetest.NewSession(id)}
		},
	)
}

// Through a VersionKeeper a Save or Delete reads the stored version only when the store does
// not know it: after a Load or a write, each write is one SetState; after a failed write the
// next one reads again, and a stale expected version is still refused.
func TestSave_VersionKeeperSkipsTheRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := servicebus.New(nil)
	sess := &keepingSession{Session: storetest.NewSession("s")}

	st, v, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	for n := int64(2); n <= 5; n++ {
		st.Next = n
		v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
		require.NoError(t, err)
	}
	require.Equal(t, 1, sess.GetStateCalls(), "the Load alone reads")
	require.Equal(t, 4, sess.SetStateCalls())

	_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v - 1})
	require.ErrorIs(t, err, sequencer.ErrVersionConflict)
	require.Equal(t, 1, sess.GetStateCalls())

	sess.FailSetState(errors.New("timeout"))
	st.Next = 6
	_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
	require.Error(t, err)
	sess.FailSetState(nil)
	v, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
	require.NoError(t, err)
	require.Equal(t, 2, sess.GetStateCalls(), "after a failed write the version is read again")

	require.NoError(t, store.Delete(ctx, sequencer.DeleteParams{Session: sess, ExpectedVersion: v}))
	require.Equal(t, 2, sess.GetStateCalls())
	got, gotV, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	require.Zero(t, gotV)
	require.Equal(t, int64(1), got.Next)
}
