package operator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
)

// fifoDLQ is a FIFO dead-letter queue in memory that behaves as SQS does for the operator: a
// receive hands out at most perGroup messages of a group, and none of a group while one of its
// messages is in flight.
type fifoDLQ struct {
	mu       sync.Mutex
	perGroup int
	msgs     []*fifoMsg
	sent     []*azservicebus.Message
	// failAfter makes Send fail once this many copies were sent in all (0: never).
	failAfter int
}

type fifoMsg struct {
	m              *azservicebus.ReceivedMessage
	inFlight, gone bool
	// elsewhere > 0: another receiver (a replay that crashed) holds it for so many more counts.
	elsewhere int
}

var _ operator.DeadLetterQueue = (*fifoDLQ)(nil)

func (q *fifoDLQ) add(group string, seq int64, reason string) {
	n := int64(len(q.msgs) + 1)
	q.msgs = append(q.msgs, &fifoMsg{m: &azservicebus.ReceivedMessage{
		MessageID: fmt.Sprintf("%s-%d", group, seq), SessionID: &group, SequenceNumber: &n, Body: []byte("b"),
		DeadLetterReason:      &reason,
		ApplicationProperties: map[string]any{"Sequence": seq, "DeadLetterReason": reason},
	}})
}

func (q *fifoDLQ) Target() string { return "orders.fifo" }

func (q *fifoDLQ) Receive(context.Context) ([]*azservicebus.ReceivedMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*azservicebus.ReceivedMessage
	blocked, taken := map[string]bool{}, map[string]int{}
	for _, x := range q.msgs {
		if x.gone {
			continue
		}
		g := *x.m.SessionID
		if x.inFlight || x.elsewhere > 0 {
			blocked[g] = true
			continue
		}
		if blocked[g] || taken[g] == q.perGroup {
			blocked[g] = true
			continue
		}
		x.inFlight = true
		taken[g]++
		out = append(out, x.m)
	}
	return out, nil
}

func (q *fifoDLQ) find(m *azservicebus.ReceivedMessage) *fifoMsg {
	return q.msgs[*m.SequenceNumber-1]
}

func (q *fifoDLQ) Release(_ context.Context, msgs []*azservicebus.ReceivedMessage) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.find(m).inFlight = false
	}
	return nil
}

func (q *fifoDLQ) Delete(_ context.Context, msgs []*azservicebus.ReceivedMessage) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		x := q.find(m)
		if !x.inFlight {
			return 0, errors.New("delete of a message not in flight")
		}
		x.gone, x.inFlight = true, false
	}
	return len(msgs), nil
}

func (q *fifoDLQ) Send(_ context.Context, copies []*azservicebus.Message) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, c := range copies {
		if q.failAfter > 0 && len(q.sent) == q.failAfter {
			return i, errors.New("throttled")
		}
		q.sent = append(q.sent, c)
	}
	return len(copies), nil
}

func (q *fifoDLQ) Visible(context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, x := range q.msgs {
		if !x.gone && !x.inFlight {
			n++
		}
	}
	return n, nil
}

func (q *fifoDLQ) InFlight(context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, x := range q.msgs {
		if x.inFlight || x.elsewhere > 0 {
			n++
		}
		if x.elsewhere > 0 {
			x.elsewhere-- // the other receiver's visibility timeout runs out
		}
	}
	return n, nil
}

// left returns the sequences of group still in the queue, and how many messages are in flight.
func (q *fifoDLQ) left(group string) (seqs []int64, inFlight int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, x := range q.msgs {
		if x.inFlight {
			inFlight++
		}
		if !x.gone && *x.m.SessionID == group {
			seqs = append(seqs, x.m.ApplicationProperties["Sequence"].(int64))
		}
	}
	return seqs, inFlight
}

// sentOf returns the sequences of the copies sent, in order, and checks what a copy carries.
func (q *fifoDLQ) sentOf(t *testing.T) []int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []int64
	for _, c := range q.sent {
		require.NotContains(t, c.ApplicationProperties, "DeadLetterReason")
		require.Equal(t, "orders.fifo", c.ApplicationProperties[operator.PropertyReplayedFromDLQ])
		require.Contains(t, *c.MessageID, "/dlq-")
		out = append(out, c.ApplicationProperties["Sequence"].(int64))
	}
	return out
}

type noSessions struct{}

func (noSessions) AcceptNext(context.Context) (sequencer.Session, error) {
	return nil, sequencer.ErrNoSession
}
func (noSessions) Accept(context.Context, string) (sequencer.Session, error) {
	return nil, sequencer.ErrNoSession
}

func queueOperator(t *testing.T, q *fifoDLQ) *operator.Operator {
	t.Helper()
	st := memory.New()
	op, err := operator.New(operator.Config{DeadLetters: q, Sessions: noSessions{}, Store: st, Lister: st})
	require.NoError(t, err)
	return op
}

// On a FIFO dead-letter queue a listing reads what is offered, counts the rest as unread and
// gives everything back; a replay goes in rounds until a session's every dead letter is sent,
// in order, and deleted, and leaves the others in the queue, none in flight.
func TestQueueDLQ(t *testing.T) {
	ctx := t.Context()
	tests := []struct {
		name      string
		params    operator.DLQReplayParams
		failAfter int
		wantSent  []int64
		wantLeftA []int64
		wantErr   bool
	}{
		{name: "one session", params: operator.DLQReplayParams{SessionID: "a"}, wantSent: []int64{1, 2, 3, 4, 5}},
		{name: "all", params: operator.DLQReplayParams{All: true}, wantSent: []int64{1, 2, 1, 2, 3, 4, 5}}, // rounds: a1-2, b1-2, a3-4, a5,
		{name: "a reason", params: operator.DLQReplayParams{All: true, Reason: "InvalidSequence"}, wantSent: []int64{}, wantLeftA: []int64{1, 2, 3, 4, 5}},
		{name: "dry run", params: operator.DLQReplayParams{SessionID: "a", DryRun: true}, wantSent: []int64{}, wantLeftA: []int64{1, 2, 3, 4, 5}},
		{name: "send fails", params: operator.DLQReplayParams{SessionID: "a"}, failAfter: 3, wantSent: []int64{1, 2, 3}, wantLeftA: []int64{4, 5}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &fifoDLQ{perGroup: 2, failAfter: tt.failAfter}
			for seq := range int64(5) {
				q.add("a", seq+1, "HandlerFailed")
			}
			q.add("b", 1, "HandlerFailed")
			q.add("b", 2, "HandlerFailed")
			op := queueOperator(t, q)

			list, err := op.DLQList(ctx, operator.DLQListParams{})
			require.NoError(t, err)
			require.Len(t, list.Messages, 4, "two of each group: the rest wait behind them")
			require.Equal(t, 3, list.Unread)
			_, inFlight := q.left("a")
			require.Zero(t, inFlight, "the listing gave everything back")

			res, err := op.DLQReplay(ctx, tt.params)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantSent, append([]int64{}, q.sentOf(t)...))
			left, inFlight := q.left("a")
			require.Equal(t, tt.wantLeftA, left)
			require.Zero(t, inFlight, "nothing stays in flight")
			if tt.params.DryRun {
				require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{1, 2}}}, res.Sessions)
			}
			if tt.failAfter > 0 {
				// Run again: the rest goes.
				q.failAfter = 0
				_, err := op.DLQReplay(ctx, tt.params)
				require.NoError(t, err)
				left, _ := q.left("a")
				require.Empty(t, left)
				require.Equal(t, []int64{1, 2, 3, 4, 5}, q.sentOf(t))
			}
		})
	}
}

func TestQueueDLQRefusesATarget(t *testing.T) {
	op := queueOperator(t, &fifoDLQ{perGroup: 10})
	_, err := op.DLQReplay(t.Context(), operator.DLQReplayParams{All: true, Target: "other.fifo"})
	require.ErrorIs(t, err, operator.ErrInvalidInput)
}

// Dead letters a crashed replay holds are waited for, up to the wait, and replayed once their
// visibility timeout lapses.
func TestQueueDLQWaitsForACrashedReplay(t *testing.T) {
	q := &fifoDLQ{perGroup: 10}
	q.add("a", 1, "HandlerFailed")
	q.add("a", 2, "HandlerFailed")
	q.msgs[0].elsewhere, q.msgs[1].elsewhere = 3, 3
	op := queueOperator(t, q)
	res, err := op.DLQReplay(t.Context(), operator.DLQReplayParams{SessionID: "a", Wait: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, q.sentOf(t))
	require.Equal(t, 2, res.Sessions[0].Completed)

	q = &fifoDLQ{perGroup: 10}
	q.add("a", 1, "HandlerFailed")
	q.msgs[0].elsewhere = 100
	op = queueOperator(t, q)
	res, err = op.DLQReplay(t.Context(), operator.DLQReplayParams{SessionID: "a", Wait: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.Empty(t, q.sentOf(t), "still held when the wait ran out: left for the next replay")
	require.Empty(t, res.Sessions)
}
