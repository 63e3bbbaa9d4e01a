package sbadapter_test

import (
	"context"
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
	sequencertest.RunSessionConformance(t, func(t *testing.T) (sequencer.SessionSource, sequencertest.Publisher) {
		b := setup(t, 0)
		return b.source, senderPublisher{b.sender}
	}, &sequencertest.ConformanceOptions{Wait: 3 * time.Second})
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
