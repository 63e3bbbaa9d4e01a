package sbadapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

type senderPublisher struct{ s *azservicebus.Sender }

func (p senderPublisher) Publish(ctx context.Context, sessionID string, props map[string]any, body []byte) error {
	return p.s.SendMessage(ctx, &azservicebus.Message{SessionID: &sessionID, ApplicationProperties: props, Body: body}, nil)
}

// TestSessionConformance runs the sequencer's Session/SessionSource suite on the adapter over
// the emulator: the same suite the fake broker passes.
func TestSessionConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	clients := map[sequencer.SessionSource]*azservicebus.Client{}
	sequencertest.RunSessionConformance(t, func(t *testing.T) (sequencer.SessionSource, sequencertest.Publisher) {
		b := setup(t, 3*time.Second) // a short lock, for LockLapseRedelivers
		mu.Lock()
		clients[b.source] = b.client
		mu.Unlock()
		return b.source, senderPublisher{b.sender}
	}, &sequencertest.ConformanceOptions{
		Wait:         3 * time.Second,
		Capabilities: sequencer.Capabilities{Deferral: true, Peek: true, SessionState: true, SessionLock: true},
		DeadLetters: func(ctx context.Context, src sequencer.SessionSource, sessionID string) ([]sequencertest.DeadLettered, error) {
			mu.Lock()
			c := clients[src]
			mu.Unlock()
			return peekDeadLetters(ctx, c, sessionID)
		},
	})
}

// peekDeadLetters returns what the dead-letter queue of "sq" holds of a session.
func peekDeadLetters(ctx context.Context, c *azservicebus.Client, sessionID string) ([]sequencertest.DeadLettered, error) {
	r, err := c.NewReceiverForQueue("sq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close(context.WithoutCancel(ctx)) }()
	msgs, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		return nil, err
	}
	var out []sequencertest.DeadLettered
	for _, m := range msgs {
		if m.SessionID == nil || *m.SessionID != sessionID {
			continue
		}
		out = append(out, sequencertest.DeadLettered{SessionID: *m.SessionID, Body: m.Body, Properties: m.ApplicationProperties,
			Reason: deref(m.DeadLetterReason), Description: deref(m.DeadLetterErrorDescription)})
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestServiceBusStoreConformance runs the state store suite with the Service Bus store on real
// adapter sessions, so session state goes through the SDK and the emulator.
func TestServiceBusStoreConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	storetest.Run(t, func(*testing.T) sequencer.StateStore { return sbstate.New(nil) },
		func(t *testing.T, id string) sequencer.Session {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sess, err := b.source.Accept(ctx, id)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sess.Close(context.Background()) })
			return sess
		})
}
