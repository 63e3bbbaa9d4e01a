package emulator_test

// Conformance tests added by the issue-3 audit: each closes a gap left by the
// tests in sdk_conformance_test.go, sessions_test.go and faults_test.go.

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

func TestLinksToMissingEntitiesAreNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{
		queues: map[string]broker.EntityProperties{"q1": {}},
		topics: map[string][]string{"t1": {"s1"}},
	})
	ctx := testCtx(t)
	receive := func(r *azservicebus.Receiver, err error) error {
		require.NoError(t, err)
		_, err = r.ReceiveMessages(ctx, 1, nil)
		return err
	}
	dlq := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"sender to missing topic", func() error {
			s, err := b.client.NewSender("no-topic", nil)
			require.NoError(t, err)
			return s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
		}},
		{"missing subscription of a topic", func() error { return receive(b.client.NewReceiverForSubscription("t1", "no-sub", nil)) }},
		{"subscription of a missing topic", func() error { return receive(b.client.NewReceiverForSubscription("no-topic", "s1", nil)) }},
		{"dead-letter queue of a missing queue", func() error { return receive(b.client.NewReceiverForQueue("no-queue", dlq)) }},
		{"dead-letter queue of a missing subscription", func() error { return receive(b.client.NewReceiverForSubscription("t1", "no-sub", dlq)) }},
		{"named session of a missing queue", func() error {
			_, err := b.client.AcceptSessionForQueue(ctx, "no-queue", "a", nil)
			return err
		}},
		{"peek on a missing queue", func() error {
			r, err := b.client.NewReceiverForQueue("no-queue", nil)
			require.NoError(t, err)
			_, err = r.PeekMessages(ctx, 1, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCode(t, tc.do(), azservicebus.CodeNotFound)
		})
	}
}

func TestLockedUntilIsNowPlusLockDuration(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(start)
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: 45 * time.Second}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.WithinDuration(t, start.Add(45*time.Second), *m.LockedUntil, time.Second)
	require.WithinDuration(t, start, *m.EnqueuedTime, time.Second, "enqueued time comes from the emulator's clock")

	clk.Advance(30 * time.Second)
	require.NoError(t, r.RenewMessageLock(ctx, m, nil))
	require.WithinDuration(t, start.Add(75*time.Second), *m.LockedUntil, time.Second, "renewal restarts the lock at now")
	require.NoError(t, r.DeferMessage(ctx, m, nil))

	clk.Advance(time.Minute)
	got, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.WithinDuration(t, clk.Now().Add(45*time.Second), *got[0].LockedUntil, time.Second, "deferred receive locks for LockDuration")
	clk.Advance(40 * time.Second)
	require.NoError(t, r.RenewMessageLock(ctx, got[0], nil))
	require.WithinDuration(t, clk.Now().Add(45*time.Second), *got[0].LockedUntil, time.Second)
	clk.Advance(40 * time.Second)
	require.NoError(t, r.CompleteMessage(ctx, got[0], nil), "the renewed lock still holds")
}

func TestReceiveAndDeleteMessagesCarryNoLock(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "x", string(m.Body))
	require.Equal(t, [16]byte{}, m.LockToken, "receive-and-delete has nothing to settle")
	require.Nil(t, m.LockedUntil)
}

func TestFiveMegabyteMessageBothDirections(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxMessageSize: 100 << 20, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	body := make([]byte, 5<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: body}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.True(t, bytes.Equal(body, m.Body), "5 MiB body arrives intact (got %d bytes)", len(m.Body))
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestMessageJustOverTheDefaultMaxSizeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	// A 256 KiB body plus the envelope is just over 256 KiB.
	err := s.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 256*1024)}, nil)
	require.ErrorIs(t, err, azservicebus.ErrMessageTooLarge)
	// A body leaving room for the envelope fits.
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 255*1024)}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Len(t, m.Body, 255*1024)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestBatchFollowsTheConfiguredMaxMessageSize(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxMessageSize: 1 << 20, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	batch, err := s.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	// 600 KiB fits a 1 MiB link, not the 256 KiB default.
	require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: make([]byte, 600*1024)}, nil))
	require.ErrorIs(t, batch.AddMessage(&azservicebus.Message{Body: make([]byte, 500*1024)}, nil), azservicebus.ErrMessageTooLarge)
	require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: make([]byte, 300*1024)}, nil))
	require.Equal(t, int32(2), batch.NumMessages())
	require.NoError(t, s.SendMessageBatch(ctx, batch, nil))
	r := b.receiver(t, "q1", nil)
	msgs := receiveN(ctx, t, r, 2)
	require.Len(t, msgs[0].Body, 600*1024)
	require.Len(t, msgs[1].Body, 300*1024)
}

func TestTTLExpiryDropsWithoutDeadLettering(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("stale"), TimeToLive: ptr(10 * time.Second)}, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("fresh"), TimeToLive: ptr(time.Hour)}, nil))
	clk.Advance(11 * time.Second)

	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "fresh", string(m.Body), "the expired message is never delivered")
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.DeadLetter, "dropped, not dead-lettered")
	require.Zero(t, info.Counts.Active)
}

func TestSystemPropertiesRoundTrip(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{
		"q1": {},
		"sq": {RequiresSession: true},
	}})
	ctx := testCtx(t)
	at := clk.Now().Add(time.Minute)
	msg := &azservicebus.Message{
		Body:                 []byte("p"),
		MessageID:            ptr("mid"),
		CorrelationID:        ptr("corr"),
		Subject:              ptr("subj"),
		To:                   ptr("to"),
		ReplyTo:              ptr("reply"),
		ReplyToSessionID:     ptr("reply-session"),
		ContentType:          ptr("text/plain"),
		PartitionKey:         ptr("pk"),
		TimeToLive:           ptr(90 * time.Minute),
		ScheduledEnqueueTime: &at,
	}
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, msg, nil))
	clk.Advance(time.Minute)
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "mid", m.MessageID)
	require.Equal(t, "corr", *m.CorrelationID)
	require.Equal(t, "subj", *m.Subject)
	require.Equal(t, "to", *m.To)
	require.Equal(t, "reply", *m.ReplyTo)
	require.Equal(t, "reply-session", *m.ReplyToSessionID)
	require.Equal(t, "text/plain", *m.ContentType)
	require.Equal(t, "pk", *m.PartitionKey)
	require.Equal(t, 90*time.Minute, *m.TimeToLive)
	require.NotNil(t, m.ScheduledEnqueueTime)
	require.True(t, at.Equal(*m.ScheduledEnqueueTime), "scheduled %v, want %v", *m.ScheduledEnqueueTime, at)
	require.WithinDuration(t, at, *m.EnqueuedTime, time.Second, "a scheduled message is enqueued at its time")
	require.NotNil(t, m.ExpiresAt)
	require.WithinDuration(t, m.EnqueuedTime.Add(90*time.Minute), *m.ExpiresAt, time.Second)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))

	// On a session queue the session id travels as group-id and the partition key equals it.
	require.NoError(t, b.sender(t, "sq").SendMessage(ctx, &azservicebus.Message{Body: []byte("s"), SessionID: ptr("a"), PartitionKey: ptr("a")}, nil))
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	sm := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "a", *sm.SessionID)
	require.Equal(t, "a", *sm.PartitionKey)
	require.NoError(t, sr.CompleteMessage(ctx, sm, nil))
}

func TestPeekShowsEveryStateAndPagesBySequenceNumber(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	for i := range 3 {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i+1)}, nil))
	}
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("m4")}}, clk.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	require.Equal(t, []int64{4}, seqs)
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("m5")}, nil))

	r := b.receiver(t, "q1", nil)
	m1 := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "m1", string(m1.Body))
	require.NoError(t, r.DeferMessage(ctx, m1, nil))
	m2 := receiveN(ctx, t, r, 1)[0] // locked: still peeked as active

	var got []string
	var states []azservicebus.MessageState
	from := int64(1)
	for page := 0; page < 10; page++ {
		msgs, err := r.PeekMessages(ctx, 2, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		require.NoError(t, err)
		if len(msgs) == 0 {
			break
		}
		require.LessOrEqual(t, len(msgs), 2)
		for _, m := range msgs {
			got = append(got, string(m.Body))
			states = append(states, m.State)
			require.Equal(t, [16]byte{}, m.LockToken, "peeked messages are not locked")
		}
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
	require.Equal(t, []string{"m1", "m2", "m3", "m4", "m5"}, got)
	require.Equal(t, []azservicebus.MessageState{
		azservicebus.MessageStateDeferred, azservicebus.MessageStateActive, azservicebus.MessageStateActive,
		azservicebus.MessageStateScheduled, azservicebus.MessageStateActive,
	}, states)
	require.NoError(t, r.CompleteMessage(ctx, m2, nil), "peeking leaves the lock alone")
}

func TestSubscriptionDeadLetterQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{topics: map[string][]string{"t1": {"s1", "s2"}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "t1").SendMessage(ctx, &azservicebus.Message{Body: []byte("event")}, nil))
	r, err := b.client.NewReceiverForSubscription("t1", "s1", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(ctx) })
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: ptr("Bad"), ErrorDescription: ptr("why")}))

	dlq, err := b.client.NewReceiverForSubscription("t1", "s1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dlq.Close(ctx) })
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "event", string(d.Body))
	require.Equal(t, "Bad", *d.DeadLetterReason)
	require.Equal(t, "why", *d.DeadLetterErrorDescription)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))

	s2, err := b.srv.Broker().GetSubscription("t1", "s2")
	require.NoError(t, err)
	require.Equal(t, int64(1), s2.Counts.Active, "the other subscription keeps its copy")
	require.Zero(t, s2.Counts.DeadLetter)
}

func TestSessionStateLimitedToMaxMessageSize(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	state := bytes.Repeat([]byte{0, 1, 2, 0xff}, 200*1024/4)
	require.NoError(t, sr.SetSessionState(ctx, state, nil))
	require.Error(t, sr.SetSessionState(ctx, make([]byte, 257*1024), nil), "state over the max message size is refused")
	got, err := sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(state, got), "binary state kept intact; the refused set changed nothing")
}

func TestDeferredSessionMessageOnlyForTheLockHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	sendToSession(ctx, t, s, "a", "a1")
	sendToSession(ctx, t, s, "b", "b1")
	ra, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ra.Close(ctx) })
	m := receiveN(ctx, t, ra, 1)[0]
	require.NoError(t, ra.DeferMessage(ctx, m, nil))

	rb, err := b.client.AcceptSessionForQueue(ctx, "sq", "b", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rb.Close(ctx) })
	_, err = rb.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	requireCode(t, err, azservicebus.CodeNotFound)

	got, err := ra.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "a1", string(got[0].Body))
	require.NoError(t, ra.CompleteMessage(ctx, got[0], nil))
}

func TestLockExpiriesCountTowardsMaxDeliveryCount(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: 10 * time.Second, MaxDeliveryCount: 2}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("slow")}, nil))
	r := b.receiver(t, "q1", nil)
	for want := uint32(1); want <= 2; want++ {
		m := receiveN(ctx, t, r, 1)[0]
		require.Equal(t, want, m.DeliveryCount)
		clk.Advance(11 * time.Second)
	}
	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "slow", string(d.Body))
	require.Equal(t, "MaxDeliveryCountExceeded", *d.DeadLetterReason)
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active)
}

func TestSettlingTwiceIsLockLost(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
	// go-amqp ignores a second settlement of a link delivery, so the lock
	// token is checked through $management.
	requireCode(t, r.RenewMessageLock(ctx, m, nil), azservicebus.CodeLockLost)

	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("y")}, nil))
	d := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, d, nil))
	got, err := r.ReceiveDeferredMessages(ctx, []int64{*d.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, r.CompleteMessage(ctx, got[0], nil))
	requireCode(t, r.CompleteMessage(ctx, got[0], nil), azservicebus.CodeLockLost)
	requireCode(t, r.AbandonMessage(ctx, got[0], nil), azservicebus.CodeLockLost)
}

func TestDeferredMessageLockExpiryKeepsItDeferred(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: 10 * time.Second, MaxDeliveryCount: 10}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("deferred")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, m, nil))
	got, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	clk.Advance(11 * time.Second)
	requireCode(t, r.CompleteMessage(ctx, got[0], nil), azservicebus.CodeLockLost)

	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("active")}, nil))
	next := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "active", string(next.Body), "the deferred message does not become active")
	again, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, azservicebus.MessageStateDeferred, again[0].State)
	require.Greater(t, again[0].DeliveryCount, got[0].DeliveryCount)
	require.NoError(t, r.CompleteMessage(ctx, again[0], nil))
}

func TestDeadLetteredSessionMessageReadWithoutASession(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	m := receiveN(ctx, t, sr, 1)[0]
	require.NoError(t, sr.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: ptr("InvalidSequence")}))

	dlq := b.receiver(t, "sq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "a1", string(d.Body))
	require.Equal(t, "a", *d.SessionID)
	require.Equal(t, "InvalidSequence", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestSessionPeekAndAbandonStayInTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	sendToSession(ctx, t, s, "a", "a1", "a2")
	sendToSession(ctx, t, s, "b", "b1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	peeked, err := sr.PeekMessages(ctx, 10, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2"}, bodies(peeked), "peek shows only the session's messages")

	m := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "a1", string(m.Body))
	require.NoError(t, sr.AbandonMessage(ctx, m, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"retry": int32(1)}}))
	again := receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "a1", string(again.Body), "an abandoned message keeps its place in the session")
	require.Equal(t, uint32(2), again.DeliveryCount)
	require.Equal(t, int32(1), again.ApplicationProperties["retry"])
	require.NoError(t, sr.CompleteMessage(ctx, again, nil))
}

func TestApplicationPropertiesKeepNarrowAMQPTypes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	props := map[string]any{
		"i8": int8(-8), "i16": int16(-16), "u8": uint8(8), "u16": uint16(16), "u32": uint32(32),
		"u64": uint64(1 << 60), "f32": float32(1.5), "empty": "", "neg": int64(-1),
	}
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x"), ApplicationProperties: props}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, props, m.ApplicationProperties)
	require.NoError(t, r.AbandonMessage(ctx, m, nil))
	again := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, props, again.ApplicationProperties, "types survive a redelivery")
	require.NoError(t, r.CompleteMessage(ctx, again, nil))
}

func TestCancelUnknownScheduledMessage(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	requireCode(t, s.CancelScheduledMessages(ctx, []int64{42}, nil), azservicebus.CodeNotFound)

	// A schedule in the past is active at once.
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("now")}}, clk.Now().Add(-time.Minute), nil)
	require.NoError(t, err)
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, seqs[0], *m.SequenceNumber)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

// After a session lock expires, another client can take the session; the first
// holder then cannot renew (the SDK retries a lost session lock by re-attaching,
// which the new holder's lock refuses).
func TestExpiredSessionLockGoesToTheNextTaker(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: sessionQueue(30 * time.Second)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	require.WithinDuration(t, clk.Now().Add(30*time.Second), sr.LockedUntil(), time.Second)
	m := receiveN(ctx, t, sr, 1)[0]
	clk.Advance(31 * time.Second)

	other := b.srv.NewClient(t, testClientOptions())
	sr2, err := other.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err, "the expired lock frees the session")
	t.Cleanup(func() { _ = sr2.Close(ctx) })
	require.Error(t, sr.RenewSessionLock(ctx, nil), "the old holder cannot renew")
	again := receiveN(ctx, t, sr2, 1)[0]
	require.Equal(t, *m.SequenceNumber, *again.SequenceNumber)
	require.Equal(t, uint32(2), again.DeliveryCount)
	require.NoError(t, sr2.CompleteMessage(ctx, again, nil))
}

func TestSharedAccessSignatureAudienceIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}, "q2": {}}})
	ctx := testCtx(t)
	ns := "sb://" + b.srv.AMQPAddr()
	for _, tc := range []struct {
		name     string
		audience string
		ok       bool
	}{
		{name: "namespace", audience: ns + "/", ok: true},
		{name: "the entity itself", audience: ns + "/q1", ok: true},
		{name: "another entity", audience: ns + "/q2"},
		{name: "another namespace", audience: "sb://elsewhere.servicebus.windows.net/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := sas.Sign(emulator.DefaultKeyName, emulator.DefaultKey, tc.audience, time.Now().Add(time.Hour))
			client := newClient(t, "Endpoint="+ns+";SharedAccessSignature="+token+";UseDevelopmentEmulator=true")
			s, err := client.NewSender("q1", nil)
			require.NoError(t, err)
			err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
		})
	}
}

func TestWrongKeyRefusedForManagementAndSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}, "sq": {RequiresSession: true}}})
	ctx := testCtx(t)
	bad := newClient(t, strings.Replace(b.srv.ConnectionString(), "SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=wrong", 1))
	r, err := bad.NewReceiverForQueue("q1", nil)
	require.NoError(t, err)
	_, err = r.PeekMessages(ctx, 1, nil)
	requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
	_, err = bad.AcceptSessionForQueue(ctx, "sq", "a", nil)
	requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
	s, err := bad.NewSender("q1", nil)
	require.NoError(t, err)
	_, err = s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("x")}}, time.Now().Add(time.Hour), nil)
	requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
}

func TestExpiredLockReturnsTheMessageToItsPlace(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: 10 * time.Second, MaxDeliveryCount: 10}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	for _, body := range []string{"m1", "m2"} {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil))
	}
	r := b.receiver(t, "q1", nil)
	first, err := r.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, "m1", string(first[0].Body))
	clk.Advance(11 * time.Second)
	again := receiveN(ctx, t, r, 2)
	require.Equal(t, []string{"m1", "m2"}, bodies(again), "FIFO by sequence number after a lock expiry")
	require.Equal(t, uint32(2), again[0].DeliveryCount)
	require.Equal(t, uint32(1), again[1].DeliveryCount)
}

func TestDeadLetterQueueNeitherExpiresNorDeadLettersAgain(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {MaxDeliveryCount: 1, DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x"), TimeToLive: ptr(time.Hour)}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.AbandonMessage(ctx, m, nil)) // MaxDeliveryCount 1: dead-lettered

	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	for range 3 {
		d := receiveN(ctx, t, dlq, 1)[0]
		require.Equal(t, "MaxDeliveryCountExceeded", *d.DeadLetterReason)
		require.NoError(t, dlq.AbandonMessage(ctx, d, nil), "abandon in the DLQ keeps it there")
	}
	clk.Advance(2 * time.Hour)
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "x", string(d.Body), "dead-lettered messages do not expire")
	require.Equal(t, "MaxDeliveryCountExceeded", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total)
}

func TestScheduledMessageTimeToLiveStartsAtEnqueue(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	_, err := b.sender(t, "q1").ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later"), TimeToLive: ptr(10 * time.Minute)}}, clk.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	clk.Advance(time.Hour + time.Minute)
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "later", string(m.Body))
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestTTLExpiryInASubscriptionDeadLetters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk})
	require.NoError(t, b.srv.Broker().CreateTopic("t1", broker.EntityProperties{}))
	require.NoError(t, b.srv.Broker().CreateSubscription("t1", "keep", broker.EntityProperties{DeadLetteringOnMessageExpiration: true}))
	require.NoError(t, b.srv.Broker().CreateSubscription("t1", "drop", broker.EntityProperties{}))
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "t1").SendMessage(ctx, &azservicebus.Message{Body: []byte("stale"), TimeToLive: ptr(time.Second)}, nil))
	clk.Advance(2 * time.Second)
	dlq, err := b.client.NewReceiverForSubscription("t1", "keep", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dlq.Close(ctx) })
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "TTLExpiredException", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
	drop, err := b.srv.Broker().GetSubscription("t1", "drop")
	require.NoError(t, err)
	require.Zero(t, drop.Counts.Total)
}

func TestLargeMessagesThroughManagement(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, maxMessageSize: 8 << 20, queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	body := bytes.Repeat([]byte("seqbus!"), (2<<20)/7) // ~2 MiB
	s := b.sender(t, "q1")
	// Scheduling sends the message inside a $management request.
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: body}}, clk.Now().Add(time.Minute), nil)
	require.NoError(t, err)
	r := b.receiver(t, "q1", nil)
	peeked, err := r.PeekMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Len(t, peeked, 1)
	require.True(t, bytes.Equal(body, peeked[0].Body), "peek response carries the whole message")

	clk.Advance(time.Minute)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, seqs[0], *m.SequenceNumber)
	require.NoError(t, r.DeferMessage(ctx, m, nil))
	got, err := r.ReceiveDeferredMessages(ctx, seqs, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, bytes.Equal(body, got[0].Body), "receive-by-sequence-number response carries the whole message")
	require.NoError(t, r.CompleteMessage(ctx, got[0], nil))
}

func TestLargeMessageInASession(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxMessageSize: 4 << 20, queues: sessionQueue(0)})
	ctx := testCtx(t)
	body := bytes.Repeat([]byte{0xab, 0xcd}, 1<<20) // 2 MiB
	require.NoError(t, b.sender(t, "sq").SendMessage(ctx, &azservicebus.Message{Body: body, SessionID: ptr("big")}, nil))
	sr, err := b.client.AcceptNextSessionForQueue(ctx, "sq", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	require.Equal(t, "big", sr.SessionID())
	m := receiveN(ctx, t, sr, 1)[0]
	require.True(t, bytes.Equal(body, m.Body))
	require.NoError(t, sr.SetSessionState(ctx, body[:1<<20], nil), "state up to the configured max message size")
	st, err := sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(body[:1<<20], st))
	require.NoError(t, sr.CompleteMessage(ctx, m, nil))
}

func TestSessionMessagesNeedASessionReceiver(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1", "a2")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	m := receiveN(ctx, t, sr, 1)[0]
	require.NoError(t, sr.DeferMessage(ctx, m, nil))

	plain := b.receiver(t, "sq", nil)
	_, err = plain.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.Error(t, err, "a deferred session message is not handed to a receiver without the session")
	shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = plain.ReceiveMessages(shortCtx, 1, nil)
	require.Error(t, err, "a plain receiver cannot attach to a session queue")

	got, err := sr.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, sr.CompleteMessage(ctx, got[0], nil))
}

func TestReceiveAndDeleteSession(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1", "a2", "a3")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sr.Close(ctx) })
	msgs := receiveN(ctx, t, sr, 3)
	require.Equal(t, []string{"a1", "a2", "a3"}, bodies(msgs))
	// The emulator deletes a receive-and-delete message once its last frame is written, which
	// can come a moment after the client has read it.
	require.Eventually(t, func() bool {
		info, err := b.srv.Broker().GetQueue("sq")
		require.NoError(t, err)
		return info.Counts.Total == 0
	}, 5*time.Second, 5*time.Millisecond, "the queue keeps a receive-and-delete message")
}

func TestSendingToReceiveOnlyPathsIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}, topics: map[string][]string{"t1": {"s1"}}})
	ctx := testCtx(t)
	for _, path := range []string{"q1/$DeadLetterQueue", "t1/Subscriptions/s1"} {
		t.Run(path, func(t *testing.T) {
			s, err := b.client.NewSender(path, nil)
			require.NoError(t, err)
			require.Error(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
		})
	}
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total)
	sub, err := b.srv.Broker().GetSubscription("t1", "s1")
	require.NoError(t, err)
	require.Zero(t, sub.Counts.Total)
}

func TestTopicWithoutSubscriptionsAcceptsAndDrops(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{topics: map[string][]string{"t1": nil}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "t1").SendMessage(ctx, &azservicebus.Message{Body: []byte("nobody")}, nil))
	require.NoError(t, b.srv.Broker().CreateSubscription("t1", "late", broker.EntityProperties{}))
	require.NoError(t, b.sender(t, "t1").SendMessage(ctx, &azservicebus.Message{Body: []byte("somebody")}, nil))
	r, err := b.client.NewReceiverForSubscription("t1", "late", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(ctx) })
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "somebody", string(m.Body), "a subscription sees only messages sent after it was created")
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestTTLDoesNotExpireALockedMessage(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {LockDuration: time.Minute, DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("held"), TimeToLive: ptr(10 * time.Second)}, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("abandoned"), TimeToLive: ptr(10 * time.Second)}, nil))
	r := b.receiver(t, "q1", nil)
	msgs := receiveN(ctx, t, r, 2)
	clk.Advance(20 * time.Second)
	require.NoError(t, r.CompleteMessage(ctx, msgs[0], nil), "the lock holder may still settle after the TTL")
	require.NoError(t, r.AbandonMessage(ctx, msgs[1], nil))

	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "abandoned", string(d.Body), "expired once unlocked")
	require.Equal(t, "TTLExpiredException", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestRawAMQPMessagesKeepTheirSections(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	created := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	valueMsg := &azservicebus.AMQPAnnotatedMessage{
		Body:                  azservicebus.AMQPAnnotatedMessageBody{Value: map[string]any{"n": int64(7), "s": "v"}},
		ApplicationProperties: map[string]any{"app": "yes"},
		MessageAnnotations:    map[any]any{"x-custom": "note"},
		Header:                &azservicebus.AMQPAnnotatedMessageHeader{Priority: 7, Durable: true},
		Properties: &azservicebus.AMQPAnnotatedMessageProperties{
			MessageID: "raw-1", ContentEncoding: ptr("gzip"), CreationTime: &created,
			UserID: []byte("user"), GroupSequence: ptr(uint32(3)),
		},
	}
	require.NoError(t, s.SendAMQPAnnotatedMessage(ctx, valueMsg, nil))
	seqMsg := &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Sequence: [][]any{{"a", int64(1)}, {true}}}}
	require.NoError(t, s.SendAMQPAnnotatedMessage(ctx, seqMsg, nil))
	dataMsg := &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("one"), []byte("two")}}}
	require.NoError(t, s.SendAMQPAnnotatedMessage(ctx, dataMsg, nil))

	r := b.receiver(t, "q1", nil)
	msgs := receiveN(ctx, t, r, 3)
	v := msgs[0].RawAMQPMessage
	require.Equal(t, map[string]any{"n": int64(7), "s": "v"}, v.Body.Value)
	require.Equal(t, "yes", v.ApplicationProperties["app"])
	require.Equal(t, "note", v.MessageAnnotations["x-custom"])
	require.Equal(t, uint8(7), v.Header.Priority)
	require.True(t, v.Header.Durable)
	require.Equal(t, "raw-1", v.Properties.MessageID)
	require.Equal(t, "gzip", *v.Properties.ContentEncoding)
	require.True(t, created.Equal(*v.Properties.CreationTime))
	require.Equal(t, []byte("user"), v.Properties.UserID)
	require.Equal(t, uint32(3), *v.Properties.GroupSequence)
	require.Equal(t, [][]any{{"a", int64(1)}, {true}}, msgs[1].RawAMQPMessage.Body.Sequence)
	require.Equal(t, [][]byte{[]byte("one"), []byte("two")}, msgs[2].RawAMQPMessage.Body.Data)
	for _, m := range msgs {
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
	}
}

func TestEntityDefaultTimeToLiveCapsMessages(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {DefaultMessageTimeToLive: 30 * time.Second, DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("default")}, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("longer"), TimeToLive: ptr(time.Hour)}, nil))
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("shorter"), TimeToLive: ptr(10 * time.Second)}, nil))
	r := b.receiver(t, "q1", nil)
	peeked, err := r.PeekMessages(ctx, 3, nil)
	require.NoError(t, err)
	require.Len(t, peeked, 3)
	for i, want := range []time.Duration{30 * time.Second, 30 * time.Second, 10 * time.Second} {
		require.NotNil(t, peeked[i].ExpiresAt, "message %d", i)
		require.WithinDuration(t, peeked[i].EnqueuedTime.Add(want), *peeked[i].ExpiresAt, time.Second, "message %d", i)
	}
	clk.Advance(31 * time.Second)
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active, "all three expired")
	require.Equal(t, int64(3), info.Counts.DeadLetter)
}

func TestAcceptNextWithoutADeadlineUsesTheServerTimeout(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{"sq": {RequiresSession: true}},
		Config:        emulator.Config{AcceptNextTimeout: 200 * time.Millisecond},
		ClientOptions: testClientOptions(),
	})
	start := time.Now()
	_, err := srv.Client.AcceptNextSessionForQueue(context.Background(), "sq", nil)
	requireCode(t, err, azservicebus.CodeTimeout)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestSendWithoutSessionIDToASessionQueueIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: sessionQueue(0)})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	require.Error(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("no session")}, nil))
	// The sender keeps working for messages with a session id.
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("ok"), SessionID: ptr("a")}, nil))
	info, err := b.srv.Broker().GetQueue("sq")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Counts.Active)
}

func TestDeferredMessagesStillExpire(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, setupOpts{clock: clk, queues: map[string]broker.EntityProperties{"q1": {DeadLetteringOnMessageExpiration: true}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("parked"), TimeToLive: ptr(time.Minute)}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, m, nil))
	clk.Advance(2 * time.Minute)
	_, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	requireCode(t, err, azservicebus.CodeNotFound)
	dlq := b.receiver(t, "q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveN(ctx, t, dlq, 1)[0]
	require.Equal(t, "parked", string(d.Body))
	require.Equal(t, "TTLExpiredException", *d.DeadLetterReason)
	require.NoError(t, dlq.CompleteMessage(ctx, d, nil))
}

func TestScheduledMessageOverTheMaxSizeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	_, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: make([]byte, 300*1024)}}, time.Now().Add(time.Hour), nil)
	require.Error(t, err)
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Total, "nothing scheduled")
	_, err = s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: make([]byte, 200*1024)}}, time.Now().Add(time.Hour), nil)
	require.NoError(t, err, "a message under the limit can be scheduled")
}
