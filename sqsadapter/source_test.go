package sqsadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func send(t *testing.T, p publisher, group string, seqs ...int64) {
	t.Helper()
	for _, s := range seqs {
		require.NoError(t, p.Publish(t.Context(), group, map[string]any{contract.SequenceProperty: s}, []byte("b")))
	}
}

// peekVisible receives what a plain consumer gets from the queue now (and leaves it in flight).
func peekVisible(t *testing.T, l *local, url string) []types.Message {
	t.Helper()
	out, err := l.Client.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	require.NoError(t, err)
	return out.Messages
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	noDLQ, _ := l.queue(t, 0)
	good, _ := l.queue(t, 5)
	for _, tc := range []struct {
		name string
		cfg  sqsadapter.Config
		want string
		is   error
	}{
		{"no client", sqsadapter.Config{QueueURL: good}, "Client is required", sqsadapter.ErrConfig},
		{"no queue", sqsadapter.Config{Client: l.Client}, "QueueURL is required", sqsadapter.ErrConfig},
		{"visibility not whole seconds", sqsadapter.Config{Client: l.Client, QueueURL: good, Visibility: 1500 * time.Millisecond}, "Visibility 1.5s", sqsadapter.ErrConfig},
		{"visibility over 12h", sqsadapter.Config{Client: l.Client, QueueURL: good, Visibility: 13 * time.Hour}, "Visibility 13h0m0s", sqsadapter.ErrConfig},
		{"wait over 20s", sqsadapter.Config{Client: l.Client, QueueURL: good, Wait: 21 * time.Second}, "Wait 21s", sqsadapter.ErrConfig},
		{"max messages", sqsadapter.Config{Client: l.Client, QueueURL: good, MaxMessages: 11}, "MaxMessages 11", sqsadapter.ErrConfig},
		{"linger", sqsadapter.Config{Client: l.Client, QueueURL: good, Visibility: 2 * time.Second, Linger: 2 * time.Second}, "Linger 2s", sqsadapter.ErrConfig},
		{"no redrive policy", sqsadapter.Config{Client: l.Client, QueueURL: noDLQ}, "has no RedrivePolicy", sqsadapter.ErrConfig},
		{"missing queue", sqsadapter.Config{Client: l.Client, QueueURL: l.URL + "/000000000000/missing.fifo"}, "missing.fifo", sequencer.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := sqsadapter.New(tc.cfg)
			require.Nil(t, src)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestNewRefusesStandardQueue answers GetQueueAttributes as SQS does for a standard queue (no
// FifoQueue attribute): the local SQS has only FIFO queues.
func TestNewRefusesStandardQueue(t *testing.T) {
	t.Parallel()
	l := newLocalWith(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Amz-Target") == "AmazonSQS.GetQueueAttributes" {
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				_ = json.NewEncoder(w).Encode(map[string]any{"Attributes": map[string]string{"VisibilityTimeout": "30"}})
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	_, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: l.URL + "/000000000000/std"})
	require.ErrorIs(t, err, sqsadapter.ErrConfig)
	require.ErrorContains(t, err, "is not a FIFO queue")
}

// TestLingerReleasesUnacceptedGroups: a group received with nobody to take it is released
// after Linger, long before its visibility would lapse.
func TestLingerReleasesUnacceptedGroups(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 30 * time.Second, Wait: time.Second, Linger: 300 * time.Millisecond})
	send(t, pub, "a", 1)
	send(t, pub, "b", 1)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	other := map[string]string{"a": "b", "b": "a"}[sess.ID()]
	require.Eventually(t, func() bool {
		ms := peekVisible(t, l, pub.url)
		if len(ms) == 0 {
			return false
		}
		require.Len(t, ms, 1)
		require.Equal(t, other, ms[0].Attributes["MessageGroupId"], "the held group stays held")
		require.Equal(t, "2", ms[0].Attributes["ApproximateReceiveCount"])
		return true
	}, 5*time.Second, 100*time.Millisecond, "group %q released", other)
	require.NoError(t, sess.Close(t.Context()))
}

// TestAccept: a session for a named group at once, a second one refused while the first is
// open; with nothing of the group here it is idle at once. A group received and offered is
// the session's that Accept opens for it.
func TestAccept(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 5 * time.Second, Wait: time.Second})
	sess, err := src.Accept(ctxT(t), "g")
	require.NoError(t, err)
	require.Equal(t, "g", sess.ID())
	_, err = src.Accept(ctxT(t), "g")
	require.ErrorIs(t, err, sequencer.ErrSessionLocked)
	start := time.Now()
	msgs, err := sess.Receive(ctxT(t), 10)
	require.NoError(t, err, "idle: an empty slice and no error")
	require.NotNil(t, msgs)
	require.Empty(t, msgs)
	require.Less(t, time.Since(start), time.Second, "nothing of the group in flight: idle at once")
	require.NoError(t, sess.Close(t.Context()))

	send(t, pub, "g", 1, 2)
	send(t, pub, "other", 1)
	sess, err = src.AcceptNext(ctxT(t)) // one receive: g's two messages, then other's
	require.NoError(t, err)
	require.Equal(t, "g", sess.ID(), "the group with the oldest message first")
	got, err := sess.Receive(ctxT(t), 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, m := range got {
		require.Equal(t, "g", m.SessionID)
		require.EqualValues(t, i+1, m.Properties[contract.SequenceProperty])
		require.EqualValues(t, 1, m.DeliveryCount)
		require.False(t, m.EnqueuedTime.IsZero())
		require.NotEmpty(t, m.MessageID)
		rec := m.Raw.(*sqsadapter.Received)
		require.NotEmpty(t, rec.ReceiptHandle)
		require.NotEmpty(t, rec.SequenceNumber)
		require.NoError(t, sess.Complete(t.Context(), m))
	}
	require.NoError(t, sess.Close(t.Context()))

	other, err := src.Accept(ctxT(t), "other")
	require.NoError(t, err)
	ms, err := other.Receive(ctxT(t), 10)
	require.NoError(t, err)
	require.Len(t, ms, 1, "the offered group's message")
	require.Equal(t, "other", ms[0].SessionID)
	require.NoError(t, other.Complete(t.Context(), ms[0]))
	require.NoError(t, other.Close(t.Context()))
	sess, err = src.Accept(ctxT(t), "g")
	require.NoError(t, err, "a closed session's group can be accepted again")
	require.NoError(t, sess.Close(t.Context()))
}

// TestRenewLockKeepsTheGroup runs the local SQS on a fake clock: without RenewLock the
// visibility lapses after Visibility, with it the group stays held and the message can be
// completed.
func TestRenewLockKeepsTheGroup(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	l := newLocal(t, clk)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	send(t, pub, "g", 1)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 1)
	require.NoError(t, err)
	require.Len(t, m, 1)
	until := sess.LockedUntil()
	require.WithinDuration(t, time.Now().Add(10*time.Second), until, 2*time.Second)

	clk.Advance(8 * time.Second)
	renewed, err := sess.RenewLock(t.Context())
	require.NoError(t, err)
	require.True(t, renewed.After(until), "renewed %v after %v", renewed, until)
	clk.Advance(8 * time.Second) // 16s after the receive: lapsed without the renewal
	require.Empty(t, peekVisible(t, l, pub.url), "the renewed message stays invisible")
	require.NoError(t, sess.Complete(t.Context(), m[0]))
	require.NoError(t, sess.Close(t.Context()))

	send(t, pub, "g", 2)
	sess, err = src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err = sess.Receive(ctxT(t), 1)
	require.NoError(t, err)
	require.Len(t, m, 1)
	clk.Advance(11 * time.Second) // lapsed
	_, err = sess.RenewLock(t.Context())
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	require.NoError(t, sess.Close(t.Context()))
}

// TestSourceCloseReleases: Close releases what sessions and offers hold, at once.
func TestSourceCloseReleases(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	url, _ := l.queue(t, 5)
	src, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: url, Visibility: 30 * time.Second, Wait: time.Second, Linger: 20 * time.Second})
	require.NoError(t, err)
	pub := publisher{c: l.Client, url: url}
	send(t, pub, "a", 1)
	send(t, pub, "b", 1)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	_, err = sess.Receive(ctxT(t), 10)
	require.NoError(t, err)
	require.NoError(t, src.Close(t.Context()))
	require.Len(t, peekVisible(t, l, url), 2, "both groups are visible again")
	_, err = src.AcceptNext(ctxT(t))
	require.ErrorIs(t, err, sqsadapter.ErrClosed)
	_, err = src.Accept(ctxT(t), "a")
	require.ErrorIs(t, err, sqsadapter.ErrClosed)
}

// TestThrottled: a settlement SQS refuses as throttled is ErrSettlementRefused and the message
// stays held; other calls refused so are ErrTransient.
func TestThrottled(t *testing.T) {
	t.Parallel()
	var throttle atomic.Bool
	l := newLocalWith(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("X-Amz-Target") {
			case "AmazonSQS.DeleteMessage", "AmazonSQS.ChangeMessageVisibilityBatch":
				if throttle.Load() {
					w.Header().Set("Content-Type", "application/x-amz-json-1.0")
					w.Header().Set("X-Amzn-Query-Error", "ThrottlingException;Sender")
					w.WriteHeader(http.StatusBadRequest)
					_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#ThrottlingException", "message": "Rate exceeded"})
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	send(t, pub, "g", 1, 2) // the second keeps the first's completion from being kept (see Complete)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 2)
	require.NoError(t, err)
	require.Len(t, m, 2)
	throttle.Store(true)
	err = sess.Complete(t.Context(), m[0])
	require.ErrorIs(t, err, sequencer.ErrSettlementRefused)
	require.NotErrorIs(t, err, sequencer.ErrLockLost)
	_, err = sess.RenewLock(t.Context())
	require.ErrorIs(t, err, sqsadapter.ErrTransient)
	require.NotErrorIs(t, err, sequencer.ErrSettlementRefused)
	throttle.Store(false)
	require.NoError(t, sess.Complete(t.Context(), m[0]), "still held: a later completion lands")
	require.NoError(t, sess.Complete(t.Context(), m[1]))
	require.NoError(t, sess.Close(t.Context()))
}

// TestLastCompletionWaitsForClose: the completion that would leave nothing of the group in
// flight is deleted when the session closes, so the group is nobody else's until then; a
// completion after it deletes it first, and a kept one cannot be settled again.
func TestLastCompletionWaitsForClose(t *testing.T) {
	t.Parallel()
	var deletes atomic.Int64
	l := newLocalWith(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessage" {
				deletes.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	})
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	send(t, pub, "g", 1, 2)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 2)
	require.NoError(t, err)
	require.Len(t, m, 2)
	require.NoError(t, sess.Complete(t.Context(), m[0]))
	require.EqualValues(t, 1, deletes.Load(), "another message of the group is held: deleted at once")
	require.NoError(t, sess.Complete(t.Context(), m[1]))
	require.EqualValues(t, 1, deletes.Load(), "the last one in flight: kept")
	err = sess.Complete(t.Context(), m[1])
	require.ErrorIs(t, err, sequencer.ErrLockLost, "a kept completion is settled")
	require.ErrorIs(t, sess.Abandon(t.Context(), m[1]), sequencer.ErrLockLost)
	other, err := src.Accept(ctxT(t), "g")
	require.ErrorIs(t, err, sequencer.ErrSessionLocked, "still this session's: %v", other)

	send(t, pub, "g", 3)
	require.Empty(t, peekVisible(t, l, pub.url), "the group is in flight until the session closes")
	require.NoError(t, sess.Close(t.Context()))
	require.EqualValues(t, 2, deletes.Load(), "deleted at Close, not released")
	sess, err = src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	again, err := sess.Receive(ctxT(t), 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.EqualValues(t, 3, again[0].Properties[contract.SequenceProperty], "only the new message: the completed ones are gone")
	require.NoError(t, sess.Complete(t.Context(), again[0]))
	require.NoError(t, sess.Close(t.Context()))
	require.EqualValues(t, 3, deletes.Load())
}

// TestDeleteAtClose: with DeleteAtClose a session's completions make no call; Close deletes them
// with one DeleteMessageBatch, before it releases what was not settled; a dead-lettering deletes
// those kept first. A session that never closes leaves its completions at the queue: after the
// visibility lapses they come back, in order, and a completion asked for then is refused.
func TestDeleteAtClose(t *testing.T) {
	t.Parallel()
	var calls sync.Map // X-Amz-Target → *atomic.Int64
	count := func(target string) int64 {
		n, _ := calls.LoadOrStore(target, new(atomic.Int64))
		return n.(*atomic.Int64).Load()
	}
	l := newLocalWith(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := calls.LoadOrStore(strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS."), new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			next.ServeHTTP(w, r)
		})
	})
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 2 * time.Second, Wait: time.Second, Deletes: sqsadapter.DeleteAtClose})
	require.Equal(t, sequencer.Capabilities{CompletionsAtClose: sqsadapter.MaxReceive}, src.Capabilities())

	t.Run("closed", func(t *testing.T) {
		send(t, pub, "g", 1, 2, 3, 4)
		sess, m := acceptReceive(t, src, 4)
		for _, x := range m[:3] {
			require.NoError(t, sess.Complete(t.Context(), x))
		}
		require.ErrorIs(t, sess.Complete(t.Context(), m[0]), sequencer.ErrLockLost, "a kept completion is settled")
		require.Zero(t, count("DeleteMessage")+count("DeleteMessageBatch"), "nothing deleted before Close")
		require.NoError(t, sess.Close(t.Context()))
		require.EqualValues(t, 1, count("DeleteMessageBatch"), "one batch at Close")
		require.Zero(t, count("DeleteMessage"))
		sess, again := acceptReceive(t, src, 1) // only the message left unsettled comes back
		require.EqualValues(t, 4, again[0].Properties[contract.SequenceProperty])
		require.NoError(t, sess.Complete(t.Context(), again[0]))
		require.NoError(t, sess.Close(t.Context()))
		require.EqualValues(t, 1, count("DeleteMessage"), "one kept completion: DeleteMessage")
		require.Empty(t, peekVisible(t, l, pub.url))
	})

	t.Run("dead-lettered", func(t *testing.T) {
		send(t, pub, "d", 1, 2)
		sess, m := acceptReceive(t, src, 2)
		require.NoError(t, sess.Complete(t.Context(), m[0]))
		before := count("DeleteMessage")
		require.NoError(t, sess.DeadLetter(t.Context(), m[1], sequencer.DeadLetterParams{Reason: "r"}))
		require.EqualValues(t, before+2, count("DeleteMessage"), "the kept completion, then the dead-lettered message")
		require.NoError(t, sess.Close(t.Context()))
	})

	t.Run("lapsed", func(t *testing.T) {
		send(t, pub, "x", 1, 2)
		sess, m := acceptReceive(t, src, 2)
		require.NoError(t, sess.Complete(t.Context(), m[0]))
		time.Sleep(time.Until(sess.LockedUntil()) + time.Second)
		require.ErrorIs(t, sess.Complete(t.Context(), m[1]), sequencer.ErrLockLost, "completing after the visibility lapsed")
		other, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: pub.url, Visibility: 2 * time.Second, Wait: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close(context.Background()) })
		sess2, err := other.AcceptNext(ctxT(t))
		require.NoError(t, err)
		again, err := sess2.Receive(ctxT(t), 10)
		require.NoError(t, err)
		require.Equal(t, []any{int64(1), int64(2)}, []any{again[0].Properties[contract.SequenceProperty], again[1].Properties[contract.SequenceProperty]},
			"the kept completion was not deleted: both come back, in order")
		for _, x := range again {
			require.NoError(t, sess2.Complete(t.Context(), x))
		}
		require.NoError(t, sess2.Close(t.Context()))
		_ = sess.Close(t.Context())
	})
}

// acceptReceive accepts the next group of src and receives its n messages.
func acceptReceive(t *testing.T, src *sqsadapter.Source, n int) (sequencer.Session, []*sequencer.Message) {
	t.Helper()
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 10)
	require.NoError(t, err)
	require.Len(t, m, n)
	return sess, m
}

// TestUndecodableAttributeIsKept: an attribute that does not decode is kept as its raw value,
// so the engine sees the broken contract (and dead-letters with the reason) instead of losing it.
func TestUndecodableAttributeIsKept(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	_, err := l.Client.SendMessage(t.Context(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(pub.url), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("x"), MessageBody: aws.String("b"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"Sequence": {DataType: aws.String("Number"), StringValue: aws.String("3")},
			"IsLast":   {DataType: aws.String("String.bool"), StringValue: aws.String("maybe")},
		}})
	require.NoError(t, err)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 1)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"Sequence": int64(3), "IsLast": "maybe"}, m[0].Properties)
	_, _, err = contract.Parse(m[0].Properties, contract.SequenceProperty, contract.LastProperty)
	require.Error(t, err)
	require.NoError(t, sess.Close(t.Context()))
}

// TestDeadLetterAgainIsDeduplicated: when the delete after the dead-letter copy fails, the
// message stays; dead-lettering it again leaves one copy in the dead-letter queue.
func TestDeadLetterAgainIsDeduplicated(t *testing.T) {
	t.Parallel()
	var failDelete atomic.Bool
	l := newLocalWith(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessage" && failDelete.Load() {
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.Header().Set("X-Amzn-Query-Error", "ThrottlingException;Sender")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#ThrottlingException", "message": "Rate exceeded"})
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	send(t, pub, "g", 1)
	sess, err := src.AcceptNext(ctxT(t))
	require.NoError(t, err)
	m, err := sess.Receive(ctxT(t), 1)
	require.NoError(t, err)
	p := sequencer.DeadLetterParams{Reason: "HandlerFailed", Description: "boom"}
	failDelete.Store(true)
	require.ErrorIs(t, sess.DeadLetter(t.Context(), m[0], p), sequencer.ErrSettlementRefused)
	failDelete.Store(false)
	require.NoError(t, sess.DeadLetter(t.Context(), m[0], p))
	require.NoError(t, sess.Close(t.Context()))
	require.Empty(t, peekVisible(t, l, pub.url))
	dl, err := deadLetters(t.Context(), l.Client, src.DeadLetterQueueURL(), "g")
	require.NoError(t, err)
	require.Len(t, dl, 1, "the second copy is dropped by deduplication")
	require.Equal(t, "HandlerFailed", dl[0].Reason)
	require.Equal(t, "boom", dl[0].Description)
	require.EqualValues(t, 1, dl[0].Properties[contract.SequenceProperty])
}

// TestRenewAlongsideCompletions: the engine renews in the background while it completes; a
// renewal that finds a message just deleted is no lost lock.
func TestRenewAlongsideCompletions(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 10 * time.Second, Wait: time.Second})
	for round := range 3 {
		group := fmt.Sprint("g", round)
		send(t, pub, group, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
		sess, err := src.AcceptNext(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, group, sess.ID())
		var msgs []*sequencer.Message
		for ctx := ctxT(t); len(msgs) < 10 && ctx.Err() == nil; {
			ms, err := sess.Receive(ctx, 10)
			require.NoError(t, err)
			msgs = append(msgs, ms...)
		}
		require.Len(t, msgs, 10)
		stop := make(chan struct{})
		renewErr := make(chan error, 1)
		go func() {
			defer close(renewErr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := sess.RenewLock(t.Context()); err != nil {
					renewErr <- err
					return
				}
			}
		}()
		for _, m := range msgs {
			require.NoError(t, sess.Complete(t.Context(), m))
		}
		close(stop)
		require.NoError(t, <-renewErr)
		require.NoError(t, sess.Close(t.Context()))
	}
}

// TestLostReceiveAnswerIsRetried: a receive whose answer is lost (the connection cut after the
// queue handed the messages out) is retried by the SDK with the same attempt id, and the queue
// answers the retry with the same messages: the group is served at once, not held in flight by
// nobody until its visibility lapses.
func TestLostReceiveAnswerIsRetried(t *testing.T) {
	t.Parallel()
	var cut atomic.Bool
	emu := sqs.New(sqs.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" || cut.Load() {
			emu.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		emu.ServeHTTP(rec, r)
		if strings.Contains(rec.Body.String(), "ReceiptHandle") && cut.CompareAndSwap(false, true) {
			conn, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	l := &local{URL: srv.URL, Client: awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("any", "any", "")})} // the SDK's retries
	src, pub := newSource(t, l, sqsadapter.Config{Visibility: 30 * time.Second, Wait: time.Second})
	send(t, pub, "g", 1, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	sess, err := src.AcceptNext(ctx)
	require.NoError(t, err, "the group comes at once")
	m, err := sess.Receive(ctx, 10)
	require.NoError(t, err)
	require.Len(t, m, 2)
	require.True(t, cut.Load(), "the first answer was lost")
	require.EqualValues(t, 1, m[0].DeliveryCount, "the retry is the same receive, not another")
	for _, x := range m {
		require.NoError(t, sess.Complete(t.Context(), x))
	}
	require.NoError(t, sess.Close(t.Context()))
}
