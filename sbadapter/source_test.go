package sbadapter

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestEntityValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		e       Entity
		wantErr string
		str     string
	}{
		{"queue", Entity{Queue: "orders"}, "", "orders"},
		{"subscription", Entity{Topic: "t", Subscription: "s"}, "", "t/Subscriptions/s"},
		{"none", Entity{}, "no queue", ""},
		{"both", Entity{Queue: "q", Topic: "t", Subscription: "s"}, "not both", ""},
		{"topic only", Entity{Topic: "t"}, "needs a subscription", ""},
		{"subscription only", Entity{Subscription: "s"}, "needs a topic", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.e.Validate()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.str, tt.e.String())
		})
	}
}

func TestNewSourceValidates(t *testing.T) {
	t.Parallel()
	_, err := NewSource(nil, Config{Entity: Entity{Queue: "q"}})
	require.ErrorContains(t, err, "nil client")
	_, err = NewSource(&azservicebus.Client{}, Config{})
	require.ErrorContains(t, err, "no queue")
}

func TestSourceAcceptNext(t *testing.T) {
	t.Parallel()
	t.Run("hands out a session", func(t *testing.T) {
		t.Parallel()
		a := &fakeAccepter{next: []*fakeReceiver{newFakeReceiver("s9")}}
		s := newSource(a, Config{Entity: Entity{Queue: "q"}})
		sess, err := s.AcceptNext(context.Background())
		require.NoError(t, err)
		require.Equal(t, "s9", sess.ID())
		require.Equal(t, []bool{true}, a.deadlines, "a deadline is added when the caller has none")
	})
	t.Run("no session before the wait ends", func(t *testing.T) {
		t.Parallel()
		s := newSource(&fakeAccepter{}, Config{Entity: Entity{Queue: "q"}, AcceptNextWait: 20 * time.Millisecond})
		start := time.Now()
		_, err := s.AcceptNext(context.Background())
		require.ErrorIs(t, err, sequencer.ErrNoSession)
		require.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("broker timeout", func(t *testing.T) {
		t.Parallel()
		s := newSource(&fakeAccepter{err: &azservicebus.Error{Code: azservicebus.CodeTimeout}}, Config{Entity: Entity{Queue: "q"}})
		_, err := s.AcceptNext(context.Background())
		require.ErrorIs(t, err, sequencer.ErrNoSession)
		require.Contains(t, err.Error(), "accept next session on q")
	})
	t.Run("entity missing", func(t *testing.T) {
		t.Parallel()
		s := newSource(&fakeAccepter{err: &azservicebus.Error{Code: azservicebus.CodeNotFound}}, Config{Entity: Entity{Queue: "q"}})
		_, err := s.AcceptNext(context.Background())
		require.ErrorIs(t, err, sequencer.ErrNotFound)
		require.Equal(t, ClassFatal, Classify(err))
	})
}

func TestSourceAccept(t *testing.T) {
	t.Parallel()
	a := &fakeAccepter{locked: map[string]bool{"busy": true}}
	s := newSource(a, Config{Entity: Entity{Topic: "t", Subscription: "sub"}})
	sess, err := s.Accept(context.Background(), "free")
	require.NoError(t, err)
	require.Equal(t, "free", sess.ID())

	_, err = s.Accept(context.Background(), "busy")
	require.ErrorIs(t, err, sequencer.ErrSessionLocked)
	require.Contains(t, err.Error(), `accept session "busy" on t/Subscriptions/sub`)
}

func TestSourceListSessions(t *testing.T) {
	t.Parallel()
	s := newSource(&fakeAccepter{sessions: []string{"a", "b"}}, Config{Entity: Entity{Queue: "q"}})
	ids, err := s.ListSessions(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ids)

	s = newSource(&fakeAccepter{err: &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}}, Config{Entity: Entity{Queue: "q"}})
	_, err = s.ListSessions(context.Background())
	require.ErrorIs(t, err, ErrUnauthorized)
}

// TestSourceAcceptsOnEachConnectionInTurn checks Config.AcceptClients' spreading: accepts go to
// the connections in turn, listings to the first.
func TestSourceAcceptsOnEachConnectionInTurn(t *testing.T) {
	t.Parallel()
	conns := []*fakeAccepter{{sessions: []string{"listed"}}, {}, {}}
	rr := &roundRobin{}
	for i, a := range conns {
		for j := range 2 {
			a.next = append(a.next, newFakeReceiver(fmt.Sprintf("c%d-%d", i, j)))
		}
		rr.accepters = append(rr.accepters, a)
	}
	src := newSource(rr, Config{Entity: Entity{Queue: "q"}})
	ctx := t.Context()
	var got []string
	for range 6 {
		sess, err := src.AcceptNext(ctx)
		require.NoError(t, err)
		got = append(got, sess.ID())
	}
	require.Equal(t, []string{"c0-0", "c1-0", "c2-0", "c0-1", "c1-1", "c2-1"}, got)
	for range 3 {
		_, err := src.Accept(ctx, "by-id")
		require.NoError(t, err)
	}
	ids, err := src.ListSessions(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"listed"}, ids)
	for _, a := range conns[1:] {
		require.Empty(t, a.sessions, "listings use the first connection")
	}
}

// TestSourceReceiveWait: a session's receives pass Config.ReceiveWait to the SDK as its
// TimeAfterFirstMessage (DefaultReceiveWait when unset); a negative one is refused.
func TestSourceReceiveWait(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		set, want time.Duration
	}{
		{0, DefaultReceiveWait},
		{7 * time.Millisecond, 7 * time.Millisecond},
	} {
		r := newFakeReceiver("s")
		r.active = []*azservicebus.ReceivedMessage{sbMsg("s", 1, "a")}
		src := newSource(&fakeAccepter{next: []*fakeReceiver{r}}, Config{Entity: Entity{Queue: "q"}, ReceiveWait: tt.set})
		sess, err := src.AcceptNext(t.Context())
		require.NoError(t, err)
		msgs, err := sess.Receive(t.Context(), 8)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, []time.Duration{tt.want}, r.receiveWaits, "ReceiveWait %s", tt.set)
	}
	client, err := NewClientFromConnectionString("Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=a2V5", nil)
	require.NoError(t, err)
	_, err = NewSource(client, Config{Entity: Entity{Queue: "q"}, ReceiveWait: -time.Millisecond})
	require.ErrorContains(t, err, "Config.ReceiveWait must not be negative")
}

func TestNewSourceRefusesANilAcceptClient(t *testing.T) {
	t.Parallel()
	client, err := NewClientFromConnectionString("Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=a2V5", nil)
	require.NoError(t, err)
	_, err = NewSource(client, Config{Entity: Entity{Queue: "q"}, AcceptClients: []*azservicebus.Client{nil}})
	require.ErrorContains(t, err, "nil client in Config.AcceptClients")
}
