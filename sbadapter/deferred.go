package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/sequencer"
)

// deferredFetchFailures counts the fetches of deferred messages (Session.ReceiveDeferred) that
// failed while their caller still wanted the answer: the process's count.
var deferredFetchFailures atomic.Uint64

// DeferredFetchFailures returns how many fetches of deferred messages failed in this process
// (seqbus_deferred_fetch_failures_total). Each one ended its run with the session's messages
// left at the broker; a fetch that ends because its caller's ctx ended is not counted.
func DeferredFetchFailures() uint64 { return deferredFetchFailures.Load() }

// errStillDeferred is wrapped by the error of a fetch whose not-found answer a peek
// contradicts: the peek shows the message still deferred at that number.
var errStillDeferred = errors.New("the broker answered not found, but a peek shows the message still deferred at that number")

// fetchDeferred makes one receive-deferred request.
func (s *Session) fetchDeferred(ctx context.Context, brokerSequences []int64) ([]*azservicebus.ReceivedMessage, error) {
	var msgs []*azservicebus.ReceivedMessage
	err := s.call(ctx, func(ctx context.Context) (err error) {
		msgs, err = s.r.ReceiveDeferredMessages(ctx, brokerSequences, nil)
		return err
	})
	return msgs, err
}

// isNotFound reports whether the broker answered a receive-deferred request with not-found.
func isNotFound(err error) bool {
	return errors.Is(mapError(opSession, "", err), sequencer.ErrNotFound)
}

// confirmNotDeferred takes the second look at a deferred message the broker answered not found
// for: a peek of the session from its number. The message is not deferred there if the peek
// answers and shows no message of the session at that number, or shows it in another state (an
// active one whose deferral did not land comes back through a receive, like any active
// message). A peek that shows it deferred contradicts the answer. A failed peek is returned as
// it is: on a partitioned entity the SDK's peek lacks the session-id the service wants there,
// as its receive-deferred does, and such an answer says nothing about the message.
func (s *Session) confirmNotDeferred(ctx context.Context, seq int64) (bool, error) {
	msgs, err := s.Peek(ctx, seq, 1)
	if err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		return true, nil
	}
	m := msgs[0]
	if m.SequenceNumber == nil {
		return false, fmt.Errorf("peek session %q: a message without a sequence number", s.id)
	}
	return *m.SequenceNumber != seq || m.State != azservicebus.MessageStateDeferred, nil
}

// deferredFetchFailed counts a failed fetch unless ctx ended, and returns err.
func deferredFetchFailed(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		deferredFetchFailures.Add(1)
	}
	return err
}

// receiveDeferredOneByOne fetches each of brokerSequences by itself, after the broker answered
// not found for them together (Service Bus fails the whole request when one number is unknown).
// A number is left out only when the broker answers not found for it alone and confirmNotDeferred
// agrees; any other answer fails the whole fetch, naming the session and the broker's answer.
func (s *Session) receiveDeferredOneByOne(ctx context.Context, brokerSequences []int64) ([]*sequencer.Message, error) {
	out := []*sequencer.Message{}
	for _, seq := range brokerSequences {
		one, err := s.fetchDeferred(ctx, []int64{seq})
		if err == nil {
			out = append(out, s.convert(one)...)
			continue
		}
		what := fmt.Sprintf("receive deferred %d", seq)
		if !isNotFound(err) {
			return nil, deferredFetchFailed(ctx, s.mapErr(what, err))
		}
		notDeferred, perr := s.confirmNotDeferred(ctx, seq)
		switch {
		case perr != nil:
			return nil, deferredFetchFailed(ctx, fmt.Errorf("sbadapter: %s session %q: the broker answered not found (%v) and the peek to confirm it failed: %w", what, s.id, err, perr))
		case !notDeferred:
			return nil, deferredFetchFailed(ctx, fmt.Errorf("sbadapter: %s session %q: %w (its answer: %v)", what, s.id, errStillDeferred, err))
		}
		s.logger.DebugContext(ctx, "sbadapter: deferred message not there", slog.String("session_id", s.id), slog.Int64("broker_sequence", seq))
	}
	return out, nil
}
