package publisher_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/publisher"
)

// batchSpy is a real sender that counts its SendMessageBatch calls and fails one of them.
type batchSpy struct {
	*azservicebus.Sender
	mu       sync.Mutex
	calls    int
	failCall int
}

var boom = errors.New("injected send failure")

func (s *batchSpy) SendMessageBatch(ctx context.Context, b *azservicebus.MessageBatch, o *azservicebus.SendMessageBatchOptions) error {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n == s.failCall {
		return boom
	}
	return s.Sender.SendMessageBatch(ctx, b, o)
}

// TestPublishBatchOnTheEmulator: one batch per session; a session whose batch fails is
// reported with its unsent items while the others go out; publishing those items again
// sends them with the same numbers; messages too large for one batch go in several.
func TestPublishBatchOnTheEmulator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-"})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	require.NoError(t, srv.Broker().CreateQueue("q", broker.EntityProperties{RequiresSession: true, RequiresDuplicateDetection: true}))
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	require.NoError(t, err)
	defer client.Close(context.Background())
	s, err := client.NewSender("q", nil)
	require.NoError(t, err)
	defer s.Close(context.Background())
	spy := &batchSpy{Sender: s, failCall: 2}
	p, err := publisher.New(spy, &publisher.Config{Strategy: publisher.Composite{Properties: []string{"Key"}}})
	require.NoError(t, err)

	item := func(key string, last bool) publisher.BatchItem {
		return publisher.BatchItem{Message: &azservicebus.Message{Body: []byte(key), ApplicationProperties: map[string]any{"Key": key}}, Last: last}
	}
	items := []publisher.BatchItem{item("a", false), item("b", false), item("c", false), item("a", false),
		item("b", false), item("c", false), item("a", true), item("b", true), item("c", true)}
	res, err := p.PublishBatch(ctx, items, nil)
	var bErr *publisher.BatchError
	require.ErrorAs(t, err, &bErr)
	require.ErrorIs(t, err, boom)
	require.Len(t, bErr.Sessions, 1)
	require.Equal(t, "b", bErr.Sessions[0].SessionID)
	require.Equal(t, []int{1, 4, 7}, bErr.Sessions[0].Unsent)
	require.Equal(t, 3, spy.calls, "one batch per session")
	require.Equal(t, publisher.Published{SessionID: "b", Sequence: 3}, res[7])

	var again []publisher.BatchItem
	for _, i := range bErr.Sessions[0].Unsent {
		again = append(again, items[i])
	}
	res, err = p.PublishBatch(ctx, again, nil)
	require.NoError(t, err)
	require.Equal(t, []publisher.Published{{"b", 1}, {"b", 2}, {"b", 3}}, res, "the same numbers")

	// Three messages of 100 KiB do not fit one 256 KiB batch.
	big := make([]publisher.BatchItem, 3)
	for i := range big {
		big[i] = publisher.BatchItem{Message: &azservicebus.Message{Body: bytes.Repeat([]byte{'x'}, 100*1024),
			ApplicationProperties: map[string]any{"Key": "big"}}, Last: i == 2}
	}
	before := spy.calls
	_, err = p.PublishBatch(ctx, big, nil)
	require.NoError(t, err)
	require.Equal(t, 2, spy.calls-before)

	want := map[string][]int64{"a": {1, 2, 3}, "b": {1, 2, 3}, "c": {1, 2, 3}, "big": {1, 2, 3}}
	for range want {
		r, err := client.AcceptNextSessionForQueue(ctx, "q", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		require.NoError(t, err)
		var got []int64
		for len(got) < 3 {
			msgs, err := r.ReceiveMessages(ctx, 3, nil)
			require.NoError(t, err)
			for _, m := range msgs {
				got = append(got, m.ApplicationProperties["Sequence"].(int64))
				require.Equal(t, publisher.MessageID(r.SessionID(), got[len(got)-1]), m.MessageID)
				require.Equal(t, len(got) == 3, m.ApplicationProperties["IsLast"] == true)
			}
		}
		require.Equal(t, want[r.SessionID()], got, r.SessionID())
		require.NoError(t, r.Close(ctx))
	}
}
