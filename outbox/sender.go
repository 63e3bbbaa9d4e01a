package outbox

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/publisher"
)

// Sender sends messages to one queue or topic. SDKSender adapts an *azservicebus.Sender;
// tests wrap it to inject failures.
type Sender interface {
	// SendMessages sends msgs, in order, and returns how many of the leading ones the
	// broker accepted (all of them when err is nil).
	SendMessages(ctx context.Context, msgs []*azservicebus.Message) (sent int, err error)
	// Close releases the sender.
	Close(ctx context.Context) error
}

// SDKSender is a Sender over an *azservicebus.Sender: SendMessages packs the messages
// into as few SendMessageBatch calls as the link allows (publisher.SendInBatches).
type SDKSender struct {
	Sender *azservicebus.Sender
}

var _ Sender = SDKSender{}

// SendMessages implements Sender.
func (s SDKSender) SendMessages(ctx context.Context, msgs []*azservicebus.Message) (int, error) {
	return publisher.SendInBatches(ctx, s.Sender, msgs)
}

// Close implements Sender.
func (s SDKSender) Close(ctx context.Context) error { return s.Sender.Close(ctx) }

// ClientSenders returns the RelayConfig.NewSender that opens an SDKSender per entity on
// client, the default when RelayConfig.Client is set.
func ClientSenders(client *azservicebus.Client) func(ctx context.Context, entity string) (Sender, error) {
	return func(_ context.Context, entity string) (Sender, error) {
		s, err := client.NewSender(entity, nil)
		if err != nil {
			return nil, fmt.Errorf("new sender for %q: %w", entity, err)
		}
		return SDKSender{Sender: s}, nil
	}
}
