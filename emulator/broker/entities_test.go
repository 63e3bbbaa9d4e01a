package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateQueue("Orders", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateQueue("app/inbox", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateTopic("events", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("events", "audit", broker.EntityProperties{}))

	tests := []struct {
		addr     string
		wantPath string
		wantKind broker.EntityKind
	}{
		{"Orders", "Orders", broker.KindQueue},
		{"orders", "Orders", broker.KindQueue},
		{"/orders", "Orders", broker.KindQueue},
		{"orders/$DeadLetterQueue", "Orders/$DeadLetterQueue", broker.KindDeadLetterQueue},
		{"ORDERS/$deadletterqueue", "Orders/$DeadLetterQueue", broker.KindDeadLetterQueue},
		{"app/inbox", "app/inbox", broker.KindQueue},
		{"app/inbox/$DeadLetterQueue", "app/inbox/$DeadLetterQueue", broker.KindDeadLetterQueue},
		{"events", "events", broker.KindTopic},
		{"events/Subscriptions/audit", "events/Subscriptions/audit", broker.KindSubscription},
		{"Events/subscriptions/AUDIT", "events/Subscriptions/audit", broker.KindSubscription},
		{"events/Subscriptions/audit/$DeadLetterQueue", "events/Subscriptions/audit/$DeadLetterQueue", broker.KindDeadLetterQueue},
	}
	for _, tt := range tests {
		e, err := tb.b.Lookup(tt.addr)
		require.NoError(t, err, tt.addr)
		require.Equal(t, tt.wantPath, e.Path(), tt.addr)
		require.Equal(t, tt.wantKind, e.Kind(), tt.addr)
	}
	for _, addr := range []string{"", "nope", "events/$DeadLetterQueue", "events/Subscriptions/nope",
		"orders/Subscriptions/audit", "events/Subscriptions/audit/$DeadLetterQueue/$DeadLetterQueue", "$cbs"} {
		_, err := tb.b.Lookup(addr)
		require.ErrorIs(t, err, broker.ErrNotFound, addr)
	}
}

func TestEntityLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateQueue("q", broker.EntityProperties{}))
	require.ErrorIs(t, tb.b.CreateQueue("Q", broker.EntityProperties{}), broker.ErrEntityExists)
	require.ErrorIs(t, tb.b.CreateTopic("q", broker.EntityProperties{}), broker.ErrEntityExists)
	require.ErrorIs(t, tb.b.CreateQueue("", broker.EntityProperties{}), broker.ErrInvalidConfig)
	require.ErrorIs(t, tb.b.CreateQueue("bad", broker.EntityProperties{LockDuration: -1}), broker.ErrInvalidConfig)
	require.ErrorIs(t, tb.b.CreateSubscription("nope", "s", broker.EntityProperties{}), broker.ErrNotFound)

	info, err := tb.b.GetQueue("q")
	require.NoError(t, err)
	require.Equal(t, broker.EntityProperties{
		LockDuration: broker.DefaultLockDuration, MaxDeliveryCount: broker.DefaultMaxDeliveryCount,
		DuplicateDetectionHistoryTimeWindow: broker.DefaultDuplicateWindow, Status: broker.StatusActive,
	}, info.Properties, "service defaults")
	require.Equal(t, epoch, info.CreatedAt)

	q := tb.lookup(t, "q")
	require.NoError(t, tb.b.UpdateQueue("q", broker.EntityProperties{LockDuration: 10 * time.Second}))
	send(t, q, msg("x"))
	require.Equal(t, epoch.Add(10*time.Second), receiveOne(t, q, peekLock).LockedUntil)
	require.ErrorIs(t, tb.b.UpdateQueue("q", broker.EntityProperties{RequiresSession: true}), broker.ErrNotAllowed)
	// Service Bus fixes duplicate detection at creation too.
	require.ErrorIs(t, tb.b.UpdateQueue("q", broker.EntityProperties{RequiresDuplicateDetection: true}), broker.ErrNotAllowed)
	require.NoError(t, tb.b.CreateTopic("dd", broker.EntityProperties{RequiresDuplicateDetection: true}))
	require.ErrorIs(t, tb.b.UpdateTopic("dd", broker.EntityProperties{}), broker.ErrNotAllowed)
	require.NoError(t, tb.b.UpdateTopic("dd", broker.EntityProperties{RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: time.Hour}))

	// Counts.
	send(t, q, msg("y"))
	_, err = q.Schedule([]*amqp.Message{msg("z")}, epoch.Add(time.Hour))
	require.NoError(t, err)
	d := receiveOne(t, q, peekLock)
	require.NoError(t, q.DeadLetter(d.LockToken, "r", "", nil))
	c := q.Info().Counts
	require.Equal(t, int64(1), c.Active)
	require.Equal(t, int64(1), c.DeadLetter)
	require.Equal(t, int64(1), c.Scheduled)
	require.Equal(t, int64(3), c.Total)
	require.Positive(t, c.SizeBytes)

	// Deleting wakes waiters and invalidates the handle.
	errc := make(chan error, 1)
	empty := tb.queue(t, "empty", broker.EntityProperties{})
	go func() {
		_, err := empty.Receive(t.Context(), 1, peekLock)
		errc <- err
	}()
	require.NoError(t, tb.b.DeleteQueue("empty"))
	select {
	case err := <-errc:
		require.ErrorIs(t, err, broker.ErrNotFound)
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return after delete")
	}
	require.ErrorIs(t, tb.b.DeleteQueue("empty"), broker.ErrNotFound)
	require.ErrorIs(t, empty.Send(context.Background(), []*amqp.Message{msg("x")}), broker.ErrNotFound)
	require.NoError(t, tb.b.CreateQueue("empty", broker.EntityProperties{}), "the name is free again")

	require.NoError(t, tb.b.DeleteQueue("q"))
	tb.clk.Advance(2 * time.Hour) // the scheduled message's timer must not resurrect anything
	require.Len(t, tb.b.ListQueues(), 1)
}

func TestTopicLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "b", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "a", broker.EntityProperties{}))
	require.ErrorIs(t, tb.b.CreateSubscription("t", "A", broker.EntityProperties{}), broker.ErrEntityExists)
	subs, err := tb.b.ListSubscriptions("t")
	require.NoError(t, err)
	require.Equal(t, "a", subs[0].Name)
	require.Equal(t, "t", subs[0].Topic)
	info, err := tb.b.GetTopic("t")
	require.NoError(t, err)
	require.Equal(t, 2, info.SubscriptionCount)

	require.NoError(t, tb.b.UpdateSubscription("t", "a", broker.EntityProperties{MaxDeliveryCount: 1}))
	sub := tb.lookup(t, "t/Subscriptions/a")
	send(t, tb.lookup(t, "t"), msg("x"))
	d := receiveOne(t, sub, peekLock)
	require.NoError(t, sub.Abandon(d.LockToken, nil))
	require.Len(t, receiveNow(t, tb.lookup(t, "t/Subscriptions/a/$DeadLetterQueue"), 1, peekLock), 1)

	require.NoError(t, tb.b.DeleteSubscription("t", "a"))
	_, err = tb.b.Lookup("t/Subscriptions/a")
	require.ErrorIs(t, err, broker.ErrNotFound)
	require.NoError(t, tb.b.DeleteTopic("t"))
	_, err = tb.b.Lookup("t/Subscriptions/b")
	require.ErrorIs(t, err, broker.ErrNotFound)
	require.Empty(t, tb.b.ListTopics())
}

func TestClosedBroker(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{RequiresSession: true})
	l := accept(t, q, "a")
	tb.b.Close()
	tb.b.Close()
	require.ErrorIs(t, q.Send(context.Background(), []*amqp.Message{sessionMsg("a", "x")}), broker.ErrClosed)
	_, err := tb.b.Lookup("q")
	require.ErrorIs(t, err, broker.ErrClosed)
	select {
	case <-l.Lost():
	default:
		t.Fatal("session lock not lost on Close")
	}
}

func TestRealClockTimersStopOnClose(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{})
	require.NoError(t, b.CreateQueue("q", broker.EntityProperties{LockDuration: time.Hour}))
	q, err := b.Lookup("q")
	require.NoError(t, err)
	m := msg("x")
	m.Header = &amqp.MessageHeader{TTL: time.Hour}
	send(t, q, m)
	_, err = q.Schedule([]*amqp.Message{msg("later")}, time.Now().Add(time.Hour))
	require.NoError(t, err)
	_, err = q.Receive(context.Background(), 1, peekLock)
	require.NoError(t, err)
	b.Close() // goleak in TestMain checks nothing keeps running
}

func TestBrokerExpireLockFindsTheHolder(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
	send(t, tb.lookup(t, "t"), msg("x"))
	sub := tb.lookup(t, "t/Subscriptions/s")
	d := receiveOne(t, sub, peekLock)
	require.NoError(t, tb.b.ExpireLock(d.LockToken))
	require.ErrorIs(t, tb.b.ExpireLock(d.LockToken), broker.ErrLockLost)
	require.ErrorIs(t, sub.Complete(d.LockToken), broker.ErrLockLost)
	require.Equal(t, uint32(2), deliveryCount(receiveOne(t, sub, peekLock)))
}
