package publisher_test

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/publisher"
)

// printer is a Sender that prints instead of sending (an *azservicebus.Sender in
// production).
type printer struct{}

func (printer) SendMessage(_ context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	fmt.Println(*m.SessionID, m.ApplicationProperties["Sequence"], m.ApplicationProperties["IsLast"] == true)
	return nil
}

func Example() {
	p, err := publisher.New(printer{}, &publisher.Config{
		// owner/repo/entity_type/entity_id, falling back to owner/repo/repository.
		Strategy: publisher.Fallback{publisher.Entity(), publisher.Repository()},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	pr := func() map[string]any {
		return map[string]any{"Owner": "octocat", "Repo": "hello-world", "EntityType": "pull_request", "EntityId": int64(42)}
	}
	push := map[string]any{"Owner": "octocat", "Repo": "hello-world"}

	_, _ = p.Publish(ctx, &azservicebus.Message{ApplicationProperties: pr()}, nil)
	_, _ = p.Publish(ctx, &azservicebus.Message{ApplicationProperties: push}, nil)
	_, _ = p.Publish(ctx, &azservicebus.Message{ApplicationProperties: pr()}, &publisher.PublishOptions{Last: true})
	// Output:
	// octocat/hello-world/pull_request/42 1 false
	// octocat/hello-world/repository 1 false
	// octocat/hello-world/pull_request/42 2 true
}
