package publisher_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/publisher"
)

type discard struct{}

func (discard) SendMessage(context.Context, *azservicebus.Message, *azservicebus.SendMessageOptions) error {
	return nil
}

// BenchmarkPublish measures the publisher's own work per message (session id,
// sequence, properties), with a sender that does nothing.
func BenchmarkPublish(b *testing.B) {
	p, err := publisher.New(discard{}, &publisher.Config{Strategy: publisher.Fallback{publisher.Entity(), publisher.Repository()}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m := &azservicebus.Message{ApplicationProperties: map[string]any{"Owner": "o", "Repo": "r", "EntityType": "issue", "EntityId": int64(7)}}
		if _, err := p.Publish(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
	}
}
