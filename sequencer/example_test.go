package sequencer_test

import (
	"context"
	"fmt"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
)

// Messages published in reverse order are handled in application order. With the reorder
// window, none of them is deferred at the broker.
func ExampleEngine_RunSession() {
	broker := sequencertest.NewBroker(nil)
	for seq := int64(3); seq >= 1; seq-- {
		broker.PublishSeq("order-42", seq, seq == 3)
	}
	engine, err := sequencer.NewEngine(sequencer.EngineConfig{}, sequencer.EngineDeps{
		Store: sequencertest.NewStore().Client(nil),
		Handler: sequencer.HandlerFunc(func(_ context.Context, m *sequencer.Message) error {
			fmt.Printf("handled %s #%d (last: %v)\n", m.SessionID, m.Sequence, m.IsLast)
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	sess, err := broker.NewClient(nil).AcceptNext(context.Background())
	if err != nil {
		panic(err)
	}
	outcome, err := engine.RunSession(context.Background(), sess, nil)
	fmt.Println(outcome, err, engine.Stats().BrokerCalls["defer"], broker.Len())
	// Output:
	// handled order-42 #1 (last: false)
	// handled order-42 #2 (last: false)
	// handled order-42 #3 (last: true)
	// ended <nil> 0 0
}
