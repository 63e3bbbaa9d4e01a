package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestSendReceiveFIFOAndAnnotations(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "orders", broker.EntityProperties{})
	sendN(t, q, 3)
	tb.clk.Advance(time.Second)

	ds := receiveNow(t, q, 10, peekLock)
	require.Equal(t, []string{"m1", "m2", "m3"}, bodies(ds))
	require.Equal(t, []int64{1, 2, 3}, seqs(ds))

	d := ds[0]
	a := d.Message.Annotations
	require.IsType(t, int64(0), a[broker.AnnotationSequenceNumber])
	require.Equal(t, int64(1), a[broker.AnnotationSequenceNumber])
	require.Equal(t, epoch, a[broker.AnnotationEnqueuedTime])
	require.Equal(t, epoch.Add(time.Second+time.Minute), a[broker.AnnotationLockedUntil])
	require.Equal(t, int64(0), a[broker.AnnotationMessageState])
	require.Equal(t, d.LockToken, d.Message.DeliveryAnnotations[broker.DeliveryAnnotationLockToken])
	require.Equal(t, epoch.Add(time.Second+time.Minute), d.LockedUntil)
	require.NotNil(t, d.Message.Properties, "the SDK reads the header only when properties are present")
	require.Equal(t, uint32(1), deliveryCount(d))
	require.NotEqual(t, amqp.UUID{}, d.LockToken)
	require.NotEqual(t, ds[0].LockToken, ds[1].LockToken)

	// Locked messages are not delivered again.
	require.Empty(t, receiveNow(t, q, 10, peekLock))
}

func TestSequenceNumbersAreNeverReused(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	sendN(t, q, 2)
	for _, d := range receiveNow(t, q, 2, peekLock) {
		require.NoError(t, q.Complete(d.LockToken))
	}
	send(t, q, msg("again"))
	require.Equal(t, int64(3), receiveOne(t, q, peekLock).SequenceNumber)
}

func TestSendKeepsItsOwnCopy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	m := msg("original")
	m.ApplicationProperties = map[string]any{"k": "v"}
	send(t, q, m)
	m.Data[0][0] = 'X'
	m.ApplicationProperties["k"] = "changed"

	d := receiveOne(t, q, peekLock)
	require.Equal(t, "original", string(d.Message.GetData()))
	require.Equal(t, "v", d.Message.ApplicationProperties["k"])
	require.Nil(t, m.Annotations[broker.AnnotationSequenceNumber], "the sender's message is not annotated")
}

func TestSettlement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// settle settles the first delivery; then the queue is read again.
		settle        func(q *broker.Entity, tok amqp.UUID) error
		wantRedeliver bool
		wantCount     uint32 // SDK delivery count of the redelivery
		wantProps     map[string]any
	}{
		{name: "complete deletes", settle: func(q *broker.Entity, tok amqp.UUID) error { return q.Complete(tok) }},
		{
			name: "abandon increments the delivery count and applies properties",
			settle: func(q *broker.Entity, tok amqp.UUID) error {
				return q.Abandon(tok, map[string]any{"reason": "busy"})
			},
			wantRedeliver: true, wantCount: 2, wantProps: map[string]any{"reason": "busy", "orig": int64(1)},
		},
		{
			name:          "release does not count a delivery",
			settle:        func(q *broker.Entity, tok amqp.UUID) error { return q.Release(tok) },
			wantRedeliver: true, wantCount: 1, wantProps: map[string]any{"orig": int64(1)},
		},
		{
			name: "defer hides the message from receivers",
			settle: func(q *broker.Entity, tok amqp.UUID) error {
				return q.Defer(tok, nil)
			},
		},
		{
			name: "dead-letter moves the message away",
			settle: func(q *broker.Entity, tok amqp.UUID) error {
				return q.DeadLetter(tok, "bad", "really bad", nil)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			q := tb.queue(t, "q", broker.EntityProperties{})
			m := msg("x")
			m.ApplicationProperties = map[string]any{"orig": int64(1)}
			send(t, q, m)
			d := receiveOne(t, q, peekLock)
			require.NoError(t, tt.settle(q, d.LockToken))

			// The token is spent whatever the outcome.
			require.ErrorIs(t, q.Complete(d.LockToken), broker.ErrLockLost)

			again := receiveNow(t, q, 1, peekLock)
			if !tt.wantRedeliver {
				require.Empty(t, again)
				return
			}
			require.Len(t, again, 1)
			require.Equal(t, int64(1), again[0].SequenceNumber)
			require.Equal(t, tt.wantCount, deliveryCount(again[0]))
			require.Equal(t, tt.wantProps, again[0].Message.ApplicationProperties)
		})
	}
}

func TestUnknownTokenIsLockLost(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	other := tb.queue(t, "other", broker.EntityProperties{})
	send(t, q, msg("x"))
	d := receiveOne(t, q, peekLock)
	for name, err := range map[string]error{
		"complete":        q.Complete(amqp.UUID{1}),
		"abandon":         q.Abandon(amqp.UUID{1}, nil),
		"defer":           q.Defer(amqp.UUID{1}, nil),
		"dead-letter":     q.DeadLetter(amqp.UUID{1}, "", "", nil),
		"other entity":    other.Complete(d.LockToken),
		"renew":           func() error { _, err := q.RenewLocks([]amqp.UUID{{1}}); return err }(),
		"expire (fault)":  q.ExpireLock(amqp.UUID{1}),
		"release unknown": q.Release(amqp.UUID{2}),
	} {
		require.ErrorIs(t, err, broker.ErrLockLost, name)
	}
}

func TestLockExpiryRedeliversWithCountPlusOne(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{LockDuration: 30 * time.Second})
	send(t, q, msg("x"))
	d := receiveOne(t, q, peekLock)

	tb.clk.Advance(29 * time.Second)
	require.Empty(t, receiveNow(t, q, 1, peekLock), "still locked")
	tb.clk.Advance(time.Second)

	require.ErrorIs(t, q.Complete(d.LockToken), broker.ErrLockLost)
	d2 := receiveOne(t, q, peekLock)
	require.Equal(t, uint32(2), deliveryCount(d2))
	require.NotEqual(t, d.LockToken, d2.LockToken)
}

func TestRenewLockExtends(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{LockDuration: 30 * time.Second})
	send(t, q, msg("x"))
	d := receiveOne(t, q, peekLock)
	tb.clk.Advance(20 * time.Second)
	until, err := q.RenewLocks([]amqp.UUID{d.LockToken})
	require.NoError(t, err)
	require.Equal(t, []time.Time{epoch.Add(50 * time.Second)}, until)
	tb.clk.Advance(20 * time.Second) // 40 s after receive: the original lock would be gone
	require.NoError(t, q.Complete(d.LockToken))
}

func TestExpireLockFaultHook(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	send(t, q, msg("x"))
	d := receiveOne(t, q, peekLock)
	require.NoError(t, q.ExpireLock(d.LockToken))
	require.ErrorIs(t, q.Complete(d.LockToken), broker.ErrLockLost)
	require.Equal(t, uint32(2), deliveryCount(receiveOne(t, q, peekLock)))
}

func TestMaxDeliveryCountDeadLetters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func(tb *bundle, q *broker.Entity, d *broker.Delivery)
	}{
		{"abandon", func(_ *bundle, q *broker.Entity, d *broker.Delivery) { require.NoError(t, q.Abandon(d.LockToken, nil)) }},
		{"lock expiry", func(tb *bundle, _ *broker.Entity, _ *broker.Delivery) { tb.clk.Advance(time.Minute) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			q := tb.queue(t, "q", broker.EntityProperties{MaxDeliveryCount: 3})
			send(t, q, msg("poison"))
			for i := 1; i <= 3; i++ {
				d := receiveOne(t, q, peekLock)
				require.Equal(t, uint32(i), deliveryCount(d))
				tt.fail(tb, q, d)
			}
			require.Empty(t, receiveNow(t, q, 1, peekLock))
			dlq := tb.lookup(t, "q/$DeadLetterQueue")
			d := receiveOne(t, dlq, peekLock)
			require.Equal(t, "poison", string(d.Message.GetData()))
			require.Equal(t, broker.ReasonMaxDeliveryCountExceeded, d.Message.ApplicationProperties[broker.PropertyDeadLetterReason])
			require.IsType(t, "", d.Message.ApplicationProperties[broker.PropertyDeadLetterErrorDescription])
			require.Equal(t, "q", d.Message.Annotations[broker.AnnotationDeadLetterSource])
			require.Equal(t, int64(1), d.SequenceNumber, "dead-lettered messages keep their number")
		})
	}
}

func TestDeadLetterSetsReasonDescriptionAndProperties(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	send(t, q, msg("x"))
	d := receiveOne(t, q, peekLock)
	require.NoError(t, q.DeadLetter(d.LockToken, "InvalidSequence", "gap at 7", map[string]any{"extra": "yes"}))

	require.Equal(t, int64(1), q.Info().Counts.DeadLetter)
	dlq := tb.lookup(t, "Q/$deadletterqueue")
	got := receiveOne(t, dlq, peekLock)
	require.Equal(t, map[string]any{
		broker.PropertyDeadLetterReason:           "InvalidSequence",
		broker.PropertyDeadLetterErrorDescription: "gap at 7",
		"extra": "yes",
	}, got.Message.ApplicationProperties)
	require.ErrorIs(t, dlq.DeadLetter(got.LockToken, "again", "", nil), broker.ErrNotAllowed)
	require.NoError(t, dlq.Complete(got.LockToken))
	require.Equal(t, int64(0), q.Info().Counts.Total)
}

func TestReceiveAndDelete(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	sendN(t, q, 2)
	ds := receiveNow(t, q, 5, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})
	require.Equal(t, []string{"m1", "m2"}, bodies(ds))
	require.Equal(t, amqp.UUID{}, ds[0].LockToken)
	require.True(t, ds[0].LockedUntil.IsZero())
	require.NotContains(t, ds[0].Message.Annotations, broker.AnnotationLockedUntil)
	require.Equal(t, int64(0), q.Info().Counts.Total)
}

func TestReceiveBlocksUntilMessageOrContextEnd(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := q.Receive(ctx, 1, peekLock)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	got := make(chan []*broker.Delivery)
	go func() {
		ds, err := q.Receive(t.Context(), 5, peekLock)
		if err != nil {
			ds = nil
		}
		got <- ds
	}()
	send(t, q, msg("late"))
	select {
	case ds := <-got:
		require.Equal(t, []string{"late"}, bodies(ds))
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not wake up")
	}
}

func TestReceiveWakesWithErrorOnClose(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	errc := make(chan error)
	go func() {
		_, err := q.Receive(t.Context(), 1, peekLock)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it block; a wake-up before it blocks is fine too
	tb.b.Close()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, broker.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return on Close")
	}
}

func TestTimeToLive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		props      broker.EntityProperties
		msgTTL     time.Duration
		defer_     bool
		wantExpiry time.Duration // after send
		wantDLQ    bool
	}{
		{name: "message TTL drops", msgTTL: 10 * time.Second, wantExpiry: 10 * time.Second},
		{name: "entity default applies", props: broker.EntityProperties{DefaultMessageTimeToLive: 20 * time.Second}, wantExpiry: 20 * time.Second},
		{name: "smaller of the two (message)", props: broker.EntityProperties{DefaultMessageTimeToLive: 20 * time.Second}, msgTTL: 5 * time.Second, wantExpiry: 5 * time.Second},
		{name: "smaller of the two (entity)", props: broker.EntityProperties{DefaultMessageTimeToLive: 20 * time.Second}, msgTTL: time.Hour, wantExpiry: 20 * time.Second},
		{name: "dead-letter on expiration", props: broker.EntityProperties{DeadLetteringOnMessageExpiration: true}, msgTTL: 10 * time.Second, wantExpiry: 10 * time.Second, wantDLQ: true},
		{name: "deferred messages expire", props: broker.EntityProperties{DeadLetteringOnMessageExpiration: true}, msgTTL: 10 * time.Second, defer_: true, wantExpiry: 10 * time.Second, wantDLQ: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			q := tb.queue(t, "q", tt.props)
			m := msg("x")
			if tt.msgTTL > 0 {
				m.Header = &amqp.MessageHeader{TTL: tt.msgTTL}
			}
			send(t, q, m)
			if tt.defer_ {
				d := receiveOne(t, q, peekLock)
				require.NoError(t, q.Defer(d.LockToken, nil))
			}
			tb.clk.Advance(tt.wantExpiry - time.Millisecond)
			require.Len(t, q.Peek(1, 10, ""), 1, "not yet expired")
			tb.clk.Advance(time.Millisecond)
			require.Empty(t, q.Peek(1, 10, ""), "expired")
			require.Empty(t, receiveNow(t, q, 1, peekLock))
			dlq := receiveNow(t, tb.lookup(t, "q/$DeadLetterQueue"), 1, peekLock)
			if !tt.wantDLQ {
				require.Empty(t, dlq)
				return
			}
			require.Len(t, dlq, 1)
			require.Equal(t, broker.ReasonTTLExpired, dlq[0].Message.ApplicationProperties[broker.PropertyDeadLetterReason])
		})
	}
}

func TestLockedMessageExpiresWhenItsLockEnds(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{LockDuration: time.Minute})
	m := msg("x")
	m.Header = &amqp.MessageHeader{TTL: 10 * time.Second}
	send(t, q, m)
	d := receiveOne(t, q, peekLock)
	tb.clk.Advance(30 * time.Second)
	_, err := q.RenewLocks([]amqp.UUID{d.LockToken})
	require.NoError(t, err)
	require.NoError(t, q.Abandon(d.LockToken, nil))
	require.Empty(t, receiveNow(t, q, 1, peekLock))
	require.Equal(t, int64(0), q.Info().Counts.Total)
}

func TestDeferAndReceiveDeferred(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	sendN(t, q, 3)
	ds := receiveNow(t, q, 3, peekLock)
	require.NoError(t, q.Defer(ds[0].LockToken, map[string]any{"deferred-by": "test"}))
	require.NoError(t, q.Defer(ds[2].LockToken, nil))
	require.NoError(t, q.Complete(ds[1].LockToken))

	peeked := q.Peek(1, 10, "")
	require.Equal(t, []string{"m1", "m3"}, peekBodies(peeked))
	require.Equal(t, int64(broker.MessageStateDeferred), peeked[0].Annotations[broker.AnnotationMessageState])

	_, err := q.ReceiveDeferred([]int64{3, 2}, peekLock)
	require.ErrorIs(t, err, broker.ErrMessageNotFound, "2 was completed")
	_, err = q.ReceiveDeferred([]int64{42}, peekLock)
	require.ErrorIs(t, err, broker.ErrMessageNotFound)

	got, err := q.ReceiveDeferred([]int64{3, 1}, peekLock)
	require.NoError(t, err)
	require.Equal(t, []string{"m3", "m1"}, bodies(got))
	require.Equal(t, "test", got[1].Message.ApplicationProperties["deferred-by"])
	require.Equal(t, got[0].LockToken, got[0].Message.DeliveryAnnotations[broker.DeliveryAnnotationLockToken])

	// An abandoned deferred message stays deferred.
	require.NoError(t, q.Abandon(got[1].LockToken, nil))
	require.Empty(t, receiveNow(t, q, 5, peekLock))
	require.NoError(t, q.Complete(got[0].LockToken))
	again, err := q.ReceiveDeferred([]int64{1}, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})
	require.NoError(t, err)
	require.Equal(t, uint32(2), deliveryCount(again[0]))
	require.Equal(t, int64(0), q.Info().Counts.Total)
}

func TestScheduledMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	at := epoch.Add(time.Minute)
	seqNums, err := q.Schedule([]*amqp.Message{msg("s1"), msg("s2")}, at)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, seqNums)

	viaAnnotation := msg("s3")
	viaAnnotation.Annotations = amqp.Annotations{amqp.Symbol(broker.AnnotationScheduledEnqueueTime): at}
	send(t, q, viaAnnotation)
	send(t, q, msg("now"))

	require.Equal(t, broker.Counts{Active: 1, Scheduled: 3, Total: 4, SizeBytes: q.Info().Counts.SizeBytes}, q.Info().Counts)
	peeked := q.Peek(1, 10, "")
	require.Equal(t, []string{"s1", "s2", "s3", "now"}, peekBodies(peeked))
	require.Equal(t, int64(broker.MessageStateScheduled), peeked[0].Annotations[broker.AnnotationMessageState])
	require.Equal(t, []string{"now"}, bodies(receiveNow(t, q, 10, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})))

	require.NoError(t, q.CancelScheduled([]int64{2}))
	require.ErrorIs(t, q.CancelScheduled([]int64{2}), broker.ErrMessageNotFound)
	require.ErrorIs(t, q.CancelScheduled([]int64{4}), broker.ErrMessageNotFound, "4 was not scheduled")

	tb.clk.Advance(time.Minute)
	ds := receiveNow(t, q, 10, peekLock)
	require.Equal(t, []string{"s1", "s3"}, bodies(ds))
	require.Equal(t, at, ds[0].Message.Annotations[broker.AnnotationEnqueuedTime])
	require.Equal(t, at, ds[0].Message.Annotations[broker.AnnotationScheduledEnqueueTime])
	require.Equal(t, int64(broker.MessageStateActive), ds[0].Message.Annotations[broker.AnnotationMessageState])
}

func TestPeek(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{})
	sendN(t, q, 5)
	d := receiveOne(t, q, peekLock) // m1 locked: peek still sees it

	tests := []struct {
		from int64
		max  int
		want []string
	}{
		{1, 10, []string{"m1", "m2", "m3", "m4", "m5"}},
		{3, 2, []string{"m3", "m4"}},
		{6, 10, []string{}},
		{0, 1, []string{"m1"}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, peekBodies(q.Peek(tt.from, tt.max, "")), "from %d max %d", tt.from, tt.max)
	}
	p := q.Peek(1, 1, "")[0]
	require.Equal(t, int64(1), p.Annotations[broker.AnnotationSequenceNumber])
	require.Nil(t, p.DeliveryAnnotations[broker.DeliveryAnnotationLockToken], "peek does not lock")
	require.NoError(t, q.Complete(d.LockToken), "peek left the lock alone")
}

func TestMaxMessageSize(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{MaxMessageSize: 1024})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue("q", broker.EntityProperties{}))
	q, err := b.Lookup("q")
	require.NoError(t, err)
	err = q.Send(context.Background(), []*amqp.Message{msg("ok"), amqp.NewMessage(make([]byte, 2000))})
	require.ErrorIs(t, err, broker.ErrMessageTooLarge)
	require.Equal(t, int64(0), q.Info().Counts.Total, "a refused batch enqueues nothing")
	require.NoError(t, q.Send(context.Background(), []*amqp.Message{amqp.NewMessage(make([]byte, 900))}))
}

func TestEntityStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status            broker.EntityStatus
		sendOK, receiveOK bool
	}{
		{broker.StatusActive, true, true},
		{broker.StatusDisabled, false, false},
		{broker.StatusSendDisabled, false, true},
		{broker.StatusReceiveDisabled, true, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			q := tb.queue(t, "q", broker.EntityProperties{})
			send(t, q, msg("before"))
			require.NoError(t, tb.b.UpdateQueue("q", broker.EntityProperties{Status: tt.status}))
			err := q.Send(context.Background(), []*amqp.Message{msg("x")})
			if tt.sendOK {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, broker.ErrEntityDisabled)
			}
			_, err = q.TryReceive(1, peekLock)
			if tt.receiveOK {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, broker.ErrEntityDisabled)
			}
		})
	}
}

func TestScheduledMessageTTLStartsAtActivation(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{DefaultMessageTimeToLive: 10 * time.Second})
	_, err := q.Schedule([]*amqp.Message{msg("later")}, epoch.Add(time.Minute))
	require.NoError(t, err)
	tb.clk.Advance(time.Minute + 9*time.Second)
	require.Len(t, q.Peek(1, 10, ""), 1, "alive 9 s after activation")
	tb.clk.Advance(time.Second)
	require.Empty(t, q.Peek(1, 10, ""))
}
