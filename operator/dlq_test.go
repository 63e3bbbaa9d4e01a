package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sbadapter"
)

func TestReplayMessageID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 125)
	tests := []struct {
		name string
		id   string
		seq  int64
		want string
	}{
		{"short", "order-7/3", 42, "order-7/3/dlq-42"},
		{"empty", "", 1, "/dlq-1"},
		{"too long: hashed", long, 9, ""}, // checked below: 64 hex digits and the suffix
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := operator.ReplayMessageID(tt.id, tt.seq)
			if tt.name == "too long: hashed" {
				require.Len(t, got, 64+len("/dlq-9"))
				require.True(t, strings.HasSuffix(got, "/dlq-9"))
				require.Equal(t, got, operator.ReplayMessageID(tt.id, tt.seq), "deterministic")
				return
			}
			require.Equal(t, tt.want, got)
		})
	}
	require.NotEqual(t, operator.ReplayMessageID("a/1", 5), operator.ReplayMessageID("a/1", 6),
		"a message dead-lettered again (new broker sequence number) gets a new copy id")
}

// deadLetter receives the given sequences of session id and dead-letters them with reason, in
// that order.
func (b *bundle) deadLetter(t *testing.T, id, reason string, order ...int64) {
	t.Helper()
	ctx := testCtx(t)
	r, err := b.srv.Client.AcceptSessionForQueue(ctx, queue, id, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close(ctx)) }()
	bySeq := map[int64]*azservicebus.ReceivedMessage{}
	for len(bySeq) < len(order) {
		msgs, err := r.ReceiveMessages(ctx, 10, nil)
		require.NoError(t, err)
		for _, m := range msgs {
			bySeq[m.ApplicationProperties["Sequence"].(int64)] = m
		}
	}
	for _, s := range order {
		require.NoError(t, r.DeadLetterMessage(ctx, bySeq[s], &azservicebus.DeadLetterOptions{
			Reason: &reason, ErrorDescription: to(fmt.Sprintf("step %d failed", s)),
		}))
	}
}

func to[T any](v T) *T { return &v }

// TestReplay: a session's dead letters go back in sequence order as copies that duplicate
// detection lets through (a new MessageId), with session, body and properties kept; the other
// sessions' dead letters stay, and so do those of another reason when a reason is given.
func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, "servicebus", &setupOptions{queue: broker.EntityProperties{RequiresDuplicateDetection: true}})
	ctx := testCtx(t)
	b.publish(t, "b", 1, 1)
	b.deadLetter(t, "b", "HandlerFailed", 1)
	b.publish(t, "a", 6, 5, 2, 4, 6)
	b.deadLetter(t, "a", "HandlerFailed", 5, 2, 4)
	b.deadLetter(t, "a", "InvalidSequence", 6)
	require.Equal(t, []string{"b/1 HandlerFailed", "a/5 HandlerFailed", "a/2 HandlerFailed", "a/4 HandlerFailed", "a/6 InvalidSequence"}, b.deadLetters(t))

	list, err := b.op.DLQList(ctx, operator.DLQListParams{SessionID: "a", Reason: "HandlerFailed", Limit: 2})
	require.NoError(t, err)
	require.Len(t, list.Messages, 2)
	require.True(t, list.Truncated)
	require.Equal(t, "step 5 failed", list.Messages[0].Description)
	require.Equal(t, "a/5", list.Messages[0].MessageID)

	dry, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{SessionID: "a", Reason: "HandlerFailed", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{2, 4, 5}}}, dry.Sessions)
	require.Len(t, b.deadLetters(t), 5, "a dry run changes nothing")

	res, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{SessionID: "a", Reason: "HandlerFailed"})
	require.NoError(t, err)
	require.Equal(t, queue, res.Target)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{2, 4, 5}, Sent: 3, Completed: 3}}, res.Sessions)
	require.Equal(t, []string{"b/1 HandlerFailed", "a/6 InvalidSequence"}, b.deadLetters(t), "the rest stays")

	copies := b.drainSession(t, "a")
	require.Len(t, copies, 3, "duplicate detection let the copies through")
	for i, want := range []int64{2, 4, 5} {
		c := copies[i]
		require.Equal(t, want, c.ApplicationProperties["Sequence"], "in sequence order")
		require.Equal(t, "a", *c.SessionID)
		require.Equal(t, fmt.Sprintf("a step %d", want), string(c.Body))
		require.Equal(t, "step", c.ApplicationProperties["Kind"])
		require.Equal(t, false, c.ApplicationProperties["IsLast"])
		require.Equal(t, queue, c.ApplicationProperties[operator.PropertyReplayedFromDLQ])
		require.NotContains(t, c.ApplicationProperties, "DeadLetterReason")
		require.Nil(t, c.DeadLetterReason)
		require.True(t, strings.HasPrefix(c.MessageID, fmt.Sprintf("a/%d/dlq-", want)), c.MessageID)
	}

	_, err = b.op.DLQReplay(ctx, operator.DLQReplayParams{})
	require.ErrorIs(t, err, operator.ErrInvalidInput)
	all, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
	require.NoError(t, err)
	require.Len(t, all.Sessions, 2)
	require.Empty(t, b.deadLetters(t))
}

// TestReplayOfASubscriptionNeedsATarget: Service Bus cannot send to one subscription, so a
// subscription's dead letters are replayed only to a target named explicitly.
func TestReplayOfASubscriptionNeedsATarget(t *testing.T) {
	t.Parallel()
	sessions := broker.EntityProperties{RequiresSession: true}
	b := setup(t, "servicebus", &setupOptions{
		topics: map[string]emulatortest.Topic{"events": {Subscriptions: map[string]emulatortest.Subscription{"seq": {Properties: sessions}}}},
		entity: sbadapter.Entity{Topic: "events", Subscription: "seq"},
	})
	ctx := testCtx(t)
	b.publish(t, "a", 2, 1)
	sub, err := b.srv.Client.AcceptSessionForSubscription(ctx, "events", "seq", "a", nil)
	require.NoError(t, err)
	msgs, err := sub.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.NoError(t, sub.DeadLetterMessage(ctx, msgs[0], nil))
	require.NoError(t, sub.Close(ctx))

	_, err = b.op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
	require.ErrorIs(t, err, operator.ErrReplayTarget)
	require.Contains(t, err.Error(), "--target events")
	require.Len(t, b.deadLetters(t), 1, "nothing changed")

	res, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{All: true, Target: "events"})
	require.NoError(t, err)
	require.Equal(t, "events", res.Target)
	require.Empty(t, b.deadLetters(t))
	sub, err = b.srv.Client.AcceptSessionForSubscription(ctx, "events", "seq", "a", nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close(context.Background())) }()
	msgs, err = sub.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Equal(t, "events/Subscriptions/seq", msgs[0].ApplicationProperties[operator.PropertyReplayedFromDLQ])
}

// TestReplayAgainAfterAnInterruptedRun: a replay cut short after sending its copies, before
// completing their dead letters, leaves them in the dead-letter queue; the next replay sends
// them again under the same MessageIds, which duplicate detection drops, and completes them.
func TestReplayAgainAfterAnInterruptedRun(t *testing.T) {
	t.Parallel()
	b := setup(t, "servicebus", &setupOptions{queue: broker.EntityProperties{
		RequiresDuplicateDetection: true, LockDuration: time.Second,
	}})
	b.publish(t, "a", 3, 1, 2, 3)
	b.deadLetter(t, "a", "HandlerFailed", 1, 2, 3)

	// The first run is cut off right after its batch went out, as by a crash.
	ctx, cancel := context.WithCancel(testCtx(t))
	op, err := operator.New(operator.Config{
		Entity: b.entity, Client: b.srv.NewClient(t, nil), Sessions: b.worker, Store: b.store, Lister: b.lister,
		AfterReplaySend: func(int) { cancel() },
	})
	require.NoError(t, err)
	res, err := op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 3, res.Sessions[0].Sent)
	require.Equal(t, 3, res.Sessions[0].Uncompleted, "the completions did not happen")
	require.Len(t, b.deadLetters(t), 3)

	// Their locks expire; the replay runs again.
	res, err = b.op.DLQReplay(testCtx(t), operator.DLQReplayParams{All: true, Wait: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{1, 2, 3}, Sent: 3, Completed: 3}}, res.Sessions)
	require.Empty(t, b.deadLetters(t))
	copies := b.drainSession(t, "a")
	require.Len(t, copies, 3, "the copies sent twice went in once: duplicate detection dropped the second ones")
}

// TestDLQMessage: one dead letter by its broker sequence number, with its properties and its
// body cut at the bound; a number the dead-letter queue does not hold is ErrUnknownMessage.
func TestDLQMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, "servicebus", nil)
	ctx := testCtx(t)
	b.publish(t, "m", 2, 1, 2)
	b.deadLetter(t, "m", "HandlerFailed", 2)
	list, err := b.op.DLQList(ctx, operator.DLQListParams{})
	require.NoError(t, err)
	require.Len(t, list.Messages, 1)
	bseq := list.Messages[0].BrokerSequence

	tests := []struct {
		name          string
		maxBody       int
		wantBody      string
		wantTruncated bool
	}{
		{"whole body", 0, "m step 2", false},
		{"cut at the bound", 3, "m s", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := b.op.DLQMessage(testCtx(t), operator.DLQMessageParams{BrokerSequence: bseq, MaxBody: tt.maxBody})
			require.NoError(t, err)
			require.Equal(t, "m", m.SessionID)
			require.Equal(t, int64(2), m.Sequence)
			require.Equal(t, "HandlerFailed", m.Reason)
			require.Equal(t, "step 2 failed", m.Description)
			require.Equal(t, "step", m.Properties["Kind"])
			require.Equal(t, tt.wantBody, string(m.Body))
			require.Equal(t, len("m step 2"), m.BodySize)
			require.Equal(t, tt.wantTruncated, m.BodyTruncated)
		})
	}
	_, err = b.op.DLQMessage(ctx, operator.DLQMessageParams{BrokerSequence: bseq + 100})
	require.ErrorIs(t, err, operator.ErrUnknownMessage)
	_, err = b.op.DLQMessage(ctx, operator.DLQMessageParams{BrokerSequence: 0})
	require.ErrorIs(t, err, operator.ErrInvalidInput)
}
