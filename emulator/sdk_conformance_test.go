package emulator_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
)

func requireCode(t *testing.T, err error, code azservicebus.Code) {
	t.Helper()
	require.Error(t, err)
	var sbErr *azservicebus.Error
	require.True(t, errors.As(err, &sbErr), "want *azservicebus.Error with code %s, got %T: %v", code, err, err)
	require.Equal(t, code, sbErr.Code, "error: %v", err)
}

func TestSendReceiveComplete(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)

	s := b.sender(t, "q1")
	before := time.Now().Add(-time.Second)
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello"), MessageID: ptr("m1")}, nil))

	r := b.receiver(t, "q1", nil)
	msgs := receiveN(ctx, t, r, 1)
	m := msgs[0]
	require.Equal(t, "hello", string(m.Body))
	require.Equal(t, "m1", m.MessageID)
	require.Equal(t, int64(1), *m.SequenceNumber)
	require.Equal(t, uint32(1), m.DeliveryCount)
	require.NotNil(t, m.EnqueuedTime)
	require.True(t, m.EnqueuedTime.After(before), "enqueued %v", m.EnqueuedTime)
	require.NotNil(t, m.LockedUntil)
	require.NotEqual(t, [16]byte{}, m.LockToken)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))

	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active)
}

func TestSendBatchFIFOAndSequenceNumbers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")

	batch, err := s.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil))
	}
	require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("m10")}, nil))

	r := b.receiver(t, "q1", nil)
	msgs := receiveN(ctx, t, r, 11)
	for i, m := range msgs {
		require.Equal(t, fmt.Sprintf("m%d", i), string(m.Body))
		require.Equal(t, int64(i+1), *m.SequenceNumber)
		if i < 10 {
			require.NotEmpty(t, m.MessageID, "batch messages get a message id")
		}
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
	}
}

func TestReceiveAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	for i := range 3 {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil))
	}
	r := b.receiver(t, "q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	msgs := receiveN(ctx, t, r, 3)
	for i, m := range msgs {
		require.Equal(t, fmt.Sprintf("m%d", i), string(m.Body))
	}
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "receive-and-delete removes messages")
}

func TestCreditLimitsDeliveriesAndLateArrivalsAreReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	for i := range 5 {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil))
	}
	r := b.receiver(t, "q1", nil)
	msgs, err := r.ReceiveMessages(ctx, 2, nil)
	require.NoError(t, err)
	require.LessOrEqual(t, len(msgs), 2, "never more than the credit")
	for _, m := range msgs {
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
	}
	// The rest arrive on later calls, never counted as failed deliveries.
	rest := receiveN(ctx, t, r, 5-len(msgs))
	for _, m := range rest {
		require.Equal(t, uint32(1), m.DeliveryCount, "released messages keep their delivery count")
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
	}
}

func TestLargeMultiFrameMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxMessageSize: 4 << 20, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	body := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB: ~48 frames
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, len(body), len(m.Body))
	require.True(t, bytes.Equal(body, m.Body))
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestMaxMessageSizeRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	err := s.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 300*1024)}, nil)
	require.ErrorIs(t, err, azservicebus.ErrMessageTooLarge)

	batch, err := s.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: make([]byte, 200*1024)}, nil))
	require.ErrorIs(t, batch.AddMessage(&azservicebus.Message{Body: make([]byte, 100*1024)}, nil), azservicebus.ErrMessageTooLarge)
	// The sender still works.
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("small")}, nil))
}

func TestAbandonWithPropertiesRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"attempt": int64(0)}}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.AbandonMessage(ctx, m, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"attempt": int64(1), "why": "busy"}}))
	m2 := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, *m.SequenceNumber, *m2.SequenceNumber)
	require.Equal(t, uint32(2), m2.DeliveryCount)
	require.Equal(t, int64(1), m2.ApplicationProperties["attempt"])
	require.Equal(t, "busy", m2.ApplicationProperties["why"])
	require.NoError(t, r.CompleteMessage(ctx, m2, nil))
}

func TestDeferAndReceiveDeferred(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("early")}, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("next")}, nil))
	r := b.receiver(t, "q1", nil)
	early := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, early, &azservicebus.DeferMessageOptions{PropertiesToModify: map[string]any{"deferred": true}}))
	next := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "next", string(next.Body), "a deferred message is not delivered again")
	require.NoError(t, r.CompleteMessage(ctx, next, nil))

	got, err := r.ReceiveDeferredMessages(ctx, []int64{*early.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "early", string(got[0].Body))
	require.Equal(t, azservicebus.MessageStateDeferred, got[0].State)
	require.Equal(t, true, got[0].ApplicationProperties["deferred"])
	require.NotEqual(t, [16]byte{}, got[0].LockToken)
	require.NoError(t, r.CompleteMessage(ctx, got[0], nil), "settled through $management")

	_, err = r.ReceiveDeferredMessages(ctx, []int64{*early.SequenceNumber}, nil)
	requireCode(t, err, azservicebus.CodeNotFound)
}

func TestDeadLetterAndReadDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("bad")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{
		Reason:             ptr("InvalidSequence"),
		ErrorDescription:   ptr("sequence 7 after 9"),
		PropertiesToModify: map[string]any{"extra": "yes"},
	}))
	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "bad", string(d.Body))
	require.Equal(t, "InvalidSequence", *d.DeadLetterReason)
	require.Equal(t, "sequence 7 after 9", *d.DeadLetterErrorDescription)
	require.Equal(t, "yes", d.ApplicationProperties["extra"])
	require.NotNil(t, d.DeadLetterSource)
	require.Equal(t, "q1", *d.DeadLetterSource)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestLockRenewalAndExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: 30 * time.Second, MaxDeliveryCount: 10}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	first := *m.LockedUntil

	clk.Advance(20 * time.Second)
	require.NoError(t, r.RenewMessageLock(ctx, m, nil))
	require.True(t, m.LockedUntil.After(first), "renewed lock %v after %v", *m.LockedUntil, first)
	clk.Advance(20 * time.Second) // 40 s after receive, 20 s after renewal: still held
	require.NoError(t, r.AbandonMessage(ctx, m, nil))

	m = receiveN(ctx, t, r, 1)[0]
	require.Equal(t, uint32(2), m.DeliveryCount)
	clk.Advance(31 * time.Second) // lock expires
	err := r.CompleteMessage(ctx, m, nil)
	requireCode(t, err, azservicebus.CodeLockLost)
	err = r.RenewMessageLock(ctx, m, nil)
	requireCode(t, err, azservicebus.CodeLockLost)

	m = receiveN(ctx, t, r, 1)[0]
	require.Equal(t, uint32(3), m.DeliveryCount, "lock expiry counts as a delivery")
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestMaxDeliveryCountDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {MaxDeliveryCount: 2}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("poison")}, nil))
	r := b.receiver(t, "q1", nil)
	for range 2 {
		m := receiveN(ctx, t, r, 1)[0]
		require.NoError(t, r.AbandonMessage(ctx, m, nil))
	}
	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "poison", string(d.Body))
	require.Equal(t, "MaxDeliveryCountExceeded", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestTTLExpiryDeadLetters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("stale"), TimeToLive: ptr(10 * time.Second)}, nil))
	clk.Advance(11 * time.Second)
	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "stale", string(d.Body))
	require.Equal(t, "TTLExpiredException", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestScheduleAndCancel(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	at := clk.Now().Add(time.Minute)
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("keep")}, {Body: []byte("cancel")}}, at, nil)
	require.NoError(t, err)
	require.Len(t, seqs, 2)
	require.NoError(t, s.CancelScheduledMessages(ctx, seqs[1:], nil))

	r := b.receiver(t, "q1", nil)
	peeked, err := r.PeekMessages(ctx, 10, nil)
	require.NoError(t, err)
	require.Len(t, peeked, 1)
	require.Equal(t, azservicebus.MessageStateScheduled, peeked[0].State)

	clk.Advance(time.Minute)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "keep", string(m.Body))
	require.Equal(t, seqs[0], *m.SequenceNumber)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestPeek(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	for i := range 5 {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil))
	}
	r := b.receiver(t, "q1", nil)
	first, err := r.PeekMessages(ctx, 3, nil)
	require.NoError(t, err)
	require.Len(t, first, 3)
	second, err := r.PeekMessages(ctx, 3, nil)
	require.NoError(t, err)
	require.Len(t, second, 2)
	require.Equal(t, "m3", string(second[0].Body), "peek continues after the last peeked message")
	from, err := r.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(2))})
	require.NoError(t, err)
	require.Equal(t, "m1", string(from[0].Body))
	none, err := r.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(100))})
	require.NoError(t, err)
	require.Empty(t, none)
	// Peeking locks nothing.
	all := receiveN(ctx, t, r, 5)
	require.Equal(t, uint32(1), all[0].DeliveryCount)
}

func TestApplicationPropertiesRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	when := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	props := map[string]any{
		"i32": int32(-7), "i64": int64(1 << 40), "s": "text", "b": true,
		"f": 2.5, "t": when, "bin": []byte{1, 2, 3},
		"id": amqp.UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8},
	}
	msg := &azservicebus.Message{
		Body: []byte("p"), ApplicationProperties: props,
		CorrelationID: ptr("corr"), Subject: ptr("subj"), ContentType: ptr("application/json"),
		To: ptr("to"), ReplyTo: ptr("reply"), PartitionKey: nil,
	}
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, msg, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	for k, v := range props {
		if tv, ok := v.(time.Time); ok {
			got, ok := m.ApplicationProperties[k].(time.Time)
			require.True(t, ok, "property %s is %T", k, m.ApplicationProperties[k])
			require.True(t, tv.Equal(got), "property %s: %v != %v", k, got, tv)
			continue
		}
		require.Equal(t, v, m.ApplicationProperties[k], "property %s", k)
	}
	require.Equal(t, "corr", *m.CorrelationID)
	require.Equal(t, "subj", *m.Subject)
	require.Equal(t, "application/json", *m.ContentType)
	require.Equal(t, "to", *m.To)
	require.Equal(t, "reply", *m.ReplyTo)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestTopicFanOut(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{topics: map[string][]string{"t1": {"s1", "s2"}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "t1").SendMessage(ctx, &azservicebus.Message{Body: []byte("event")}, nil))
	for _, sub := range []string{"s1", "s2"} {
		r, err := b.client.NewReceiverForSubscription("t1", sub, nil)
		require.NoError(t, err)
		m := receiveN(ctx, t, r, 1)[0]
		require.Equal(t, "event", string(m.Body), "subscription %s", sub)
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
		require.NoError(t, r.Close(ctx))
	}
}

func TestReceiveDeferredInReceiveAndDeleteMode(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("later")}, nil))
	peekLock := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, peekLock, 1)[0]
	require.NoError(t, peekLock.DeferMessage(ctx, m, nil))

	rad := b.receiver(t, "q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got, err := rad.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "later", string(got[0].Body))
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "received and deleted")
}
