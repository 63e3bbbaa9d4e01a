package operator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
)

// heldReceive is a fifoDLQ whose first Receive, once it has received, holds its dead letters in
// flight until release is closed.
type heldReceive struct {
	*fifoDLQ
	received chan struct{}
	release  chan struct{}
	first    bool
}

func (h *heldReceive) Receive(ctx context.Context) ([]*azservicebus.ReceivedMessage, error) {
	msgs, err := h.fifoDLQ.Receive(ctx)
	if h.first {
		h.first = false
		close(h.received)
		<-h.release
	}
	return msgs, err
}

// stateOnly is a state store that holds no messages.
type stateOnly struct{ sequencer.StateStore }

// One Operator reads a FIFO dead-letter queue once at a time: a listing alongside another
// waits for its turn (it would find the dead letters in flight and miss them), gives up when
// its context ends, and the next one sees every dead letter.
func TestQueueDLQReadsTakeTurns(t *testing.T) {
	t.Parallel()
	q := &heldReceive{fifoDLQ: &fifoDLQ{perGroup: 10}, received: make(chan struct{}), release: make(chan struct{}), first: true}
	for seq := int64(1); seq <= 3; seq++ {
		q.add("a", seq, "HandlerFailed")
	}
	st := memory.New()
	// A store that holds no messages: the listings read the queue only.
	op, err := operator.New(operator.Config{DeadLetters: q, Sessions: noSessions{}, Store: stateOnly{st}, Lister: st})
	require.NoError(t, err)

	release := sync.OnceFunc(func() { close(q.release) })
	t.Cleanup(release)
	first := make(chan *operator.DLQListResult, 1)
	go func() {
		res, err := op.DLQList(t.Context(), operator.DLQListParams{})
		if err != nil {
			res = nil
		}
		first <- res
	}()
	<-q.received // the first listing holds the dead letters in flight

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = op.DLQList(ctx, operator.DLQListParams{})
	require.ErrorIs(t, err, context.Canceled, "the second listing waits for its turn, not reads the queue alongside")
	_, err = op.DLQReplay(ctx, operator.DLQReplayParams{All: true})
	require.ErrorIs(t, err, context.Canceled, "a replay waits too")

	release()
	res := <-first
	require.NotNil(t, res)
	require.Len(t, res.Messages, 3)
	res, err = op.DLQList(t.Context(), operator.DLQListParams{})
	require.NoError(t, err)
	require.Len(t, res.Messages, 3, "the next listing sees every dead letter again")
}
